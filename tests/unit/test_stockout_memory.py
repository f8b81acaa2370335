"""The stockout memory (tpuctl/tpu/stockouts.py): remembered per offer, forgotten after hours, and a damaged or
hostile file is one line and ignored, never a traceback or a failed command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl.tpu import stockouts

NOW = 1_800_000_000.0


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "tpuctl" / "stockouts.json"


def test_remembered_per_offer_and_forgotten_after_hours(state: Path) -> None:
    warnings: list[str] = []
    stockouts.remember("p", "us-west4-a", "v5litepod-16", "spot", "zone", now=NOW, warn=warnings.append)
    stockouts.remember("p", "us-east5-a", "v5p-8", "on-demand", "stuck", now=NOW - 60, warn=warnings.append)
    assert stockouts.recent("p", "us-west4-a", "v5litepod-16", "spot", now=NOW + 600) == NOW
    assert stockouts.recent("p", "us-west4-a", "v5litepod-16", "on-demand", now=NOW + 600) is None  # another kind
    assert stockouts.recent("q", "us-west4-a", "v5litepod-16", "spot", now=NOW + 600) is None  # another project
    assert stockouts.recent("p", "us-west4-a", "v5litepod-16", "spot", now=NOW + stockouts.FORGET_AFTER_S) is None
    assert stockouts.forget_older_than(30, now=NOW) == 1
    assert [r["zone"] for r in json.loads(state.read_text())] == ["us-west4-a"]
    assert os.stat(state).st_mode & 0o777 == 0o600 and os.stat(state.parent).st_mode & 0o777 == 0o700
    assert warnings == []


def test_a_new_stockout_of_the_same_offer_replaces_the_old(state: Path) -> None:
    stockouts.remember("p", "z", "v4-8", "spot", "zone", now=NOW)
    stockouts.remember("p", "z", "v4-8", "spot", "internal", now=NOW + 5)
    records = json.loads(state.read_text())
    assert [(r["why"], r["when"]) for r in records] == [("internal", NOW + 5)]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe",
        b'{"a": 1}',
        b'[{"project": "p"}]',
        b'[{"project": "p", "zone": "z", "type": "t", "kind": "k", "why": "w", "when": "x"}]',
        b"[" * 100_000,  # nested past json's recursion limit
        b"0" * (stockouts.FILE_LIMIT + 1),
    ],
)
def test_a_damaged_file_is_one_line_and_ignored(state: Path, content: bytes) -> None:
    state.parent.mkdir(mode=0o700)
    state.write_bytes(content)
    warnings: list[str] = []
    assert stockouts.recent("p", "z", "t", "k", now=NOW, warn=warnings.append) is None
    assert len(warnings) == 1 and "\n" not in warnings[0] and str(state) in warnings[0]
    stockouts.remember("p", "z", "t", "k", "zone", now=NOW, warn=warnings.append)  # replaced by a good file
    assert stockouts.recent("p", "z", "t", "k", now=NOW, warn=warnings.append) == NOW


def test_a_file_that_is_not_a_file_and_a_folder_that_is_not_ours(state: Path) -> None:
    state.parent.mkdir(mode=0o700)
    os.mkfifo(state)  # reading a FIFO would block forever
    warnings: list[str] = []
    assert stockouts.recent("p", "z", "t", "k", warn=warnings.append) is None
    state.unlink()
    os.chmod(state.parent, 0o777)  # others could plant a link where the file goes: not written
    stockouts.remember("p", "z", "t", "k", "zone", warn=warnings.append)
    assert not state.exists() and len(warnings) == 2 and "cannot write the stockout memory" in warnings[1]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_hostile_bytes_never_raise(content: bytes) -> None:
    folder = Path(os.environ["XDG_STATE_HOME"]) / "tpuctl-hostile"
    path = folder / "tpuctl" / "stockouts.json"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(content)
    old = os.environ["XDG_STATE_HOME"]
    os.environ["XDG_STATE_HOME"] = str(folder)
    try:
        warnings: list[str] = []
        found = stockouts.recent("p", "z", "t", "k", now=NOW, warn=warnings.append)
        assert found is None or isinstance(found, float)
        assert all("\n" not in line for line in warnings)
    finally:
        os.environ["XDG_STATE_HOME"] = old

"""Node specs: hostile names, labels, accelerators and times; comparing against existing nodes."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuctl.cloud.nodes import nodespec
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.inputs.errors import FAILED, TpuctlError

SPEC = NodeSpec(name="my-tpu", project="tpuctl-test", zone="us-central2-b", runtime_version="tpu-ubuntu2204-base", accelerator_type="v4-8")


def test_labels_parse_like_gcloud() -> None:
    assert nodespec.parse_labels(("team=ml,run=a1", "empty=")) == {"team": "ml", "run": "a1", "empty": ""}


@pytest.mark.parametrize("value", ["Team=ml", "team", "=x", "team=ML", "1a=b", "a=b,a=c", "k=" + "x" * 64, "a=b c"])
def test_bad_labels_are_refused(value: str) -> None:
    with pytest.raises(TpuctlError):
        nodespec.parse_labels((value,))


def test_too_many_labels() -> None:
    with pytest.raises(TpuctlError, match="at most 64"):
        nodespec.parse_labels((",".join(f"k{i}=v" for i in range(65)),))


@given(st.lists(st.text(max_size=40), max_size=4))
def test_hostile_labels_give_labels_or_one_line_error(values: list[str]) -> None:
    try:
        labels = nodespec.parse_labels(tuple(values))
    except TpuctlError as err:
        assert "\n" not in err.message
        return
    for key, value in labels.items():
        assert nodespec.LABEL_KEY.match(key) and nodespec.LABEL_VALUE.match(value)


@given(st.text(alphabet=string.ascii_letters + string.digits + "-_ .", max_size=70))
def test_hostile_node_names(name: str) -> None:
    try:
        assert nodespec.check_name(name) == name
    except TpuctlError as err:
        assert "\n" not in err.message
        return
    assert name[0].islower() and len(name) <= 63 and not name.endswith("-")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("v4-8", None, None), ("v4-8", None, None)),
        ((None, "v5litepod", "2x4"), (None, "V5LITE_POD", "2x4")),
        ((None, "V6E", "4x4"), (None, "V6E", "4x4")),
        ((None, "v4", "2x2x2"), (None, "V4", "2x2x2")),
        ((None, "v5e", "2x4"), (None, "V5LITE_POD", "2x4")),
        # A generation newer than tpuctl's table goes to the API, which says whether a zone has it.
        (("v9-8", None, None), ("v9-8", None, None)),
    ],
)
def test_accelerators(args: tuple[str | None, str | None, str | None], expected: tuple[str | None, str | None, str | None]) -> None:
    assert nodespec.parse_accelerator(*args) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("v4", None, None), "not a TPU accelerator type"),
        (("v4-8x", None, None), "not a TPU accelerator type"),
        (("v4-0", None, None), "not a TPU accelerator type"),
        ((None, None, None), "no accelerator type"),
        ((None, "v5litepod", None), "go together"),
        (("v4-8", "v4", "2x2x1"), "not both"),
        ((None, "v9000", "2x2"), "unknown TPU generation"),
        ((None, "v4", "2x"), "not a TPU topology"),
        ((None, "v4", "0x2"), "not a TPU topology"),
    ],
)
def test_bad_accelerators(args: tuple[str | None, str | None, str | None], message: str) -> None:
    with pytest.raises(TpuctlError, match=message):
        nodespec.parse_accelerator(*args)


@pytest.mark.parametrize("value", ["6h", "2d", "90m", "2026-12-01T00:00:00Z", "2026-12-01T00:00:00+02:00"])
def test_valid_until(value: str) -> None:
    assert nodespec.check_valid_until(value) == value


@pytest.mark.parametrize("value", ["6 hours", "-1h", "2026-12-01", "2026-12-01T00:00:00", "tomorrow"])
def test_bad_valid_until(value: str) -> None:
    with pytest.raises(TpuctlError):
        nodespec.check_valid_until(value)


def test_specs_round_trip_and_damage_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    spec = NodeSpec(**{**SPEC.__dict__, "labels": {"a": "b"}, "startup_script": "#!/bin/sh\necho hi\n"})
    path = nodespec.save(spec)
    assert path.is_relative_to(tmp_path)
    assert nodespec.load("tpuctl-test", "us-central2-b", "my-tpu") == spec
    assert nodespec.load("tpuctl-test", "us-central2-b", "other") is None
    path.write_text('{"name": 3, "bogus": 1}')
    with pytest.raises(TpuctlError, match="damaged"):
        nodespec.load("tpuctl-test", "us-central2-b", "my-tpu")


def test_a_saved_spec_is_private_and_never_written_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tpuctl recreate` runs what the spec says: no other user may write it or plant a link where it goes."""
    import os
    import stat

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    folder = nodespec.spec_path(SPEC.project, SPEC.zone, SPEC.name).parent
    folder.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    for name in (f"{SPEC.name}.json", f"{SPEC.name}.{os.getpid()}.tmp"):  # the target and the old, predictable temporary name
        (folder / name).symlink_to(victim)
    path = nodespec.save(SPEC)
    assert victim.read_text() == "keep me\n" and not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert nodespec.load(SPEC.project, SPEC.zone, SPEC.name) == SPEC
    folder.chmod(0o777)  # once another user can write it, tpuctl writes nothing there
    with pytest.raises(TpuctlError, match="writable by other users"):
        nodespec.save(SPEC)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"a": ' * 100_000 + "1" + "}" * 100_000,
        "[]",
        '"spec"',
        "1" * 5000,
        '{"name": "my-tpu", "project": "p", "zone": "z", "runtime_version": "r", "labels": "a=b"}',
        '{"name": "my-tpu", "project": "p", "zone": "z", "runtime_version": "r", "labels": {"a": ["b"]}}',
        '{"name": "my-tpu", "project": "p", "zone": "z", "runtime_version": "r", "spot": "yes"}',
        '{"name": ["my-tpu"], "project": "p", "zone": "z", "runtime_version": "r"}',
        '{"project": "p", "zone": "z", "runtime_version": "r"}',
    ],
    ids=["arrays-100k", "objects-100k", "list", "string", "huge-int", "labels-str", "labels-list", "spot-str", "name-list", "no-name"],
)
def test_hostile_saved_specs_are_damaged_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    path = nodespec.save(SPEC)
    path.write_text(text)
    with pytest.raises(TpuctlError, match="is damaged") as damaged:
        nodespec.load(SPEC.project, SPEC.zone, SPEC.name)
    assert damaged.value.exit_code == FAILED and "\n" not in str(damaged.value)


@pytest.mark.parametrize("kind", ["directory", "huge", "not-utf8"])
def test_a_saved_spec_that_is_no_small_text_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    path = nodespec.spec_path(SPEC.project, SPEC.zone, SPEC.name)
    path.parent.mkdir(parents=True)
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"{" + b" " * (2 << 20) + b"}" if kind == "huge" else b'{"name": "\xff"}')
    with pytest.raises(TpuctlError) as refused:
        nodespec.load(SPEC.project, SPEC.zone, SPEC.name)
    assert refused.value.exit_code == FAILED

"""`tpuctl tail` against real TensorFlow writing summaries and checkpoints while the tail reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, tpuctl_cmd, wait_for

STEPS = 30


@pytest.mark.tf
def test_every_event_once_in_order_while_tensorflow_writes(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    writer = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "summary_writer.py"), str(model_dir), str(STEPS), str(tmp_path / "expected.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # The tail starts once TensorFlow has created its first events file: --until-idle counts from the tail's start,
    # and TensorFlow's import alone can outlast it on a loaded machine (then the tail ended before the first event).
    wait_for(lambda: writer.poll() is not None or any(model_dir.glob("train/events.out.tfevents.*")), timeout=120)
    tail = subprocess.Popen(
        tpuctl_cmd("tail", str(model_dir), "--json", "--interval", "0.1", "--until-idle", "8"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _, writer_err = writer.communicate(timeout=120)
    assert writer.returncode == 0, writer_err
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    scalars = [e for e in events if e["kind"] == "scalar"]
    expected = json.loads((tmp_path / "expected.json").read_text())
    got = [[e["run"], e["tag"], e["step"], e["value"]] for e in scalars]
    assert sorted(got) == sorted(expected)  # every event exactly once
    for run in ("train", "validation"):
        steps = [e["step"] for e in scalars if e["run"] == run and e["tag"] == "loss"]
        assert steps == sorted(steps), f"{run} out of order"  # in order per file
    files = {e["file"] for e in scalars}
    assert {f.split("/")[0] for f in files} == {"train", "validation"}  # the later run was picked up
    checkpoints = [e for e in events if e["kind"] == "checkpoint"]
    assert [c["step"] for c in checkpoints] == list(range(4, STEPS, 5))
    assert all(c["file"].startswith("checkpoints/ckpt-") and c["tag"] == "checkpoint" for c in checkpoints)
    others = {}
    for e in events:
        if e["kind"] == "other":
            others[e["tag"]] = others.get(e["tag"], 0) + e["value"]
    assert others == {"histograms": STEPS, "images": STEPS, "text": STEPS}
    assert not [e for e in events if e["kind"] == "damage"]
    assert set(events[0]) == {"kind", "run", "tag", "step", "value", "wall_time", "file"}
    # The same checkpoints copied or restored together (one mtime for all, as `gsutil -m cp` may leave them):
    # listed by step, not by name, where ckpt-14 sorts before ckpt-4 (issue 30).
    restored = tmp_path / "restored"
    shutil.copytree(model_dir / "checkpoints", restored / "checkpoints")
    for path in (restored / "checkpoints").iterdir():
        os.utime(path, (1_795_000_000, 1_795_000_000))
    again = subprocess.run(tpuctl_cmd("tail", str(restored), "--once", "--json"), capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    listed = [json.loads(line) for line in again.stdout.splitlines()]
    assert [c["step"] for c in listed if c["kind"] == "checkpoint"] == list(range(4, STEPS, 5))

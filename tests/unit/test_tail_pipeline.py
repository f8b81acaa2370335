"""`tpuctl tail` as people pipe it, on files TensorFlow and Keras wrote (issue 30)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.conftest import ROOT, run_tpuctl, tpuctl_cmd

EVENTS = ROOT / "tests" / "data" / "tfevents"


def test_tail_json_into_head_ends_quietly_on_a_finished_run(tmp_path: Path) -> None:
    """Nothing new is ever written to a finished run, so no write fails to say the reader is gone: tail must notice."""
    run = tmp_path / "model" / "logs" / "train"
    run.mkdir(parents=True)
    shutil.copy(EVENTS / "keras3-fit-train.tfevents", run / "events.out.tfevents.1795591673.vm.2844.0.v2")
    command = " ".join(tpuctl_cmd("tail", "--json", "--interval", "0.1", str(tmp_path / "model"))) + " | head -1"
    started = time.monotonic()
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 20, "tail went on polling for a reader that had gone"
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "scalar" and done.stderr == ""


def test_checkpoints_are_listed_by_step_not_by_name(tmp_path: Path) -> None:
    """Keras' ModelCheckpoint names, as its own docs write them: a listing puts ckpt-10 before ckpt-2."""
    folder = tmp_path / "model" / "checkpoints"
    folder.mkdir(parents=True)
    stamp = time.time() - 60
    for epoch in (10, 2, 1, 11, 3):
        path = folder / f"ckpt-{epoch}.weights.h5"  # unpadded, as TensorFlow names ckpt-N
        path.write_bytes(b"\x89HDF\r\n\x1a\n")
        os.utime(path, (stamp, stamp))  # restored together: one mtime for all
    result = run_tpuctl("tail", "--once", "--json", str(tmp_path / "model"))
    assert result.returncode == 0, result.stderr
    steps = [json.loads(line)["step"] for line in result.stdout.splitlines() if json.loads(line)["kind"] == "checkpoint"]
    assert steps == [1, 2, 3, 10, 11]

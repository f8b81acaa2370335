"""Launched runs that several test modules only read: one launch per test session, whichever module asks first.

Modules run on one xdist worker each (--dist loadfile), so two modules that read the same run may run on two
workers at once. The run is launched under an exclusive lock in the session's folder (under xdist the parent of
each worker's temporary folder; without it, this process's own), and the second module waits for it and reads the
same folders. A launch that did not finish leaves no record, and the next module that asks launches again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

# Backups every 8 steps, preempted after step 15: the second attempt restores step 8 and re-does 9 to 15.
PREEMPTED_ONCE_ARGS = ("--steps", "24", "--save-every", "8", "--preempt-at", "15", "--step-time", "0.3")
VIEW_SECRET = "VIEW_TEST_SECRET=hunter2-in-env"  # passed with --env: the published view must not carry it


@dataclass(frozen=True)
class LaunchedRun:
    model_dir: Path
    log_dir: Path
    returncode: int
    stderr: str


def preempted_once(tmp_path_factory: pytest.TempPathFactory) -> LaunchedRun:
    """fit_preempted_once.py launched by `tpuctl launch`, preempted once and restarted (test_time_report.py and
    test_tensorboard_page.py read it)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "shared-preempted-once"
    with (root / "shared-preempted-once.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = folder / "launched.json"
        if not record.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            argv = (
                "launch", str(SCRIPTS / "fit_preempted_once.py"), "--model-dir", str(folder / "model"), "--log-dir", str(folder / "logs"),
                "--env", VIEW_SECRET, "--", *PREEMPTED_ONCE_ARGS,
            )  # fmt: skip
            launched = run_tpuctl(*argv, timeout=240)
            record.write_text(json.dumps({"returncode": launched.returncode, "stderr": launched.stderr}))
        done = json.loads(record.read_text())
    return LaunchedRun(folder / "model", folder / "logs", done["returncode"], done["stderr"])

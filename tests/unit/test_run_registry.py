"""`tpuctl stacks` signals only a launch that is still alive (issue 29): a record left by a launch that
died, whose pid now belongs to another process (one with "tpuctl" in its command line too), is removed
and that process is left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tpuctl import private_files
from tpuctl.errors import TpuctlError
from tpuctl.runs import registry as run_registry


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """Another program of this user's that happens to mention tpuctl in its command line (an editor, `tail -f tpuctl.log`)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "tpuctl", "launch"])
    yield proc
    proc.kill()
    proc.wait()


def _stale_record(state: Path, pid: int, log_dir: Path) -> Path:
    """What a SIGKILLed launch leaves: its record, written and then no longer held by anyone."""
    folder = state / "tpuctl" / "running"
    folder.mkdir(parents=True, mode=0o700)
    path = folder / "20260101-000000-train-dead.json"
    record = {"run_id": "20260101-000000-train-dead", "pid": pid, "log_dir": str(log_dir), "started": time.time()}
    os.close(private_files.hold_new(path, json.dumps(record) + "\n"))
    return path


def test_a_stale_record_whose_pid_was_reused_is_removed_and_its_process_left_alone(
    state: Path, tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    record = _stale_record(state, bystander.pid, tmp_path)
    listed = run_tpuctl("stacks", "--list", env={**os.environ, "XDG_STATE_HOME": str(state)}, timeout=60)
    assert listed.returncode == 0 and listed.stdout == "", listed
    shown = run_tpuctl("stacks", "--wait", "1", env={**os.environ, "XDG_STATE_HOME": str(state)}, timeout=60)
    assert shown.returncode == 1 and shown.stderr.startswith("Error: no running launch of yours"), shown.stderr
    time.sleep(0.2)
    assert bystander.poll() is None, f"the bystander got a signal ({bystander.returncode})"
    assert not record.exists()


def test_a_record_written_without_a_lock_proves_nothing(state: Path, tmp_path: Path, bystander: subprocess.Popen[bytes]) -> None:
    """An older tpuctl's record (written whole, never locked) names a pid, nothing more."""
    folder = state / "tpuctl" / "running"
    folder.mkdir(parents=True, mode=0o700)
    record = {"run_id": "old", "pid": bystander.pid, "log_dir": str(tmp_path), "started": time.time()}
    (folder / "old.json").write_text(json.dumps(record))
    assert run_registry.running() == []
    assert not (folder / "old.json").exists() and bystander.poll() is None


def test_a_live_launch_is_found_while_registered_and_forgotten_after(state: Path, tmp_path: Path) -> None:
    with run_registry.registered("20260101-000000-train-live", tmp_path):
        (entry,) = run_registry.running()
        assert (entry.run_id, entry.pid) == ("20260101-000000-train-live", os.getpid())
    assert run_registry.running() == []


def test_a_launch_that_ends_after_it_was_found_is_not_signalled(state: Path, tmp_path: Path) -> None:
    with run_registry.registered("20260101-000000-train-gone", tmp_path):
        (entry,) = run_registry.running()
    previous = signal.signal(signal.SIGQUIT, lambda *_: pytest.fail("SIGQUIT reached a process that is not the launch"))
    try:
        with pytest.raises(TpuctlError, match="cannot signal launch 20260101-000000-train-gone"):
            run_registry.request_stacks(entry, wait_s=0.5)
    finally:
        signal.signal(signal.SIGQUIT, previous)

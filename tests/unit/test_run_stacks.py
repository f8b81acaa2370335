"""`tpuctl stacks` signals only a run that is still alive and answering (issues 29, 23): a record left by a launch
that died, whose pid now belongs to another process (one with "tpuctl" in its command line too), reads `lost`, and
that process is left alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tpuctl import endings
from tpuctl.endings import Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runs import records
from tpuctl.runs import stacks as stacks_request
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import NODE_DELETE, VmRecord


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


def _record(tmp_path: Path, run_id: str, pid: int, **fields: object) -> RunRecord:
    log_dir = tmp_path / run_id
    record = RunRecord(run_id, "local", "train.py", str(log_dir), time.time(), pid, socket.gethostname(), **fields)  # type: ignore[arg-type]
    records.write(record)
    return record


def test_a_dead_launchs_record_whose_pid_was_reused_reads_lost_and_its_process_is_left_alone(
    state: Path, tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    """What a SIGKILLed launch leaves: its record says running and answering, its folder's lock is held by nobody."""
    record = _record(tmp_path, "20260101-000000-train-dead", bystander.pid, answers_stacks=True)
    os.close(RunFolder(Path(record.log_dir)).claim(record.run_id))  # claimed, then the launch died
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    listed = run_tpuctl("stacks", "--list", env=env, timeout=60)
    assert listed.returncode == 0 and listed.stdout == "", listed
    shown = run_tpuctl("stacks", "--wait", "1", env=env, timeout=60)
    assert shown.returncode == 1 and shown.stderr.startswith("Error: no run of yours is running"), shown.stderr
    named = run_tpuctl("stacks", "20260101-000000-train-d", "--wait", "1", env=env, timeout=60)
    assert named.returncode == 1 and "is not running (lost)" in named.stderr, named.stderr
    time.sleep(0.2)
    assert bystander.poll() is None, f"the bystander got a signal ({bystander.returncode})"
    (found,) = records.read_all(print)
    assert found.state == Kind.LOST


def test_a_record_whose_folder_was_never_claimed_proves_nothing(state: Path, tmp_path: Path, bystander: subprocess.Popen[bytes]) -> None:
    """A record that says running names a pid, nothing more, unless its run holds the folder's lock."""
    _record(tmp_path, "old", bystander.pid, answers_stacks=True)
    (found,) = records.read_all(print)
    assert found.state == Kind.LOST
    with pytest.raises(TpuctlError, match="is not running"):
        stacks_request.request(found, wait_s=0.5)
    assert bystander.poll() is None


def test_a_live_run_answers_while_its_supervisor_says_so(state: Path, tmp_path: Path) -> None:
    record = _record(tmp_path, "20260101-000000-train-live", os.getpid())
    claim = RunFolder(Path(record.log_dir)).claim(record.run_id)
    try:
        with stacks_request.answering(record):
            (found,) = records.read_all(print)
            assert (found.run_id, found.pid, found.state, found.answers_stacks) == (record.run_id, os.getpid(), endings.RUNNING, True)
        (found,) = records.read_all(print)
        assert found.state == endings.RUNNING and not found.answers_stacks
        with pytest.raises(TpuctlError, match="has no stacks to show"):
            stacks_request.request(found, wait_s=0.5)
    finally:
        os.close(claim)


def test_a_run_that_ends_after_it_was_found_is_not_signalled(state: Path, tmp_path: Path) -> None:
    record = _record(tmp_path, "20260101-000000-train-gone", os.getpid())
    claim = RunFolder(Path(record.log_dir)).claim(record.run_id)
    with stacks_request.answering(record):
        (found,) = records.read_all(print)
    os.close(claim)
    previous = signal.signal(signal.SIGQUIT, lambda *_: pytest.fail("SIGQUIT reached a process that is not the launch"))
    try:
        with pytest.raises(TpuctlError, match="cannot signal launch 20260101-000000-train-gone"):
            stacks_request.request(found, wait_s=0.5)
    finally:
        signal.signal(signal.SIGQUIT, previous)


def test_a_record_is_written_whole_and_private(state: Path, tmp_path: Path) -> None:
    record = _record(tmp_path, "20260101-000000-train-private", 1)
    path = records.folder() / f"{record.run_id}.json"
    assert path.stat().st_mode & 0o777 == 0o600 and records.folder().stat().st_mode & 0o777 == 0o700
    assert RunRecord.from_json(json.loads(path.read_text())) == record


def test_answering_through_the_record_s_keeper_keeps_what_the_run_changed_meanwhile(state: Path, tmp_path: Path) -> None:
    """A run's own TPU VM moves zone while the supervisor answers stacks: the end of answering must not write back the
    record as it was when the supervisor started (issue 38: the zone, and the VM's fate, are what `runs` deletes by)."""
    from tpuctl.runs.recorded import Keeper

    keeper = Keeper(_record(tmp_path, "20260101-000000-train-move", os.getpid()), print)
    with stacks_request.answering(keeper.record, keeper.amend):
        keeper.amend(vm=VmRecord().naming("r20260101-000000-train-move", "p", "us-east5-a", NODE_DELETE))
        (found,) = records.read_all(print)
        assert found.vm is not None and (found.answers_stacks, found.vm.zone) == (True, "us-east5-a")
    (found,) = records.read_all(print)
    assert found.vm is not None and (found.answers_stacks, found.vm.zone, found.vm.created_node) == (False, "us-east5-a", "r20260101-000000-train-move")

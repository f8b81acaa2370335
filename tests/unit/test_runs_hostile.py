"""Issue 46: nothing signalled, written or deleted that is not the user's and the run's.

`stop` and `stacks` signal only a process proven to be its record's run (tpuctl/runs/proof.py); each kind of record
or folder that fails the proof is refused in one line, the process it names and the run whose folder it names left
alone, and nothing written. `--prune` deletes only this user's records, never through a link; a launch's view is
never published through a link out of its model dir; a record whose log_dir leads nowhere costs `report LOG_DIR/`
nothing. Real processes (a run that holds its folder as a launch does, a `sleep` as the unrelated process), real
folders, symlinks and modes; every command through tpuctl's own entry point, in this process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import _stat, wait_for
from tests.standins.cli_calls import Result, invoke
from tpuctl.runs import records
from tpuctl.runs.folder import RunFolder

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root (CI and these machines run the tests as root)")
OTHER_UID = 65534  # nobody
LIVE_ID = "20260101-000000-train-live"
FAKE_ID = "20260101-000000-other-fake"
# A run as a launch keeps one (recorded.kept): its folder claimed and its record written for as long as stdin is open.
LAUNCH = """\
import sys
from pathlib import Path
from tpuctl.runs import recorded
from tpuctl.runs.folder import RunFolder
with recorded.kept(RunFolder(Path(sys.argv[2])), sys.argv[1], "local", "train.py", print):
    print("held", flush=True)
    sys.stdin.read()
"""
# Another process of the user's that holds an exclusive flock on the file in argv: "someone" holds a run's lock.
LOCKER = "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()"


@dataclass
class Live:
    proc: subprocess.Popen[str]
    folder: Path
    others: list[subprocess.Popen[str]]  # what a test started beside it, ended with it

    @property
    def file(self) -> Path:
        return records.folder() / f"{LIVE_ID}.json"

    def raw(self) -> dict[str, object]:
        return dict(json.loads(self.file.read_text()))


def _holding(*argv: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


pytestmark = pytest.mark.usefixtures("home")  # tmp_path holds this test's state folder (XDG_STATE_HOME) and nothing else


@pytest.fixture
def live(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    """A running run of the user's: a process that claimed its log folder and keeps its record, as a launch does."""
    request.getfixturevalue("home")  # its state folder first: the process writes its record there
    folder = tmp_path / "logs" / LIVE_ID
    proc = _holding(LAUNCH, LIVE_ID, str(folder))
    made = Live(proc, folder, [])
    yield made
    for each in (proc, *made.others):
        _end(each)


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the user's that is no run: what a record's pid may name by now."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


def _start(pid: int) -> int:
    fields = _stat(pid)
    assert fields is not None
    return int(fields[19])


def _plant(raw: dict[str, object]) -> None:
    """A record file as a user's own hand (or a copy, or a bug) could leave it: 0600 in the user's records folder."""
    path = records.folder() / f"{raw['run_id']}.json"
    path.write_text(json.dumps(raw))
    path.chmod(0o600)


def _no_stop_request_anywhere(tmp_path: Path) -> list[Path]:
    return list(tmp_path.rglob("stop-requested"))


# --- stop and stacks: a record that fails the proof ---------------------------------------------------------------


def _another_runs_folder(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "run_id": FAKE_ID, "pid": bystander, "pid_start": _start(bystander), "answers_stacks": True})
    return FAKE_ID


def _an_edited_pid(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "pid": bystander, "pid_start": _start(bystander), "answers_stacks": True})
    return LIVE_ID


def _someone_elses_lock(live: Live, bystander: int, tmp_path: Path) -> str:
    """A folder whose claim names the bystander, locked by yet another process: the lock is held, not by the record's pid."""
    folder = tmp_path / "logs" / FAKE_ID
    folder.mkdir(mode=0o700)
    claim = folder / "run.json"
    claim.write_text(json.dumps({"run_id": FAKE_ID, "pid": bystander, "started": time.time()}))
    claim.chmod(0o600)
    live.others.append(_holding(LOCKER, str(claim)))
    _plant({**live.raw(), "run_id": FAKE_ID, "log_dir": str(folder), "pid": bystander, "pid_start": _start(bystander), "answers_stacks": True})
    return FAKE_ID


def _a_reused_pid(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "pid_start": _start(live.proc.pid) + 1, "answers_stacks": True})
    return LIVE_ID


def _no_start_time(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**{k: v for k, v in live.raw().items() if k != "pid_start"}, "answers_stacks": True})
    return LIVE_ID


def _a_folder_others_can_write(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "answers_stacks": True})
    live.folder.chmod(0o777)
    return LIVE_ID


def _another_users_folder(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "answers_stacks": True})
    os.chown(live.folder, OTHER_UID, OTHER_UID)
    return LIVE_ID


def _another_users_link_to_it(live: Live, bystander: int, tmp_path: Path) -> str:
    link = tmp_path / "their-link"
    link.symlink_to(live.folder)
    os.lchown(link, OTHER_UID, OTHER_UID)
    _plant({**live.raw(), "log_dir": str(link), "answers_stacks": True})
    return LIVE_ID


def _a_records_folder_others_can_write(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "answers_stacks": True})
    records.folder().chmod(0o777)
    return LIVE_ID


def _another_users_record(live: Live, bystander: int, tmp_path: Path) -> str:
    _plant({**live.raw(), "answers_stacks": True})
    os.chown(live.file, OTHER_UID, OTHER_UID)
    return LIVE_ID


Kind = Callable[[Live, int, Path], str]
KINDS = [
    pytest.param(_another_runs_folder, f"names the log folder {{folder}}, which run '{LIVE_ID}' claimed", id="another run's folder"),
    pytest.param(_an_edited_pid, "names pid {bystander}, but pid {pid} claimed its log folder", id="another process's pid"),
    pytest.param(_someone_elses_lock, f"does not hold run {FAKE_ID}'s claim", id="a lock another process holds"),
    pytest.param(_a_reused_pid, "(the pid was reused)", id="a start time that is not the run's"),
    pytest.param(_no_start_time, "does not say when its process started", id="no start time"),
    pytest.param(_a_folder_others_can_write, "is writable by other users", id="a log folder others can write"),
    pytest.param(_another_users_folder, f"belongs to uid {OTHER_UID}", id="another user's log folder", marks=ROOT_ONLY),
    pytest.param(_another_users_link_to_it, f"is a symlink that belongs to uid {OTHER_UID}", id="another user's link to it", marks=ROOT_ONLY),
    pytest.param(_a_records_folder_others_can_write, "only into folders of yours that others cannot write", id="a records folder others can write"),
    pytest.param(_another_users_record, "is not a file of yours that only you can write", id="another user's record file", marks=ROOT_ONLY),
]


@pytest.mark.parametrize(("kind", "says"), KINDS)
def test_a_record_that_is_not_proven_its_runs_is_refused_and_signals_nothing(
    tmp_path: Path, live: Live, bystander: subprocess.Popen[bytes], kind: Kind, says: str
) -> None:
    run_id = kind(live, bystander.pid, tmp_path)
    for args in (["stop", run_id, "--wait", "1"], ["stacks", run_id, "--wait", "1"]):
        refused = invoke(args)
        assert refused.code in (1, 2) and refused.one_line_error, refused.explain(args)
        assert says.format(folder=live.folder, pid=live.proc.pid, bystander=bystander.pid) in refused.err and "nothing signalled" in refused.err, refused.err
        time.sleep(0.05)  # a signal sent would have landed by now
        running = [bystander.poll()] + [proc.poll() for proc in (live.proc, *live.others)]
        assert running == [None] * len(running), "a process that is not the record's run got a signal"
        assert _no_stop_request_anywhere(tmp_path) == []


def test_pid_1_is_never_proven_whatever_its_claim_says(tmp_path: Path, live: Live) -> None:
    """Init's pid in a record, its start time right, in a folder whose claim names it and whose lock is held: the lock is
    another process's, so nothing is proven (the proof alone, driven directly: no signal is ever sent here)."""
    from tpuctl.inputs.errors import TpuctlError
    from tpuctl.runs import proof

    _someone_elses_lock(live, 1, tmp_path)
    (record,) = [r for r in records.read_all(print) if r.run_id == FAKE_ID]
    assert (record.pid, record.state) == (1, "running")
    with pytest.raises(TpuctlError, match=r"pid 1 (does not hold|is not a process of yours)") as refused, proof.live_run(record):
        pytest.fail("pid 1 was proven to be a run's process")
    assert refused.value.message.endswith("; nothing signalled")


def test_stop_signals_a_run_proven_its_own_and_asks_it_to_stop_first(tmp_path: Path, live: Live) -> None:
    """The proof passes for a run kept as a launch keeps it: SIGTERM (the holder has no handler: it dies as if killed,
    so the run then reads lost), after the stop-request in its own folder."""
    stopped = invoke(["stop", LIVE_ID, "--wait", "10"], limit_s=15)
    assert stopped.code == 0 and stopped.out == f"run {LIVE_ID} ended: lost (its supervisor ended without writing how the run ended)\n", stopped.explain([])
    assert live.proc.wait(timeout=5) == -15
    assert _no_stop_request_anywhere(tmp_path) == [live.folder / "stop-requested"]


def test_a_prefix_says_which_run_it_took_and_a_refused_one_is_said(tmp_path: Path, live: Live, bystander: subprocess.Popen[bytes]) -> None:
    """`stop PREFIX` took the one record the prefix matched silently, a record naming another run's folder among them."""
    _another_runs_folder(live, bystander.pid, tmp_path)
    refused = invoke(["stop", "20260101-000000-other", "--wait", "1"])
    lines = refused.err.splitlines()
    assert refused.code == 1 and lines[0] == f"tpuctl: the one run whose id starts with '20260101-000000-other': {FAKE_ID}", refused.err
    assert len(lines) == 2 and lines[1].startswith(f"Error: run {FAKE_ID}'s record names the log folder"), refused.err
    assert bystander.poll() is None and live.proc.poll() is None
    both = invoke(["stop", "20260101-000000-", "--wait", "1"])
    assert both.code == 2 and both.one_line_error and "names 2 runs (" in both.err and FAKE_ID in both.err and LIVE_ID in both.err, both.err


# --- --prune: only the user's records, never through a link -----------------------------------------------------


def _ended_record(folder: Path, run_id: str, owner: int | None = None) -> Path:
    now = time.time()
    path = folder / f"{run_id}.json"
    raw = {"run_id": run_id, "backend": "local", "script": "t.py", "log_dir": f"/logs/{run_id}", "started": now - 9 * 86400, "pid": 1,
           "host": socket.gethostname(), "state": "succeeded", "ended": now - 8 * 86400, "exit_code": 0}  # fmt: skip
    path.write_text(json.dumps(raw))
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def test_prune_deletes_nothing_through_a_symlinked_records_folder(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    planted = [_ended_record(theirs, f"20260101-000000-train-{n}", OTHER_UID if os.geteuid() == 0 else None) for n in range(2)]
    if os.geteuid() == 0:
        os.chown(theirs, OTHER_UID, OTHER_UID)
    records.folder().parent.mkdir(parents=True)
    records.folder().symlink_to(theirs)
    pruned = invoke(["runs", "--prune", "1"])
    assert pruned.code == 2 and pruned.one_line_error and "not a directory (a symlink?)" in pruned.err and "nothing removed" in pruned.err, pruned.explain([])
    assert all(path.exists() for path in planted)


@ROOT_ONLY
def test_prune_keeps_a_record_file_of_another_users_in_the_users_folder(tmp_path: Path) -> None:
    records.folder().mkdir(parents=True, mode=0o700)
    mine = _ended_record(records.folder(), "20260101-000000-train-mine")
    theirs = _ended_record(records.folder(), "20260101-000000-train-theirs", OTHER_UID)
    pruned = invoke(["runs", "--prune", "1"])
    assert pruned.code == 0 and pruned.out.startswith("removed the records of 1 run(s)"), pruned.explain([])
    assert pruned.err == "tpuctl: warning: kept 1 record(s) that are not files of yours (20260101-000000-train-theirs)\n"
    assert not mine.exists() and theirs.exists()


# --- the view a launch publishes: never through a link out of the model dir ------------------------------------


@pytest.mark.parametrize("link", ["tpuctl", "tpuctl/run-1"])
def test_a_view_is_not_published_through_a_link_out_of_the_model_dir(tmp_path: Path, link: str) -> None:
    from tests.standins.timelines import write_run
    from tpuctl.launch import publish

    logs, model, outside = tmp_path / "logs", tmp_path / "model", tmp_path / "outside"
    logs.mkdir()
    outside.mkdir()
    write_run(logs, workers=1, samples=3)
    (model / link).parent.mkdir(parents=True)
    (model / link).symlink_to(outside)
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(logs), "run-1", str(model), warn=said.append, every_s=0.05)
    publisher.start(None)
    wait_for(lambda: len(said) == 1)
    time.sleep(0.2)  # more turns: none writes, none says it again
    publisher.stop()
    assert list(outside.rglob("*")) == [] and publisher.published == 0
    refused = f"{model / link} is a symlink: tpuctl writes no view through a link out of the model dir"
    assert said == [f"warning: cannot publish the run's view to {model}/tpuctl/run-1/view.json: {refused}"]


# --- report LOG_DIR/: a record whose log_dir leads nowhere --------------------------------------------------------


@pytest.mark.parametrize("kind", ["loop", "too long"])
def test_a_record_whose_log_dir_cannot_be_followed_costs_report_nothing(tmp_path: Path, kind: str) -> None:
    from tests.standins.timelines import write_run

    bad = tmp_path / "loop"
    bad.symlink_to(bad)
    log_dir = f"{bad}/run" if kind == "loop" else "/" + "x" * 5000
    records.folder().mkdir(parents=True, mode=0o700)
    _plant({**json.loads(_ended_record(records.folder(), "20260101-000000-train-bad").read_text()), "log_dir": log_dir})
    good = tmp_path / "logs" / "good"
    good.mkdir(parents=True)
    write_run(good, workers=1, samples=3)
    unnamed = invoke(["report", f"{good}/"])
    assert unnamed.crash is None and unnamed.code == 0, unnamed.explain([])
    assert "warning: passed over a run record whose log_dir cannot be followed: 20260101-000000-train-bad (" in unnamed.err, unnamed.err
    _plant({**json.loads(_ended_record(records.folder(), "20260101-000000-train-good").read_text()), "log_dir": str(good), "started": 1.0})
    named: Result = invoke(["report", f"{good}/"])
    assert named.crash is None and named.code == 0 and "passed over" not in named.err, named.explain([])

"""Runs that outlive the terminal (issue 23), with real processes: `launch --detach`, the run's record, `runs`, `logs`, `stop`.

Each test has its own state folder (XDG_STATE_HOME), so `tpuctl runs` lists that test's runs
alone. What a run started is found the way an operator would find it: every process whose
environment names the run (TPUCTL_RUN_ID, which the reaper, the worker and all it starts
inherit), walked in /proc. The ssh, Vertex AI and Kubernetes rows are in those backends' files
(test_launch_ssh.py, test_launch_vertex.py, test_launch_kubernetes.py), beside their servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCRIPTS, Pid, _stat, alive, describe, read_pids, run_tpuctl, tpuctl_cmd, wait_for
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl import endings
from tpuctl.cluster.worker_contract import RUN_ID
from tpuctl.endings import Kind
from tpuctl.runs import records
from tpuctl.runs.records import RunRecord

# A worker that says nothing: it records its pid and waits, as a worker still importing TensorFlow does.
SILENT = """\
import os, time
index, pids = os.environ["TPUCTL_WORKER_INDEX"], os.environ["PID_DIR"]
with open(os.path.join(pids, f"worker-{index}.pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This test's records and default run folders, for the tpuctl it starts and the records it reads here."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    yield


def detach(*args: str, env: dict[str, str] | None = None) -> RunRecord:
    """`tpuctl launch --detach ARGS`: it returns within seconds with the run id; the run's record, which says running."""
    started = time.monotonic()
    result = run_tpuctl("launch", "--detach", *args, env=env or dict(os.environ), timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20
    record = record_of(result.stdout.strip())
    assert record.state == endings.RUNNING and record.detached, record
    started = _stat(record.pid)  # issue 46: the record keeps when its supervisor started, what `stop` proves its pid by
    assert started is not None and record.pid_start == int(started[19]), record
    return record


def record_of(run_id: str) -> RunRecord:
    return records.find(run_id, _no_warning)[0]


def ended(run_id: str, timeout: float = 60.0) -> RunRecord:
    """The run's record once it says how the run ended."""
    wait_for(lambda: record_of(run_id).state != endings.RUNNING, timeout=timeout)
    return record_of(run_id)


def listed(run_id: str) -> dict[str, object]:
    """The run as `tpuctl runs --json` lists it."""
    result = run_tpuctl("runs", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    (row,) = [row for row in json.loads(result.stdout) if row["run_id"] == run_id]
    return dict(row)


def processes_of(run_id: str) -> list[Pid]:
    """Every process whose environment names the run: its reapers, its workers and what they started."""
    marker = f"{RUN_ID}={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if marker in environ and stat[0] not in ("Z", "X"):
                pid = Pid(int(entry.name))
                pid.start = stat[19]
                found.append(pid)
    return found


def assert_gone(pids: list[int], timeout: float = 5.0) -> None:
    try:
        wait_for(lambda: not any(alive(p) for p in pids), timeout=timeout)
    except AssertionError:
        raise AssertionError("survivors: " + "; ".join(describe(p) for p in pids if alive(p))) from None


def _no_warning(line: str) -> None:
    raise AssertionError(line)


def _take_terminal() -> None:
    """In the shell's new session: the pty on its stdin becomes its controlling terminal, as a login's does."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_a_detached_launch_outlives_the_shell_and_the_terminal_it_came_from(tmp_path: Path, pid_dir: Path) -> None:
    release, said = tmp_path / "release", tmp_path / "run-id"
    launch = tpuctl_cmd("launch", str(SCRIPTS / "wait_for_release.py"), "--workers", "2", "--strategy", "none", "--detach")
    env = {**os.environ, "PID_DIR": str(pid_dir), "RELEASE": str(release)}
    terminal, its_end = os.openpty()
    shell = subprocess.Popen(
        ["bash", "-c", f"{shlex.join(launch)} > {shlex.quote(str(said))}; exec sleep 600"],
        stdin=its_end, stdout=its_end, stderr=its_end, env=env, cwd=tmp_path, start_new_session=True, preexec_fn=_take_terminal,
    )  # fmt: skip
    os.close(its_end)
    try:
        wait_for(lambda: said.exists() and said.read_text().endswith("\n") and len(read_pids(pid_dir)) == 2, timeout=60)
    finally:  # the terminal closes (the kernel hangs up its session), then what is left of the shell's group is killed
        os.close(terminal)
        wait_for(lambda: shell.poll() is not None, timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert shell.returncode == -signal.SIGHUP
    run_id = said.read_text().strip()
    record = record_of(run_id)
    workers = read_pids(pid_dir)
    time.sleep(0.5)  # a hangup that reached the run would have stopped it by now
    assert record_of(run_id).state == endings.RUNNING and alive(record.pid) and all(alive(p) for p in workers)
    release.touch()
    assert (ended(run_id).state, listed(run_id)["state"], listed(run_id)["exit_code"]) == (Kind.SUCCEEDED, "succeeded", 0)
    folder = Path(record.log_dir)
    assert folder == tmp_path / "state" / "tpuctl" / "runs" / run_id  # the default: beside the records
    assert (folder / "attempt-1" / "worker-1.log").read_text().splitlines()[-1] == "worker 1 released"
    assert json.loads((folder / "outcome.json").read_text())["exit_code"] == 0
    assert "SIGHUP" not in (folder / "console.log").read_text()
    logs = run_tpuctl("logs", run_id, timeout=60)
    assert logs.returncode == 0 and "[worker:0] worker 0 released" in logs.stdout.splitlines(), logs.stdout + logs.stderr
    assert_gone(workers)


@pytest.mark.tf
def test_a_detached_tensorflow_launch_trains_to_succeeded(tmp_path: Path) -> None:
    """examples/train_keras.py under MultiWorkerMirroredStrategy, with nobody watching. One worker: what is detached
    is the supervisor, whatever the worker count (two workers training in sync: test_launch_tensorflow.py)."""
    model_dir = tmp_path / "model"
    record = detach(
        str(ROOT / "examples" / "train_keras.py"), "--workers", "1", "--strategy", "multi-worker-mirrored",
        "--model-dir", str(model_dir), "--log-dir", str(tmp_path / "logs"), "--", "--epochs", "2", "--examples", "256",
    )  # fmt: skip
    done = ended(record.run_id, timeout=240)
    console = (tmp_path / "logs" / "console.log").read_text()
    assert (done.state, done.exit_code) == (Kind.SUCCEEDED, 0), console[-3000:]
    outcome = json.loads((tmp_path / "logs" / "outcome.json").read_text())
    assert (outcome["result"], outcome["exit_code"], outcome["run_id"]) == ("succeeded", 0, record.run_id)
    assert "Epoch 2/2" in (tmp_path / "logs" / "attempt-1" / "worker-0.log").read_text()
    assert "[worker:0] tpuctl: worker:0: MultiWorkerMirroredStrategy" in console, console[-3000:]
    assert (model_dir / "checkpoints" / "epoch-02.weights.h5").exists()
    assert processes_of(record.run_id) == []


def test_sigkill_of_the_detached_supervisor_leaves_no_process_and_the_run_reads_lost(tmp_path: Path, pid_dir: Path) -> None:
    env = {**os.environ, "PID_DIR": str(pid_dir)}
    record = detach(str(SCRIPTS / "crash_or_hang.py"), "--workers", "2", "--strategy", "none", env=env)
    wait_for(lambda: len(read_pids(pid_dir)) == 4)  # two workers, each with a child
    # A process read in the middle of its exec shows an empty environment for a moment: look again until all are seen.
    deadline = time.monotonic() + 10
    while not set(read_pids(pid_dir)) <= set(started := processes_of(record.run_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(read_pids(pid_dir)) <= set(started) and len(started) >= 6, [describe(p) for p in started]  # and a reaper each
    os.kill(record.pid, signal.SIGKILL)
    assert_gone([*started, record.pid])
    assert processes_of(record.run_id) == []
    assert (record_of(record.run_id).state, listed(record.run_id)["state"]) == (Kind.LOST, "lost")
    stop = run_tpuctl("stop", record.run_id, timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert f"run {record.run_id} already ended: lost" in stop.stdout


def test_stop_during_start_up_stops_the_silent_workers_and_the_run_reads_stopped(tmp_path: Path, pid_dir: Path) -> None:
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    record = detach(str(script), "--workers", "2", "--strategy", "none", env={**os.environ, "PID_DIR": str(pid_dir)})
    wait_for(lambda: len(read_pids(pid_dir)) == 2)  # started, and not a line yet
    started = processes_of(record.run_id)
    stop = run_tpuctl("stop", record.run_id[:22], timeout=60)  # a unique prefix names it
    assert stop.returncode == 0, stop.stderr
    assert f"run {record.run_id} stopped" in stop.stdout
    assert_gone([*started, record.pid])
    done = record_of(record.run_id)
    assert (done.state, done.exit_code) == (Kind.STOPPED, 130)
    outcome = json.loads((Path(record.log_dir) / "outcome.json").read_text())
    assert outcome["interrupted"] and outcome["exit_code"] == 130


def test_a_detached_babysit_recreates_a_preempted_node_and_stop_ends_it(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """`babysit --detach` over the real TPU client and the stand-in: the loop, forked, keeps its API session and its work."""
    zone, ran = "us-central2-b", tmp_path / "ran.txt"
    env = {**standin_env(google_standin, tmp_path), "TPUCTL_ZONE": zone, "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]}
    if "PYTHONPATH" in os.environ:  # the stand-in's environment is sealed; keep the tpuctl under test
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    created = run_tpuctl("create", "sat", "--accelerator-type", "v4-8", "--spot", env=env, cwd=tmp_path, timeout=120)
    assert created.returncode == 0, created.stderr
    command = ["sh", "-c", f"echo run >> {shlex.quote(str(ran))}; exec sleep 600"]
    sitter = run_tpuctl("babysit", "sat", "--interval", "0.2", "--detach", "--", *command, env=env, cwd=tmp_path, timeout=60)
    assert sitter.returncode == 0, sitter.stderr
    run_id = sitter.stdout.strip()
    wait_for(lambda: ran.exists() and ran.read_text() == "run\n")
    google_standin.preempt(zone, "sat")
    wait_for(lambda: ran.read_text() == "run\nrun\n")  # recreated, and the command run again
    row = listed(run_id)
    said = (row["kind"], row["backend"], row["state"], row["job"], row["detached"], row["script"])
    assert said == ("babysit", None, "running", "sat", True, shlex.join(command))  # a run that is no launch has no backend
    started = processes_of_command(record_of(run_id).pid)
    assert len(started) >= 2, started  # the command's reaper and the command
    stop = run_tpuctl("stop", run_id, env=env, cwd=tmp_path, timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert (ended(run_id).state, listed(run_id)["exit_code"]) == (Kind.STOPPED, 130)
    assert_gone([record_of(run_id).pid, *started])
    console = (Path(record_of(run_id).log_dir) / "console.log").read_text()
    assert "babysit: sat is PREEMPTED; recreating it (1/10)" in console and console.rstrip().endswith("babysit: interrupted"), console
    assert google_standin.token not in console + sitter.stdout + sitter.stderr


def processes_of_command(supervisor: int) -> list[int]:
    """The processes below `supervisor` (its command's reaper, the command): what stopping it must end."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                children.setdefault(int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = [], [supervisor]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found

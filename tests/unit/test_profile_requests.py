"""`tpuctl profile` asks the run's launcher, which asks each worker through its reaper (issue 46): the request left in
the run's folder, the launcher's desk that serves it (tpuctl/launch/process/profiles.py), the reaper that hands it
on, and the worker's thread that answers, each checked here without TensorFlow; hostile requests, answers and
relayed lines are one line or ignored, never a crash of the launcher or the worker.

The workers here are Handles that answer as a worker's runtime does; real workers capturing with TensorFlow are
tests/integration/test_profile*.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.standins.scripted_workers import BareHandle
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import Task
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.process import profiles
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.runs import profiling, records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runtime.profile_capture import requests
from tpuctl.runtime.timeline import profiler

WORKERS = ["worker:0", "worker:1"]
Answer = Callable[[str, int], dict[str, object] | None]  # (session, position) -> the worker's last word, None: silence


class Worker(BareHandle):
    """A worker as the desk sees it: asked through its Handle, answering through the desk as its messages would."""

    def __init__(self, position: int, answer: Answer, desk: profiles.Desk, server: bool = False) -> None:
        self.spec = WorkerSpec(task=Task("worker", position), chief=position == 0, host="h", address=f"h:{position}", argv=(), server=server)
        self.position, self.answer, self.desk = position, answer, desk
        self.asked: list[tuple[str, int]] = []

    def request_profile(self, session: str, milliseconds: int) -> bool:
        self.asked.append((session, milliseconds))
        threading.Thread(target=self._say, args=(session,), daemon=True).start()
        return True

    def _say(self, session: str) -> None:
        self.desk.offer(1, self.position, "profile " + json.dumps({"event": "began", "session": session}))
        said = self.answer(session, self.position)
        if said is not None:
            self.desk.offer(1, self.position, "profile " + json.dumps({**said, "session": session}))


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunRecord]:
    """A run that reads `running` (its folder's claim held by this process), its workers recorded as a launch records them."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    log_dir = tmp_path / "logs"
    record = RunRecord("train-20260101-000000-abcd", "local", "train.py", str(log_dir), time.time(), os.getpid(), "here")
    folder = RunFolder(log_dir)
    claim = folder.claim(record.run_id)
    records.write(record)
    folder.make_attempt(1)
    workers: list[dict[str, object]] = [{"worker": w, "host": "127.0.0.1", "python": sys.executable} for w in WORKERS]
    folder.write_profilers(1, workers, str(tmp_path / "model"), "local")
    yield record
    os.close(claim)


def _desk(record: RunRecord, answer: Answer, live: Callable[[int], bool] = lambda p: True, server: bool = False) -> tuple[profiles.Desk, list[Worker]]:
    desk = profiles.Desk(record.folder, lambda line: None)
    workers = [Worker(p, answer, desk, server=server and p == 1) for p in range(len(WORKERS))]
    desk.attach(1, workers, live)
    desk.start()
    return desk, workers


def _written(profile_dir: Path) -> Answer:
    """Each worker writes its file where the runtime does and says so."""

    def answer(session: str, position: int) -> dict[str, object]:
        file = profile_dir / "plugins" / "profile" / session / f"h_worker-{position}.xplane.pb"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(b"xplane")
        return {"event": "taken", "file": str(file), "steps": 3}

    return answer


def test_every_worker_is_asked_through_the_launcher_and_the_answer_names_each_file(run: RunRecord, tmp_path: Path) -> None:
    desk, workers = _desk(run, _written(tmp_path / "model"))
    try:
        result = profiling.capture(run, 0.5)
    finally:
        desk.close()
    assert [len(w.asked) for w in workers] == [1, 1] and {w.asked[0][1] for w in workers} == {500}
    session = tmp_path / "model" / "plugins" / "profile" / workers[0].asked[0][0]
    assert result.session == str(session) and result.missing == {}
    assert result.files == {f"worker:{p}": str(session / f"h_worker-{p}.xplane.pb") for p in range(2)}
    assert not list(run.folder.profile_requests.iterdir())  # the request and its answer are gone


def test_sessions_in_one_second_get_their_own_folders(run: RunRecord, tmp_path: Path) -> None:
    desk, _ = _desk(run, _written(tmp_path / "model"))
    try:
        sessions = [profiling.capture(run, 0.1).session for _ in range(3)]
    finally:
        desk.close()
    assert len(set(sessions)) == 3 and all(s is not None and contract.profile_session(Path(s).name) for s in sessions)


def test_a_worker_that_takes_none_is_named_with_its_reason_and_the_other_is_kept(run: RunRecord, tmp_path: Path) -> None:
    written = _written(tmp_path / "model")

    def answer(session: str, position: int) -> dict[str, object]:
        return written(session, position) if position == 0 else {"event": "not_taken", "why": requests.NO_STEP}

    desk, _ = _desk(run, answer)
    try:
        result = profiling.capture(run, 0.2)
    finally:
        desk.close()
    assert list(result.files) == ["worker:0"] and result.missing == {"worker:1": requests.NO_STEP}


def test_a_worker_that_ended_is_not_waited_for(run: RunRecord, tmp_path: Path) -> None:
    ended = threading.Event()

    def answer(session: str, position: int) -> dict[str, object] | None:
        if position == 1:
            ended.set()  # it died as it began: no answer will come
            return None
        return _written(tmp_path / "model")(session, position)

    desk, _ = _desk(run, answer, live=lambda p: not (p == 1 and ended.is_set()))
    began = time.monotonic()
    try:
        result = profiling.capture(run, 0.2)
    finally:
        desk.close()
    assert time.monotonic() - began < 10
    assert result.missing == {"worker:1": profiles.ENDED} and list(result.files) == ["worker:0"]


def test_a_silent_worker_is_given_up_after_its_start_deadline(run: RunRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contract, "PROFILE_BEGIN_S", 0.5)
    monkeypatch.setattr(profiles, "SLACK_S", 0.2)
    written = _written(tmp_path / "model")
    desk = profiles.Desk(run.folder, lambda line: None)

    class Stopped(Worker):
        def _say(self, session: str) -> None:  # a worker stopped by SIGSTOP: not a word
            pass

    workers = [Worker(0, written, desk), Stopped(1, written, desk)]
    desk.attach(1, workers, lambda p: True)
    desk.start()
    try:
        result = profiling.capture(run, 0.2)
    finally:
        desk.close()
    assert list(result.files) == ["worker:0"]
    assert result.missing == {"worker:1": "it said nothing within 0.7s (stopped, or hung in native code?)"}


def test_a_parameter_server_task_is_not_asked(run: RunRecord, tmp_path: Path) -> None:
    desk, workers = _desk(run, _written(tmp_path / "model"), server=True)
    try:
        result = profiling.capture(run, 0.1)
    finally:
        desk.close()
    assert workers[1].asked == [] and result.missing == {"worker:1": profiles.SERVER}


class _Hosts:
    """The hosts of an ssh run, as runs/profiling.py sees them: worker:0's file comes back, worker:1's host is lost."""

    def __init__(self) -> None:
        self.asked: dict[str, tuple[str, str]] = {}

    def fetch(self, files: dict[str, tuple[str, str]], into: Path, timeout: float) -> dict[str, str]:
        self.asked = files
        into.mkdir(parents=True)
        (into / Path(files["worker:0"][1]).name).write_bytes(b"x")
        return {"worker:1": "cannot copy it from host2: refused"}


def test_an_ssh_runs_files_are_copied_from_its_hosts_into_its_log_dir(run: RunRecord, tmp_path: Path) -> None:
    folder = run.folder
    workers: list[dict[str, object]] = [{"worker": w, "host": f"10.0.0.{i}", "python": "python3", "ssh": f"host{i + 1}"} for i, w in enumerate(WORKERS)]
    folder.write_profilers(1, workers, "/data/model", "ssh")
    ssh_run = RunRecord(run.run_id, "ssh", run.script, run.log_dir, run.started, run.pid, run.host)

    def on_its_host(session: str, position: int) -> dict[str, object]:
        return {"event": "taken", "file": f"/data/model/plugins/profile/{session}/h{position}_worker-{position}.xplane.pb"}

    desk, workers_asked = _desk(run, on_its_host)
    hosts = _Hosts()
    try:
        result = profiling.capture(ssh_run, 0.2, hosts)
    finally:
        desk.close()
    session = workers_asked[0].asked[0][0]
    copies = Path(run.log_dir) / "plugins" / "profile" / session
    assert hosts.asked == {f"worker:{p}": (f"host{p + 1}", f"/data/model/plugins/profile/{session}/h{p}_worker-{p}.xplane.pb") for p in range(2)}
    assert (result.profile_dir, result.session, result.hosts_dir) == (run.log_dir, str(copies), "/data/model")
    assert result.files == {"worker:0": str(copies / "h0_worker-0.xplane.pb")}
    assert result.missing == {"worker:1": "cannot copy it from host2: refused"}


def test_a_launcher_between_attempts_answers_in_one_line(run: RunRecord) -> None:
    desk = profiles.Desk(run.folder, lambda line: None)
    desk.start()
    try:
        with pytest.raises(TpuctlError, match="the launcher took no capture: the run has no workers running now"):
            profiling.capture(run, 0.1)
    finally:
        desk.close()


def test_a_request_no_launcher_takes_is_taken_back_in_one_line(run: RunRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch that does not serve requests (stopped with SIGSTOP; an older tpuctl's) is never signalled: the
    request waits TAKE_S in its file, and goes."""
    monkeypatch.setattr(profiling, "TAKE_S", 0.3)
    with pytest.raises(TpuctlError, match=r"did not take the request within 0.3s \(is it stopped"):
        profiling.capture(run, 0.1)
    assert not list(run.folder.profile_requests.iterdir())


HOSTILE_REQUESTS: list[bytes | None] = [
    b"",
    b"{",
    b"[]",
    b'{"seconds": 0}',
    b'{"seconds": -1}',
    b'{"seconds": 1e999}',
    b'{"seconds": NaN}',
    b'{"seconds": true}',
    b'{"seconds": "2"}',
    b'{"seconds": 301}',
    b"[" * 100_000,
    b"\xff\xfe",
    b'{"seconds": 1}' + b" " * 5000,
    None,  # a FIFO where the request should be: the launcher's read must not block
]


@pytest.mark.parametrize("content", HOSTILE_REQUESTS, ids=range(len(HOSTILE_REQUESTS)))
def test_a_hostile_request_is_answered_with_one_line_and_the_desk_serves_on(run: RunRecord, tmp_path: Path, content: bytes | None) -> None:
    desk, workers = _desk(run, _written(tmp_path / "model"))
    place = run.folder.profile_requests
    place.mkdir(mode=0o700)
    try:
        if content is None:
            os.mkfifo(place / "bad.json")
        else:
            (place / "bad.json").write_bytes(content)
        answered = place / "bad.answer.json"
        ends = time.monotonic() + 10
        while not answered.exists() and time.monotonic() < ends:
            time.sleep(0.05)
        said = json.loads(answered.read_text())
        assert set(said) == {"error"} and "\n" not in said["error"], said
        assert not any(w.asked for w in workers)
        assert profiling.capture(run, 0.1).files  # the next request is served as any other
    finally:
        desk.close()


@given(st.binary(max_size=200))
def test_any_relayed_line_is_a_request_or_nothing(line: bytes) -> None:
    found = contract.profile_line(line)
    if found is not None:
        session, milliseconds = found
        assert contract.profile_session(session) and 0 < milliseconds <= contract.PROFILE_MAX_MS


@pytest.mark.parametrize("session", ["..", ".hidden", "a/b", "a b", "x" * 101, "", "é", "a\nb", "-ok_1.2"])
def test_a_session_name_is_one_plain_path_component(session: str) -> None:
    assert contract.profile_session(session) is (session == "-ok_1.2")


# The worker's side, without TensorFlow: its requests thread, and the training thread's steps --------------------


_kept: list[socket.socket] = []  # the workers' ends of their channels, open for the tests' threads


def _worker_side(tmp_path: Path, unsafe: str | None = None) -> tuple[profiler.Steps, int, socket.socket]:
    """A worker's steps and requests thread: (its steps, the pipe its reaper writes into, the launcher's end)."""
    steps = profiler.Steps(None, str(tmp_path / "model"), "unused")
    steps.unsafe = unsafe
    read_end, write_end = os.pipe()
    launcher, worker = socket.socketpair()
    _kept.append(worker)
    requests.listen(read_end, steps, worker.fileno())
    return steps, write_end, launcher


def _answers(launcher: socket.socket, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    launcher.settimeout(timeout)
    data = b""
    while data.count(b"\n") < count:
        chunk = launcher.recv(65536)
        assert chunk, f"the worker's channel closed after {data!r}"
        data += chunk
    return [json.loads(line.removeprefix(b"profile ")) for line in data.splitlines()]


def test_a_request_no_step_boundary_takes_is_withdrawn_and_answered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A custom training loop, or a worker between fits: nothing tpuctl sees begins the capture."""
    monkeypatch.setattr(contract, "PROFILE_BEGIN_S", 0.3)
    steps, pipe, launcher = _worker_side(tmp_path)
    os.write(pipe, f"s1 500 {time.monotonic()!r}\n".encode())
    assert _answers(launcher, 1) == [{"event": "not_taken", "session": "s1", "why": requests.NO_STEP}]
    steps.train_begins()  # a fit beginning later takes nothing
    assert steps._recording is None


def test_a_request_that_arrives_too_late_is_answered_and_never_begun(tmp_path: Path) -> None:
    """A worker stopped (SIGSTOP) while its request waited in the pipe reads it once it goes on: the launcher no
    longer waits, and a capture begun now would write a file nobody asked for."""
    steps, pipe, launcher = _worker_side(tmp_path)
    os.write(pipe, f"s2 500 {time.monotonic() - contract.PROFILE_BEGIN_S - 1!r}\n".encode())
    assert _answers(launcher, 1) == [{"event": "not_taken", "session": "s2", "why": requests.LATE}]
    assert steps._asked is None


def test_where_stopping_a_profile_is_not_safe_the_step_boundary_refuses_and_says_why(tmp_path: Path) -> None:
    """A multi-worker worker where tpuctl's fix for TensorFlow's crash could not be loaded takes no capture."""
    steps, pipe, launcher = _worker_side(tmp_path, unsafe="no C compiler to build tpuctl's fix")
    os.write(pipe, f"s3 500 {time.monotonic()!r}\nnot a request\n".encode())
    ends = time.monotonic() + 10
    while steps._asked is None and time.monotonic() < ends:
        time.sleep(0.01)
    steps.train_begins()  # the boundary: the capture would begin here
    [said] = _answers(launcher, 1)
    assert said == {"event": "not_taken", "session": "s3", "why": f"{profiler.FAULT}, and no C compiler to build tpuctl's fix"}
    assert steps._recording is None


def test_a_second_request_while_one_waits_is_refused_as_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contract, "PROFILE_BEGIN_S", 0.5)
    _, pipe, launcher = _worker_side(tmp_path)
    now = repr(time.monotonic()).encode()
    os.write(pipe, b"s4 500 " + now + b"\ns5 500 " + now + b"\n")
    first, second = _answers(launcher, 2)
    assert first["session"] == "s5" and "busy with another capture" in first["why"]
    assert second == {"event": "not_taken", "session": "s4", "why": requests.NO_STEP}


def test_the_reaper_hands_profile_requests_to_its_worker_and_nothing_else(tmp_path: Path) -> None:
    """The launcher's end of a real worker's control channel: a "profile" line reaches the worker's pipe stamped with
    the reaper's clock; "stacks" is still the reaper's own, and what is neither goes nowhere."""
    code = textwrap.dedent(
        """
        import os, sys
        from tpuctl.runtime import bootstrap
        channel, requests = bootstrap.adopt_control_channel()
        os.write(channel, b"ready" + bytes([10]))
        got = b""
        while got.count(bytes([10])) < 2:
            got += os.read(requests, 4096)
        sys.stdout.write(got.decode())
        """
    )
    launcher, worker = socket.socketpair()
    env = {**os.environ, contract.CONTROL_FD: str(worker.fileno()), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=[worker.fileno()], stdout=subprocess.PIPE, text=True) as proc:
        worker.close()
        launcher.settimeout(30)
        heard = b""
        while b"ready" not in heard:
            heard += launcher.recv(4096)
        before = time.monotonic()
        launcher.sendall(b"profile s6 1500\nstacks\nprofile ")  # a line cut in two by the socket, and garbage
        launcher.sendall(b"s7 20\n" + b"x" * 3000 + b"\n")
        out, _ = proc.communicate(timeout=30)
        launcher.close()
    lines = out.splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines] == ["s6 1500", "s7 20"]
    assert all(before - 1 <= float(line.rsplit(" ", 1)[1]) <= time.monotonic() for line in lines)
    assert requests.read(lines[0].encode(), lambda *a, **k: None) is not None  # what the worker reads back


def test_an_ssh_agent_passes_profile_requests_to_its_workers_reaper() -> None:
    """The ssh launcher's PROFILE line reaches the worker's control channel as a local launcher's would; the rest of
    the line is the reaper's to check, and nothing else becomes a request."""
    from tpuctl.backends.ssh import agent

    launcher_end, worker_end = socket.socketpair()
    rest = agent.obey(-1, launcher_end, b"PROFILE s8 250\nSTACKS\nPROFILE\nPROFILES x\nPROF")
    assert rest == b"PROF"
    worker_end.settimeout(5)
    assert worker_end.recv(4096) == b"profile s8 250\nstacks\n"


def test_a_requests_folder_that_is_a_link_is_neither_written_through_nor_served(run: RunRecord, tmp_path: Path) -> None:
    """A link where LOG_DIR/profile-requests goes (planted, or left by a copy) leads out of the run's folder: the
    command refuses it in one line, and the launcher reads no request and writes no answer through it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "planted.json").write_text('{"seconds": 1}')
    run.folder.profile_requests.symlink_to(elsewhere)
    desk, workers = _desk(run, _written(tmp_path / "model"))
    try:
        with pytest.raises(TpuctlError, match="is not a directory"):
            profiling.capture(run, 0.1)
        time.sleep(3 * profiles.POLL_S)
    finally:
        desk.close()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["planted.json"] and not any(w.asked for w in workers)


def test_a_record_naming_another_runs_folder_leaves_no_request_there(run: RunRecord, tmp_path: Path) -> None:
    """A record whose log_dir is another live run's folder (copied or edited): the request would reach that run's
    launcher, so it is refused in one line and nothing is written into the folder."""
    stray = RunRecord("other-20260101-000000-dcba", "local", "train.py", run.log_dir, time.time(), run.pid, "here")
    records.write(stray)
    with pytest.raises(TpuctlError, match="is claimed by train-20260101-000000-abcd, pid .*, not by this run; nothing asked"):
        profiling.capture(stray, 0.1)
    assert not run.folder.profile_requests.exists()

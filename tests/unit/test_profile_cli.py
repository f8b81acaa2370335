"""`tpuctl profile`'s arguments, the refusals before anything is captured, and the capture's answer under hostile input.

The capture itself (real workers, a real TensorFlow trace) is tests/integration/test_profile.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_hostile_cli import invoke
from tpuctl import endings
from tpuctl.endings import Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runs import profiling, records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runtime import profile_capture

WORKERS = ["worker:0", "worker:1"]


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _cli(*args: str) -> tuple[int, str, str]:
    result = invoke(list(args))
    assert result.crash is None, result.explain(list(args))
    return result.code, result.out, result.err


def _record(tmp_path: Path, backend: str = "local", state: str = endings.RUNNING) -> RunRecord:
    log_dir = tmp_path / "run"
    log_dir.mkdir(exist_ok=True)
    return RunRecord("train-20260101-000000-abcd", backend, "train.py", str(log_dir), time.time(), os.getpid(), "here", state=state)


def _servers(record: RunRecord, profile_dir: str, backend: str = "local") -> None:
    folder = RunFolder(Path(record.log_dir))
    folder.make_attempt(1)
    workers: list[dict[str, object]] = [{"worker": w, "host": "127.0.0.1", "port": 40000 + i, "python": "/usr/bin/python3"} for i, w in enumerate(WORKERS)]
    folder.write_profilers(1, workers, profile_dir, backend)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "301", "1e300", "two", ""])
def test_a_duration_out_of_bounds_is_one_usage_line(value: str) -> None:
    code, _, err = _cli("profile", "--duration", value)
    assert code == 2 and err.count("Error") == 1 and "--duration" in err, err


def test_no_running_run_is_one_line_and_exit_1() -> None:
    code, out, err = _cli("profile")
    assert (code, out) == (1, "")
    assert err.count("Error:") == 1 and "no run of yours is running" in err


def test_a_run_that_ended_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TpuctlError, match="is not running"):
        profiling.capture(_record(tmp_path, state=Kind.SUCCEEDED), 1.0)


@pytest.mark.parametrize("backend", ["kubernetes", "vertex"])
def test_a_job_backend_says_why_it_cannot_be_captured(tmp_path: Path, backend: str) -> None:
    with pytest.raises(TpuctlError, match=f"is a {backend} job: its workers' profiler ports are not reachable") as caught:
        profiling.capture(_record(tmp_path, backend), 1.0)
    assert "--profile START-END" in str(caught.value.hint)


def test_a_run_without_profiler_servers_names_the_flag(tmp_path: Path) -> None:
    record = _record(tmp_path)
    RunFolder(Path(record.log_dir)).make_attempt(1)
    with pytest.raises(TpuctlError, match=r"no profiler servers.*--no-profiler-server"):
        profiling.capture(record, 1.0)


def test_an_ssh_run_with_a_profile_dir_on_its_hosts_disks_is_refused(tmp_path: Path) -> None:
    record = _record(tmp_path, "ssh")
    _servers(record, "/data/model", backend="ssh")
    with pytest.raises(TpuctlError, match="on their disks, not this one's") as caught:
        profiling.capture(record, 1.0)
    assert "gs://" in str(caught.value.hint)


def test_a_profile_dir_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    record = _record(tmp_path)
    blocker = tmp_path / "model"
    blocker.write_text("a file where the model dir should be")
    _servers(record, str(blocker))
    with pytest.raises(TpuctlError, match="cannot write the profile to"):
        profiling.capture(record, 1.0)


def test_a_full_disk_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(tmp_path)
    _servers(record, str(tmp_path / "model"))
    monkeypatch.setattr(profiling.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 1024})())
    with pytest.raises(TpuctlError, match="is full"):
        profiling.capture(record, 1.0)


def test_the_answer_is_the_last_line_and_in_the_workers_order() -> None:
    line = json.dumps({"session": "/m/plugins/profile/s", "files": {"worker:1": "/m/b.xplane.pb"}, "missing": {"worker:0": "did not\nanswer"}})
    answer = profiling.parse_answer(f"a sitecustomize says hello\n{line}\n", WORKERS)
    assert answer == {"session": "/m/plugins/profile/s", "files": {"worker:1": "/m/b.xplane.pb"}, "missing": {"worker:0": "did not answer"}}


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "not json",
        "[]",
        '{"session": 1, "files": {}, "missing": {"worker:0": "x", "worker:1": "x"}}',
        '{"session": null, "files": {"worker:0": "/f"}, "missing": {"worker:1": "x"}}',
        '{"session": "/s", "files": {"worker:0": "/f", "worker:9": "/g"}, "missing": {"worker:1": "x"}}',
        '{"session": "/s", "files": {"worker:0": "/f", "worker:1": "/g"}, "missing": {"worker:1": "x"}}',
        '{"session": "/s", "files": {"worker:0": 5, "worker:1": "/g"}, "missing": {}}',
        '{"session": "/s", "files": [], "missing": {}}',
        "[" * 100_000,
        '{"session": "/s", "files": {"worker:0": "/f"}}',
    ],
)
def test_a_hostile_answer_is_one_line(stdout: str) -> None:
    with pytest.raises(TpuctlError, match="did not answer with a session"):
        profiling.parse_answer(stdout, WORKERS)


@given(st.text(max_size=300))
def test_any_text_is_an_answer_or_one_line(stdout: str) -> None:
    try:
        profiling.parse_answer(stdout, WORKERS)
    except TpuctlError as err:
        assert "\n" not in err.message


@pytest.mark.parametrize(
    "request_text",
    [
        "",
        "{}",
        '{"logdir": "relative", "duration_ms": 1000, "workers": [{"worker": "w", "address": "h:1"}]}',
        '{"logdir": "/abs", "duration_ms": 0, "workers": [{"worker": "w", "address": "h:1"}]}',
        '{"logdir": "/abs", "duration_ms": 1.5, "workers": [{"worker": "w", "address": "h:1"}]}',
        '{"logdir": "/abs", "duration_ms": true, "workers": [{"worker": "w", "address": "h:1"}]}',
        '{"logdir": "/abs", "duration_ms": 1000, "workers": []}',
        '{"logdir": "/abs", "duration_ms": 1000, "workers": [{"worker": "w", "address": "h:1,grpc://x:2"}]}',
        '{"logdir": "/abs", "duration_ms": 1000, "workers": [{"worker": 3, "address": "h:1"}]}',
    ],
)
def test_the_capture_refuses_a_request_it_was_not_built_for(request_text: str) -> None:
    with pytest.raises(TpuctlError):
        profile_capture.read_request(request_text)


def test_the_capture_names_why_each_worker_sent_nothing() -> None:
    addresses = ["127.0.0.1:7101", "127.0.0.1:7102"]
    log = (
        "I0000 00:00:1 profiler_client.cc:1] fine\n"
        "E0000 00:00:17 7139 profiler_client.cc:212] UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: "
        "ipv4:127.0.0.1:7102: connection attempt timed out before receiving SETTINGS frame\n"
        "E0000 00:00:18 7140 profiler_client.cc:212] INTERNAL: Another profiling session active.\n"
    )
    errors = profile_capture._errors(log)
    assert "stopped" in profile_capture.why(addresses[1], addresses, errors, silent=2)
    # A line naming no address is the silent worker's when it is the only one; with two, it is nobody's.
    assert "busy with another capture" in profile_capture.why(addresses[0], addresses, errors[1:], silent=1)
    assert profile_capture.why(addresses[0], addresses, errors[1:], silent=2) == profile_capture._NO_ANSWER


def _running(tmp_path: Path) -> tuple[RunRecord, int]:
    """A run record that reads `running`: its folder's claim is held (by this process) and the record written."""
    record = _record(tmp_path)
    os.rmdir(record.log_dir)
    claim = RunFolder(Path(record.log_dir)).claim(record.run_id)
    records.write(record)
    return record, claim


@pytest.mark.parametrize("relative", [False, True])
def test_a_log_dir_names_its_run_as_report_takes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool) -> None:
    """The folder resolves to its run's record: this run has no profiler servers, which only its record can say."""
    record, claim = _running(tmp_path)
    try:
        if relative:
            monkeypatch.chdir(record.log_dir)
        code, out, err = _cli("profile", "." if relative else record.log_dir)
    finally:
        os.close(claim)
    assert (code, out) == (1, "")
    assert err.count("Error:") == 1 and f"run {record.run_id} has no profiler servers" in err, err


def test_a_log_dir_no_record_names_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    code, out, err = _cli("profile", str(folder))
    assert (code, out) == (1, "")
    assert err.count("Error:") == 1 and "no run record of yours names the log folder" in err, err


def test_a_path_that_is_no_folder_is_refused_as_report_refuses_it(tmp_path: Path) -> None:
    for command in ("profile", "report"):
        code, out, err = _cli(command, str(tmp_path / "missing"))
        assert (code, out) == (1, "")
        assert err.count("Error:") == 1 and "is not a launch's log folder" in err, (command, err)


def test_a_capture_that_no_worker_answered_names_no_session() -> None:
    from tpuctl.cli.diagnosis.profile import render

    capture = profiling.Capture("train-1", "/m", 3.0, None, {}, {"worker:0": "gone", "worker:1": "gone"})
    lines = render(capture, None)
    assert lines == ["profile of train-1 (0 of 2 workers, 3s): no session written"]


def test_a_worker_whose_rpc_failed_is_named_from_tensorflows_warning_and_asked_again_only_where_it_may_answer() -> None:
    """capture_profile.cc logs a failed worker's status as a warning naming its address, once another sent data
    (lines as TensorFlow 2.21 printed them when a MultiWorkerMirroredStrategy worker aborted during a capture)."""
    addresses = ["127.0.0.1:36145", "127.0.0.1:40701"]
    log = (
        "W0000 00:00:1795875958.651514   19968 capture_profile.cc:150] No trace event is collected from 127.0.0.1:40701\n"
        "W0000 00:00:1795875958.651517   19968 capture_profile.cc:162] 127.0.0.1:40701 returned UNAVAILABLE: Socket closed\n"
    )
    errors = profile_capture._errors(log)
    assert errors == ["127.0.0.1:40701 returned UNAVAILABLE: Socket closed"]
    assert profile_capture.why(addresses[1], addresses, errors, silent=1) == "127.0.0.1:40701 returned UNAVAILABLE: Socket closed"
    assert profile_capture.worth_asking_again(addresses[1], addresses, errors, silent=1)
    timed_out = ["UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:40701: connection attempt timed out"]
    assert not profile_capture.worth_asking_again(addresses[1], addresses, timed_out, silent=1)
    assert not profile_capture.worth_asking_again(addresses[1], addresses, ["INTERNAL: Another profiling session active."], silent=1)


def test_a_port_is_listening_while_a_server_holds_it_and_not_after() -> None:
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{server.getsockname()[1]}"
    assert profile_capture.listening(address)
    server.close()
    assert not profile_capture.listening(address)
    assert not profile_capture.listening("no-port-here")

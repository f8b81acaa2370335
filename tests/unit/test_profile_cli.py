"""`tpuctl profile`'s arguments, the refusals before anything is asked, and the launcher's answer under hostile input.

The exchange with a launcher is tests/unit/test_profile_requests.py; the capture itself (real workers, a real
TensorFlow trace) is tests/integration/test_profile.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.standins.cli_calls import invoke
from tpuctl import endings
from tpuctl.endings import Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runs import profiling, records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord

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
    workers: list[dict[str, object]] = [{"worker": w, "host": "127.0.0.1", "python": "/usr/bin/python3"} for w in WORKERS]
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
    with pytest.raises(TpuctlError, match=f"is a {backend} job: tpuctl cannot reach its workers") as caught:
        profiling.capture(_record(tmp_path, backend), 1.0)
    assert "--profile START-END" in str(caught.value.hint)


def test_a_run_whose_workers_have_not_started_is_one_line(tmp_path: Path) -> None:
    record = _record(tmp_path)
    RunFolder(Path(record.log_dir)).make_attempt(1)
    with pytest.raises(TpuctlError, match=r"has no workers running yet"):
        profiling.capture(record, 1.0)


def test_a_run_launched_by_an_older_tpuctl_is_not_captured_through_its_profiler_server(tmp_path: Path) -> None:
    """An older launch's profilers.json names profiler servers and no "captures": its launcher serves no requests, and
    capturing through the servers is what crashed multi-worker runs (issue 46)."""
    record = _record(tmp_path)
    folder = RunFolder(Path(record.log_dir))
    folder.make_attempt(1)
    workers = [{"worker": w, "host": "127.0.0.1", "port": 40000 + i, "python": "/usr/bin/python3"} for i, w in enumerate(WORKERS)]
    folder.profilers_file(1).write_text(json.dumps({"workers": workers, "profile_dir": str(tmp_path / "m"), "backend": "local"}))
    with pytest.raises(TpuctlError, match=r"launched by an older tpuctl.*profiler server") as caught:
        profiling.capture(record, 1.0)
    assert "--profile START-END" in str(caught.value.hint)
    assert not folder.profile_requests.exists()  # nothing was asked


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


def test_the_answer_is_read_with_its_session_files_and_reasons() -> None:
    line = json.dumps({"session": "2026_01_01_00_00_00", "attempt": 1, "files": {"worker:1": "/m/b.xplane.pb"}, "missing": {"worker:0": "did not\nanswer"}})
    answer = profiling.read_answer(line.encode())
    assert answer == {"session": "2026_01_01_00_00_00", "files": {"worker:1": "/m/b.xplane.pb"}, "missing": {"worker:0": "did not answer"}}


def test_the_launchers_error_is_one_line() -> None:
    with pytest.raises(TpuctlError, match="the launcher took no capture: the run has no workers") as caught:
        profiling.read_answer(b'{"error": "the run has no workers\\nrunning now"}')
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(
    "data",
    [
        "",
        "not json",
        "[]",
        '{"session": 1, "files": {}, "missing": {"worker:0": "x", "worker:1": "x"}}',
        '{"session": "../../etc", "files": {}, "missing": {}}',
        '{"session": "s/t", "files": {}, "missing": {}}',
        '{"session": null, "files": {"worker:0": "/f.xplane.pb"}, "missing": {}}',
        '{"session": "s", "files": {"worker:0": "/f.xplane.pb"}, "missing": {"worker:0": "x"}}',
        '{"session": "s", "files": {"worker:0": 5}, "missing": {}}',
        '{"session": "s", "files": {"worker:0": "/etc/passwd"}, "missing": {}}',
        '{"session": "s", "files": [], "missing": {}}',
        "[" * 100_000,
        '{"session": "s", "files": {"worker:0": "/f.xplane.pb"}}',
        '{"error": 7}',
    ],
)
def test_a_hostile_answer_is_one_line(data: str) -> None:
    with pytest.raises(TpuctlError, match="answer is not one tpuctl wrote"):
        profiling.read_answer(data.encode())


@given(st.binary(max_size=300))
def test_any_bytes_are_an_answer_or_one_line(data: bytes) -> None:
    try:
        profiling.read_answer(data)
    except TpuctlError as err:
        assert "\n" not in err.message


def _running(tmp_path: Path) -> tuple[RunRecord, int]:
    """A run record that reads `running`: its folder's claim is held (by this process) and the record written."""
    record = _record(tmp_path)
    os.rmdir(record.log_dir)
    claim = RunFolder(Path(record.log_dir)).claim(record.run_id)
    records.write(record)
    return record, claim


@pytest.mark.parametrize("relative", [False, True])
def test_a_log_dir_names_its_run_as_report_takes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool) -> None:
    """The folder resolves to its run's record: this run has no workers yet, which only its record can say."""
    record, claim = _running(tmp_path)
    try:
        if relative:
            monkeypatch.chdir(record.log_dir)
        code, out, err = _cli("profile", "." if relative else record.log_dir)
    finally:
        os.close(claim)
    assert (code, out) == (1, "")
    assert err.count("Error:") == 1 and f"run {record.run_id} has no workers running yet" in err, err


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

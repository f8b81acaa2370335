"""--profiler-server and --profile START-END: parsed, refused in one line, carried to the workers; the run
folder's profilers.json (what `tpuctl profile` knows of the workers), written and read back, and read safely when
someone else wrote it."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.standins.cli_calls import assert_bad_input, invoke
from tpuctl.backends.local import bindshim
from tpuctl.backends.local.processes import LocalStarter
from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import Job, parse_profile
from tpuctl.launch.process.plan import build_plan
from tpuctl.runs.folder import RunFolder

ADDRESSES = ["127.0.0.1:1", "127.0.0.1:2"]


@pytest.mark.parametrize(("given_", "kept"), [("2-4", "2-4"), ("0-0", "0-0"), ("007-10", "7-10"), (" 3-3 ", "3-3"), (None, None)])
def test_profile_takes_two_whole_numbers_in_order(given_: str | None, kept: str | None) -> None:
    assert parse_profile(given_) == kept


@pytest.mark.parametrize("bad", ["4-2", "2", "2-", "-4", "a-b", "2-4-6", "1e3-2e3", "²-3", "1_0-20", "1234567890-1234567891", "", "2 - 4", "-1-3"])
def test_a_profile_that_is_no_window_is_one_line(bad: str) -> None:
    with pytest.raises(TpuctlError) as err:
        parse_profile(bad)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)


@pytest.mark.usefixtures("home")
def test_the_launch_refuses_a_bad_profile_in_one_line_exit_2() -> None:
    result = assert_bad_input(["launch", "train.py", "--dry-run", "--profile", "9-3"])
    assert "--profile" in result.err


@pytest.mark.usefixtures("home")
def test_a_dry_run_shows_the_window_in_every_worker(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    result = invoke(["launch", str(script), "--dry-run", "--workers", "2", "--profile", "2-4", "--model-dir", str(tmp_path / "m"), "--json"])
    assert result.code == 0, result.err
    for worker in json.loads(result.out)["workers"]:
        assert worker["env"][contract.PROFILE_STEPS] == "2-4"
        assert worker["env"][contract.PROFILE_DIR] == str(tmp_path / "m")


def test_the_window_goes_to_the_model_dir_else_the_log_dir() -> None:
    job = Job(script="train.py", workers=2, profile="2-4")
    with_model = build_plan(dataclasses.replace(job, model_dir="gs://b/m"), ADDRESSES, run_id="r", attempt=1, log_dir="/logs/r")
    without = build_plan(job, ADDRESSES, run_id="r", attempt=1, log_dir="/logs/r")
    assert {w.env[contract.PROFILE_DIR] for w in with_model.workers} == {"gs://b/m"}
    assert {w.env[contract.PROFILE_DIR] for w in without.workers} == {"/logs/r"}
    assert all(contract.profile_steps(w.env) == (2, 4) for w in without.workers)
    plain = build_plan(Job(script="train.py"), ADDRESSES[:1], run_id="r", attempt=1, log_dir="/logs/r")
    assert contract.PROFILE_STEPS not in plain.workers[0].env
    assert plain.workers[0].env[contract.PROFILE_DIR] == "/logs/r"  # where `tpuctl profile`'s captures go


def test_the_runtime_reads_the_variables_as_the_launch_writes_them() -> None:
    assert contract.profiler_port({contract.PROFILER_PORT: "6020"}) == 6020
    assert contract.profiler_port({}) is None
    assert contract.profile_dir({contract.MODEL_DIR: "/m"}) == "/m"  # job backends set no PROFILE_DIR
    for bad in ("0", "65536", "x", "²", "9" * 50):
        with pytest.raises(TpuctlError):
            contract.profiler_port({contract.PROFILER_PORT: bad})
    with pytest.raises(TpuctlError):
        contract.profile_steps({contract.PROFILE_STEPS: "5-1"})


def test_the_profiler_server_is_a_launch_key_and_off_by_default() -> None:
    """`tpuctl profile` captures inside the workers: a server nobody uses would cost a port and risk a crash (issue 46)."""
    from tpuctl.launch.launch_options import CONFIG_KEYS

    assert CONFIG_KEYS["profiler_server"] is bool
    assert Job(script="train.py").profiler_server is False


def test_a_local_worker_gets_a_second_held_loopback_port_for_its_profiler(tmp_path: Path) -> None:
    starter = LocalStarter(tmp_path, tmp_path / "shim.so", profiler=True)
    addresses = starter.reserve(2)
    try:
        plan = build_plan(Job(script="train.py", workers=2, python="/bin/sh"), addresses, run_id="r", attempt=1)
        taken = {int(a.rsplit(":", 1)[1]) for a in addresses}
        seen = set()
        for spec in plan.workers:
            env: dict[str, str] = {}
            port = starter._profiler_ports[spec.address or ""]  # what start() hands the worker
            bindshim.worker_env(env, tmp_path / "shim.so", int((spec.address or "").rsplit(":", 1)[1]), port)
            assert port not in taken and port not in seen
            assert env[contract.LOOPBACK_PORTS].split(",")[1] == str(port)  # the shim keeps the profiler on loopback too
            seen.add(port)
    finally:
        starter.release()


def test_profilers_json_is_read_back_from_the_newest_attempt(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.latest_profilers() is None
    for attempt in (1, 2):
        folder.make_attempt(attempt)
    entry = {"worker": "worker:0", "host": "127.0.0.1", "python": "/usr/bin/python3"}
    folder.write_profilers(1, [{**entry, "port": 40123}], "/m", "local")
    assert folder.latest_profilers() is None  # attempt 2's workers have not all started: attempt 1's are gone
    connection = {"config": "/home/me/.ssh/tpu_config", "options": ["ProxyJump=bastion"], "fanout": 8}
    folder.write_profilers(2, [entry, {**entry, "worker": "worker:1", "ssh": "h2"}], "/m", "ssh", connection)
    found = folder.latest_profilers()
    assert found is not None
    assert found["workers"][1] == {**entry, "worker": "worker:1", "ssh": "h2"}
    assert found["connection"] == connection  # how the launch reached the hosts, for `tpuctl profile`
    assert (found["profile_dir"], found["backend"], found["captures"]) == ("/m", "ssh", 1)  # its launcher serves captures
    assert folder.profilers_file(2) == tmp_path / "attempt-2" / "profilers.json"
    assert os.stat(folder.profilers_file(2)).st_mode & 0o077 == 0


HOSTILE = [
    b"",
    b"{",
    b"[]",
    b"null",
    b'{"workers": []}',
    b'{"workers": [{"worker": "w", "host": "h", "port": "1", "python": "p"}], "profile_dir": "/m", "backend": "local"}',
    b'{"workers": [{"worker": "w", "host": "h", "port": 70000, "python": "p"}], "profile_dir": "/m", "backend": "local"}',
    b'{"workers": [{"worker": "w", "host": "h", "port": true, "python": "p"}], "profile_dir": "/m", "backend": "local"}',
    b'{"workers": [{"worker": "w\\u001b[2J", "host": "h", "port": 1, "python": "p"}], "profile_dir": "/m", "backend": "local"}',
    b'{"workers": [{"worker": "w", "host": "h", "python": "p"}], "profile_dir": "/m", "backend": "local", "captures": "1"}',
    b"[" * 100_000,
    b"\xff\xfe",
    *(
        b'{"workers": [{"worker": "w", "host": "h", "port": 1, "python": "p", "ssh": "h"}], "profile_dir": "/m", "backend": "ssh", '
        + b'"connection": ' + connection + b"}"
        for connection in (
            b"[]",
            b'{"shell": "rm -rf /"}',
            b'{"options": "ProxyJump=x"}',
            b'{"options": ["a\\nb"]}',
            b'{"fanout": 0}',
            b'{"fanout": true}',
            b'{"user": ""}',
        )
    ),
]


@pytest.mark.parametrize("content", HOSTILE, ids=range(len(HOSTILE)))
def test_a_corrupt_profilers_json_is_one_line(tmp_path: Path, content: bytes) -> None:
    folder = RunFolder(tmp_path)
    folder.make_attempt(1)
    folder.profilers_file(1).write_bytes(content)
    with pytest.raises(TpuctlError) as err:
        folder.latest_profilers()
    assert err.value.exit_code == 1 and "\n" not in str(err.value)


def test_a_profilers_json_that_is_a_fifo_or_a_folder_is_one_line(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.make_attempt(1)
    os.mkfifo(folder.profilers_file(1))
    with pytest.raises(TpuctlError):
        folder.latest_profilers()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda leaf: st.lists(leaf) | st.dictionaries(st.text(max_size=8), leaf)))
def test_any_json_reads_as_a_record_or_one_line(tmp_path: Path, value: object) -> None:
    folder = RunFolder(tmp_path)
    folder.make_attempt(1)
    folder.profilers_file(1).write_text(json.dumps(value))
    try:
        found = folder.latest_profilers()
    except TpuctlError:
        return
    assert found is not None and found["workers"]

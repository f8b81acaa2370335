"""The devices listing's core: which flags go together, the TensorFlow worker's contract, its answers and failures.

The worker is a stand-in interpreter (a shell script given as --python) so these
run without TensorFlow; tests/integration/test_devices_cli.py runs the real one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import alive, tpuctl_cmd
from tpuctl.cli import cli
from tpuctl.cluster import worker_contract as contract
from tpuctl.devices import probe as devices_probe
from tpuctl.devices.probe import DeviceQuery, list_devices, parse_answer, tensorflow_devices, worker_failure
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError


def interpreter(tmp_path: Path, body: str) -> str:
    """An executable that stands in for `python -m tpuctl.runtime.devices`."""
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def ask(python: str, target: str | None = None) -> dict[str, object]:
    return tensorflow_devices(python, target, 5.0, lambda _label: contextlib.nullcontext())


# -- flags that do not go together: exit 2 before anything is probed -----------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (DeviceQuery(target="local", fast=True), "--fast looks at this machine only"),
        (DeviceQuery(fast=True, python="python3"), "--python ask TensorFlow, which --fast does not"),
        (DeviceQuery(target="my-tpu", tpu_timeout=5.0), "--tpu-timeout ask TensorFlow; --tpu my-tpu asks the Cloud TPU API"),
        (DeviceQuery(zone="us-central2-b"), "--zone: only for --tpu NAME"),
        (DeviceQuery(target="grpc://10.0.0.2:8470", project="p", credentials="k.json"), "--project, --credentials: only for --tpu NAME"),
    ],
)
def test_flags_that_do_not_go_together(query: DeviceQuery, expected: str) -> None:
    with pytest.raises(TpuctlError, match=expected) as refused:
        list_devices(query, print, lambda _label: contextlib.nullcontext())
    assert refused.value.exit_code == USAGE


def test_a_missing_interpreter_is_bad_input() -> None:
    with pytest.raises(TpuctlError, match="no such interpreter") as refused:
        list_devices(DeviceQuery(python="/no/such/python"), print, lambda _label: contextlib.nullcontext())
    assert refused.value.exit_code == USAGE


def test_fast_needs_no_tensorflow_and_ends_with_the_cpus() -> None:
    said: list[str] = []
    listing = list_devices(DeviceQuery(fast=True), said.append, lambda _label: contextlib.nullcontext())
    assert listing.tensorflow is None
    assert listing.rows[-1]["device_type"] == "CPU" and listing.rows[-1]["source"] == "os"


# -- the worker's contract: environment in, one JSON line out -------------------


def test_the_worker_gets_its_deadline_watchdog_and_this_tpuctl(tmp_path: Path) -> None:
    python = interpreter(
        tmp_path,
        'echo "sitecustomize says hi"\n'
        'ours=no; test -f "${PYTHONPATH%%:*}/tpuctl/devices/probe.py" && ours=yes\n'
        'printf \'{"tensorflow": "%s|%s|%s|%s|%s", "python": "fake", '
        '"devices": [{"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow"}]}\\n\' '
        f'"${contract.TPU_TIMEOUT}" "${contract.WATCHDOG_FD}" "$PYTHONPATH" "$ours" "$*"\n',
    )
    answer = ask(python, "grpc://10.0.0.2:8470")
    timeout, fd, path, ours, args = str(answer["tensorflow"]).split("|")
    assert float(timeout) == 5.0 and fd.isdigit()
    assert ours == "yes"  # this very tpuctl first on the worker's path, through a symlink
    shim = Path(path.split(":")[0])
    assert args == "-m tpuctl.runtime.devices grpc://10.0.0.2:8470"
    assert answer["devices"] == [{"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow"}]
    assert not shim.exists()  # removed once the worker is done


def test_the_workers_own_error_line_is_the_message(tmp_path: Path) -> None:
    python = interpreter(tmp_path, 'echo "I0000 noise" >&2\necho "tpuctl: error: TPU at grpc://h:1 is not reachable (hint)" >&2\nexit 1\n')
    with pytest.raises(TpuctlError) as failed:
        ask(python)
    assert failed.value.message == "TPU at grpc://h:1 is not reachable (hint)" and failed.value.exit_code == FAILED


def test_a_worker_killed_by_a_signal(tmp_path: Path) -> None:
    with pytest.raises(TpuctlError, match=r"was killed by SIGKILL"):
        ask(interpreter(tmp_path, "kill -9 $$\n"))


def test_worker_failure_lines() -> None:
    ours = worker_failure("py", 1, "I0000 noise\ntpuctl: error: TPU at grpc://h:1 is not reachable (hint)\n", True)
    assert ours.message == "TPU at grpc://h:1 is not reachable (hint)" and ours.hint is None and ours.exit_code == FAILED
    crash = worker_failure("py", 1, "Traceback (most recent call last):\n  ...\nSegfaultish: boom\n", True)
    assert crash.message == "TensorFlow worker failed: Segfaultish: boom" and crash.hint
    assert worker_failure("py", 3, "", False).message == "TensorFlow worker failed: exit status 3, no message"
    assert worker_failure("py", -9, "", False).message == "TensorFlow worker (py) was killed by SIGKILL"


@pytest.mark.parametrize("stdout", ["", "hello\n", "[1, 2]\n", '{"devices": [1]}\n', '{"devices": [{"name": 1, "device_type": "CPU"}]}\n'])
def test_answers_that_are_not_device_lists(stdout: str) -> None:
    with pytest.raises(TpuctlError, match="did not answer with a device list"):
        parse_answer(stdout, "py")


def test_an_answer_keeps_only_the_documented_fields() -> None:
    row = {"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow", "x": 1}
    answer = parse_answer("sitecustomize says hi\n" + json.dumps({"tensorflow": "2.21.0", "devices": [row]}) + "\n", "py")
    assert answer["devices"] == [{"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow"}]


# -- the command renders what the core lists ------------------------------------


def test_devices_command_renders_the_listing_and_the_tensorflow_line(tmp_path: Path) -> None:
    python = interpreter(
        tmp_path,
        'echo \'{"tensorflow": "9.9", "python": "fake", "devices": [{"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow"}]}\'\n',
    )
    done = CliRunner().invoke(cli, ["devices", "--tpu", "grpc://10.0.0.2:8470", "--python", python])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == ["NAME           TYPE  SOURCE", "/device:CPU:0  CPU   tensorflow"]
    assert "tpuctl: TensorFlow 9.9 in fake" in done.stderr
    as_json = CliRunner().invoke(cli, ["devices", "--tpu", "grpc://10.0.0.2:8470", "--python", python, "--json"])
    assert json.loads(as_json.stdout) == [{"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow"}]
    assert "TensorFlow 9.9" not in as_json.stderr


# -- an interpreter that never answers: a deadline, and it dies with tpuctl ------------


def _never_answers(tmp_path: Path) -> tuple[str, Path]:
    """An interpreter that never answers and starts a child of its own in a session of its own."""
    pids = tmp_path / "pids"
    body = f'setsid sleep 600 & echo "$$ $!" > {pids}.tmp && mv {pids}.tmp {pids}\nexec sleep 600\n'
    return interpreter(tmp_path, body), pids


def _gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [pid for pid in pids if alive(pid)]:
            return True
        time.sleep(0.05)
    return False


def test_an_interpreter_that_never_answers_is_stopped_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python, pids = _never_answers(tmp_path)
    monkeypatch.setattr(devices_probe, "TF_ALLOWANCE_S", 0.5)  # the allowance for importing TensorFlow, beyond --tpu-timeout
    started = time.monotonic()
    try:
        with pytest.raises(TpuctlError, match=r"gave no answer within 2s"):
            tensorflow_devices(python, None, 1.5, lambda _label: contextlib.nullcontext())
        assert time.monotonic() - started < 10
        assert _gone([int(pid) for pid in pids.read_text().split()])
    finally:
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_an_interpreter_that_never_answers_dies_with_tpuctl(tmp_path: Path) -> None:
    python, pids = _never_answers(tmp_path)
    proc = subprocess.Popen(tpuctl_cmd("devices", "--python", python, "--tpu-timeout", "2"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not pids.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the interpreter never started"
            time.sleep(0.05)
        family = [int(pid) for pid in pids.read_text().split()]
        proc.kill()
        proc.wait()
        assert _gone(family), f"survivors: {[p for p in family if alive(p)]}"
    finally:
        proc.kill()
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

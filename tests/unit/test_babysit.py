"""Babysitting against a fake TPU API: when the node is lost it is recreated and the command runs again.

The API is the fake of tests/standins/tpu_fakes.py (scripted node states);
the babysit loop, the lifecycle and the recreate are tpuctl's own. Commands
are fakes too, except where the process group is the point.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.standins.scripted_workers import FakeCommand, Runs
from tests.standins.tpu_fakes import SPEC, FakeApi, no_sleep
from tpuctl import endings
from tpuctl.cloud.nodes import babysit
from tpuctl.cloud.nodes.babysit import BabysitTerms, Command
from tpuctl.endings import INTERRUPTED, Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runs import records
from tpuctl.runs.recorded import Recorded
from tpuctl.runs.records import RunRecord


@pytest.fixture(autouse=True)
def _spec_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    yield


def _watch(runs: Runs | None, notes: list[str], **options: Any) -> BabysitTerms:
    start = runs if runs is not None else Command
    return BabysitTerms(("train",), 0.01, note=notes.append, start=start, pause=no_sleep, **options)


def _ready_api() -> FakeApi:
    api = FakeApi()
    api.add(SPEC.name, "READY", **SPEC.resource())
    return api


def test_a_command_that_ends_on_a_healthy_node_ends_babysitting_with_its_status() -> None:
    notes: list[str] = []
    assert babysit.babysit(_ready_api(), SPEC, _watch(Runs(FakeCommand(0, polls=2)), notes)) == 0
    assert notes == ["watching my-tpu in us-central2-b every 0.01s", "running train", "the command finished"]
    failed: list[str] = []
    assert babysit.babysit(_ready_api(), SPEC, _watch(Runs(FakeCommand(3)), failed)) == 3
    assert failed[-1] == "the command failed with status 3 on a healthy node"


def test_a_preempted_node_is_recreated_and_the_command_run_again() -> None:
    api = _ready_api()
    api.script[SPEC.name] = ["READY", "READY", "PREEMPTED"]
    runs = Runs(FakeCommand(None), FakeCommand(0, polls=1))
    notes: list[str] = []
    assert babysit.babysit(api, SPEC, _watch(runs, notes)) == 0
    assert runs.started[0].stopped and not runs.started[1].stopped
    assert "my-tpu is PREEMPTED; stopping the command" in notes
    assert "my-tpu is PREEMPTED; recreating it (1/10)" in notes and "my-tpu is READY again: recreated in its own zone us-central2-b" in notes
    assert api.calls == ["delete my-tpu", "create my-tpu"]


def test_a_node_that_is_gone_at_the_start_is_recreated_before_the_command_runs() -> None:
    api = FakeApi()
    notes: list[str] = []
    assert babysit.babysit(api, SPEC, _watch(Runs(FakeCommand(0)), notes)) == 0
    back = "my-tpu is READY again: recreated in its own zone us-central2-b"
    assert notes[:3] == ["my-tpu is gone; recreating it (1/10)", back, "watching my-tpu in us-central2-b every 0.01s"]
    assert api.calls == ["create my-tpu"]


def test_it_gives_up_after_max_recreates() -> None:
    api = _ready_api()
    api.script[SPEC.name] = ["READY", "READY", "PREEMPTED"]
    with pytest.raises(TpuctlError, match=r"^my-tpu is PREEMPTED after 0 recreations: --max-recreates 0 is spent; giving up$"):
        babysit.babysit(api, SPEC, _watch(Runs(FakeCommand(None)), [], max_recreates=0))


class Preempts(FakeCommand):
    """A training whose node is taken at its first look, each time it is started."""

    def __init__(self, api: FakeApi) -> None:
        super().__init__(None)
        self.api = api

    def poll(self) -> int | None:
        self.api.nodes[SPEC.name]["state"] = "PREEMPTED"
        return None


def test_max_recreates_is_the_one_budget_past_the_old_ten() -> None:
    """--max-recreates 12 recreates a node lost 12 times (no constant of 10 behind it), and the 13th loss ends
    babysitting in one line that names the flag."""
    api = _ready_api()
    notes: list[str] = []
    runs = Runs(*(Preempts(api) for _ in range(13)))
    with pytest.raises(TpuctlError) as ended:
        babysit.babysit(api, SPEC, _watch(runs, notes, max_recreates=12))
    assert ended.value.message == "my-tpu is PREEMPTED after 12 recreations: --max-recreates 12 is spent; giving up"
    assert [note for note in notes if "recreating it" in note] == [f"my-tpu is PREEMPTED; recreating it ({n}/12)" for n in range(1, 13)]
    assert api.calls.count("create my-tpu") == 12 and len(runs.started) == 13


def test_ctrl_c_stops_the_command_and_exits_130() -> None:
    class Interrupting(FakeCommand):
        def poll(self) -> int | None:
            raise KeyboardInterrupt

    runs = Runs(Interrupting(None))
    notes: list[str] = []
    assert babysit.babysit(_ready_api(), SPEC, _watch(runs, notes)) == INTERRUPTED
    assert runs.started[0].stopped and notes[-1] == "interrupted"


def test_stopping_a_real_command_stops_its_whole_process_group(tmp_path: Path) -> None:
    """SIGINT reaches every process the command started; one that ignores it is killed after the grace period."""
    pids = tmp_path / "pids"
    script = f"trap '' INT; sleep 30 & echo $! > {pids}; wait"
    command = Command(("sh", "-c", script), grace_s=0.2)
    deadline = time.monotonic() + 10
    while not pids.exists() or not pids.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    child = int(pids.read_text())
    command.stop()
    assert command.poll() == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while True:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the command's child survived"
        time.sleep(0.01)


def _wait_for_pids(path: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while not path.exists() or len(path.read_text().split()) < count:
        assert time.monotonic() < deadline, "the command never started its children"
        time.sleep(0.01)
    return [int(word) for word in path.read_text().split()]


def _assert_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while left := [pid for pid in pids if _alive(pid)]:
        assert time.monotonic() < deadline, f"survivors of the command: {left}"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _real_command_starting(pids: Path) -> str:
    """A shell that starts one child in its group and one in a session of its own, then waits."""
    detached = "import os, sys, time; os.setsid(); time.sleep(60)"
    return f"sleep 60 & echo $! >> {pids}; python3 -c '{detached}' & echo $! >> {pids}; wait"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_stopping_signal_stops_the_command_and_all_it_started_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    pids = tmp_path / "pids"

    class Signalled(Command):
        """The real command; once it runs, babysit itself receives `sig` (as `kill` would send it)."""

        def poll(self) -> int | None:
            _wait_for_pids(pids, 2)
            os.kill(os.getpid(), sig)
            return super().poll()

    started: list[Command] = []

    def start(argv: tuple[str, ...]) -> Command:
        started.append(Signalled(("sh", "-c", _real_command_starting(pids)), grace_s=0.5))
        return started[-1]

    notes: list[str] = []
    watch = BabysitTerms(("train",), 0.01, note=notes.append, start=start, pause=no_sleep)
    assert babysit.babysit(_ready_api(), SPEC, watch) == INTERRUPTED
    assert notes[-1] == "interrupted" and f"received {sig.name}; stopping the command" in notes
    _assert_gone([started[0].process.pid, *_wait_for_pids(pids, 2)])


def test_an_api_that_keeps_failing_stops_the_command_before_the_error_leaves(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    api = _ready_api()
    started: list[Command] = []

    def start(argv: tuple[str, ...]) -> Command:
        started.append(Command(("sh", "-c", _real_command_starting(pids)), grace_s=0.5))
        _wait_for_pids(pids, 2)
        api.get_node = _failing  # type: ignore[method-assign]
        return started[-1]

    with pytest.raises(TpuctlError, match="permission denied"):
        babysit.babysit(api, SPEC, BabysitTerms(("train",), 0.01, start=start, pause=no_sleep))
    _assert_gone([started[0].process.pid, *_wait_for_pids(pids, 2)])


def _failing(zone: str, name: str) -> None:
    raise TpuctlError("permission denied on projects/p (tpu.nodes.get)")


# ---- babysitting kept as a run: its folder, its record, --detach -----------------------------------


def test_the_loop_is_kept_as_a_run_its_record_saying_running_then_how_it_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for code, state in ((0, Kind.SUCCEEDED), (3, Kind.FAILED), (INTERRUPTED, Kind.STOPPED)):
        kept = Recorded.new("babysit", "babysit-my-tpu", "sh -c 'exit 3'", job="my-tpu")
        seen: list[RunRecord] = []
        assert kept.run(functools.partial(_seen_running, kept, seen, code), _no_warning) == code
        (during,) = seen
        said = (during.state, during.backend, during.kind, during.job, during.pid, during.detached)
        assert said == (endings.RUNNING, None, "babysit", "my-tpu", os.getpid(), False)
        assert during.log_dir == str(tmp_path / "state" / "tpuctl" / "runs" / kept.run_id) and kept.run_id.split("-")[2:4] == ["babysit", "my"]
        after = records.find(kept.run_id, _no_warning)[0]
        assert (after.state, after.exit_code, after.script) == (state, code, "sh -c 'exit 3'") and after.ended is not None
        assert not kept.folder.is_running()


def _seen_running(kept: Recorded, seen: list[RunRecord], code: int) -> int:
    """The loop's stand-in: what the record says while it runs, then the exit status it is given."""
    seen.append(records.find(kept.run_id, _no_warning)[0])
    return code


def test_an_error_in_the_loop_is_recorded_as_failed_and_still_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kept = Recorded.new("babysit", "babysit-my-tpu", "", job="my-tpu")
    with pytest.raises(TpuctlError, match="permission denied") as raised:
        kept.run(_failing_loop, _no_warning)
    record = records.find(kept.run_id, _no_warning)[0]
    assert (record.state, record.exit_code) == (Kind.FAILED, raised.value.exit_code)
    assert not kept.folder.is_running()


def _failing_loop() -> int:
    raise TpuctlError("permission denied on projects/p (tpu.nodes.get)", exit_code=1)


def _no_warning(line: str) -> None:
    raise AssertionError(line)


# The real CLI in a process of its own, its TPU API the fake (a detached babysit forks: the fake goes with it).
DETACHED_BABYSIT = """\
import sys
from tests.standins.tpu_fakes import SPEC, FakeApi
from tpuctl.cli import babysit, main
from tpuctl.cloud.nodes import nodespec

api = FakeApi()
api.add(SPEC.name, "READY", **SPEC.resource())
nodespec.save(SPEC)
babysit.tpu_api = lambda resolved: api
main(sys.argv[1:])
"""


def test_a_detached_babysit_outlives_its_command_and_stop_ends_it_as_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    program, pids = tmp_path / "babysit_cli.py", tmp_path / "pids"
    program.write_text(DETACHED_BABYSIT)
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "TPUCTL_PROJECT": SPEC.project, "TPUCTL_ZONE": SPEC.zone, "PYTHONPATH": str(ROOT)}
    command = f"echo the command runs; sleep 60 & echo $! > {pids}; wait"
    started = time.monotonic()
    cli = subprocess.run(
        [sys.executable, str(program), "babysit", SPEC.name, "--interval", "0.1", "--detach", "--", "sh", "-c", command],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert time.monotonic() - started < 20
    run_id = cli.stdout.strip()
    record = records.find(run_id, _no_warning)[0]
    assert (record.state, record.backend, record.kind, record.job, record.detached) == (endings.RUNNING, None, "babysit", SPEC.name, True)
    assert f"babysit: {run_id} runs detached (pid {record.pid})" in cli.stderr and f"tpuctl stop {run_id}" in cli.stderr
    assert os.getsid(record.pid) != os.getsid(0)  # a session of its own: no terminal, no shell's hangup reaches it
    (sleeper,) = _wait_for_pids(pids, 1)
    stop = subprocess.run([sys.executable, str(program), "stop", run_id], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert stop.returncode == 0, stop.stderr
    deadline = time.monotonic() + 20
    while (ended := records.find(run_id, _no_warning)[0]).state == endings.RUNNING:
        assert time.monotonic() < deadline, "the babysit did not stop"
        time.sleep(0.05)
    assert (ended.state, ended.exit_code) == (Kind.STOPPED, INTERRUPTED)
    _assert_gone([record.pid, sleeper])
    console = record.folder.console_log.read_text()
    assert "the command runs" in console and "babysit: received SIGTERM; stopping the command" in console, console
    assert console.rstrip().endswith("babysit: interrupted"), console

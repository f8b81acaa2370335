"""Provisioning is a step of the launch flow (issue 47): the flow makes the run's machine before the backend's run, hands
that run the machine's hosts, and ends the machine after it however the run ended; the backend never makes or deletes."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tpuctl.cloud.capacity.run_vm import node_name
from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import INTERRUPTED, Kind
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.launch.execute import execute
from tpuctl.launch.job import Job
from tpuctl.launch.launch_options import LaunchOptions
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.prepare import Launch
from tpuctl.launch.registry import backend_module
from tpuctl.launch.runner import Provisioner, RunContext, Runner
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder

HOSTS = [HostEntry("made-0"), HostEntry("made-1")]


class Machine(Provisioner):
    """A stand-in machine: says when it is made and ended, and with what ending."""

    def __init__(self, said: list[str], fails: bool = False) -> None:
        self.said, self.fails = said, fails

    def machine(self, run_id: str) -> str:
        return f"machine {run_id}"

    def provision(self, job: Job, context: RunContext) -> list[HostEntry]:
        self.said.append("provision")
        if self.fails:
            raise TpuctlError("no capacity anywhere", exit_code=FAILED)
        return HOSTS

    def finish(self, ended: Kind | None, context: RunContext) -> None:
        self.said.append(f"finish {ended.value if ended is not None else None}")


class OnMachine(Runner):
    """A backend whose run says which hosts it was handed, then ends as `ends` says."""

    name = "fake"

    def __init__(self, made: Machine | None, said: list[str], ends: Callable[[], Outcome]) -> None:
        self.made, self.said, self.ends = made, said, ends

    def provisioner(self) -> Provisioner | None:
        return self.made

    def request(self, job: Job, run_id: str) -> Any:
        raise AssertionError("not dry")

    def run(self, job: Job, context: RunContext) -> Outcome:
        self.said.append(f"run on {None if context.hosts is None else [entry.host for entry in context.hosts]}")
        return self.ends()


def _launch(tmp_path: Path, runner: Runner) -> Outcome:
    launch = Launch(Job("train.py"), runner, LaunchOptions(log_dir=str(tmp_path / "logs")), "run-x")
    return execute(launch, io.StringIO(), lambda line: None)


def _stopped() -> Outcome:
    raise KeyboardInterrupt


@pytest.mark.parametrize(("code", "ending"), [(0, "succeeded"), (3, "failed")])
def test_the_flow_makes_the_machine_before_the_backend_s_run_hands_it_the_hosts_and_ends_it_after(tmp_path: Path, code: int, ending: str) -> None:
    said: list[str] = []
    outcome = _launch(tmp_path, OnMachine(Machine(said), said, lambda: Outcome(exit_code=code, attempts=1, elapsed_s=0.0)))
    assert outcome.exit_code == code
    assert said == ["provision", "run on ['made-0', 'made-1']", f"finish {ending}"]
    events = tl.read(RunFolder(tmp_path / "logs").timeline.read_text().splitlines()).events
    assert [e.event for e in events] == [tl.RUN_START, tl.RUN_END]


def test_a_stop_during_the_backend_s_run_ends_the_machine_as_stopped_and_the_launch_with_130(tmp_path: Path) -> None:
    said: list[str] = []
    with pytest.raises(TpuctlError) as stopped:
        _launch(tmp_path, OnMachine(Machine(said), said, _stopped))
    assert stopped.value.exit_code == INTERRUPTED and stopped.value.message == "interrupted while running on machine run-x for the run"
    assert said == ["provision", "run on ['made-0', 'made-1']", "finish stopped"]


def test_a_machine_that_cannot_be_made_runs_nothing_and_is_still_ended(tmp_path: Path) -> None:
    said: list[str] = []
    with pytest.raises(TpuctlError, match="no capacity anywhere"):
        _launch(tmp_path, OnMachine(Machine(said, fails=True), said, lambda: Outcome(exit_code=0, attempts=1, elapsed_s=0.0)))
    assert said == ["provision", "finish None"]


def test_a_backend_without_a_provisioner_runs_on_its_own_hosts(tmp_path: Path) -> None:
    said: list[str] = []
    _launch(tmp_path, OnMachine(None, said, lambda: Outcome(exit_code=0, attempts=1, elapsed_s=0.0)))
    assert said == ["run on None"]


@pytest.fixture
def _settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    yield


@pytest.mark.usefixtures("_settings")
def test_the_ssh_backend_names_new_tpu_s_vm_as_its_provisioner_and_none_for_hosts_it_is_given() -> None:
    """--new-tpu's VM is made by the flow's step, never by the ssh backend's run; --hosts needs no step."""
    ssh = backend_module("ssh")
    made = ssh.runner(ssh.Options(new_tpu="v4-16", tpu_zone="us-central2-b", project="my-proj")).provisioner()
    assert isinstance(made, Provisioner) and made.machine("run-x") == f"TPU VM {node_name('run-x')}"
    assert ssh.runner(ssh.Options(ssh_hosts="h1,h2")).provisioner() is None

"""A preempted `launch --tpu` waits for its TPU VM to be READY again, then restarts every worker.

The slice is the Google stand-in's node, whose host IPs an ssh config maps to real sshd servers
on loopback (as in test_tpu_ssh.py). Workers exit with TensorFlow's preemption status (42) on
their first attempt while the test moves the node through the states the service would
(PREEMPTED, REPAIRING, READY with new addresses, or deleted). The wait itself is also checked
in-process, against the same stand-in through the real TpuApi.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.integration.sshd import SshCluster
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tests.standins.new_tpu_cloud import Launch
from tpuctl.cloud.nodes.health import wait_ready_again
from tpuctl.cloud.nodes.tpu import TpuApi
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.settings import cloud as settings

ZONE = "us-central2-b"
# Where a repair moves the slice's hosts (the ssh config sends these to the sshd servers too).
NEW_IPS = ["10.130.9.2", "10.130.9.3"]
# Attempt 1 says it started, waits for the test to preempt the node, and exits as a preempted
# TensorFlow worker does; any later attempt succeeds.
WORKER = """\
import os, sys, time
from pathlib import Path

flags = Path(os.environ["FLAGS"])
attempt, index = os.environ["TPUCTL_ATTEMPT"], os.environ["TPUCTL_WORKER_INDEX"]
(flags / f"started-{attempt}-{index}").write_text("")
print(f"attempt {attempt} worker {index}", flush=True)
if attempt == "1":
    end = time.monotonic() + 120
    while not (flags / "preempt").exists() and time.monotonic() < end:
        time.sleep(0.05)
    if os.environ.get("VANISH"):  # as a Cloud TPU VM's preemption does: the host goes, with its ssh session
        parent = lambda pid: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(parent(os.getppid()), 9)  # the agent, above this worker's reaper
        time.sleep(60)
    sys.exit(42)
"""


@dataclass
class Slice:
    name: str
    ips: list[str]
    env: dict[str, str]
    config: Path
    script: Path
    flags: Path
    logs: Path


@pytest.fixture
def tpu(cluster: SshCluster, google_standin: GoogleStandin, tmp_path: Path) -> Slice:
    """A READY 2-host v4-16 in the stand-in; its IPs, before and after a repair, reach the two sshd."""
    (name,) = google_standin.add_ready_nodes(ZONE, 1, prefix="pod", accelerator_type="v4-16")
    node = google_standin.node(ZONE, name)
    assert node is not None
    ips = [endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
    assert len(ips) == 2 and not set(ips) & set(NEW_IPS)
    config = cluster.aliased(tmp_path / "ssh_config", [*zip(ips, cluster.ports, strict=True), *zip(NEW_IPS, reversed(cluster.ports), strict=True)])
    script = tmp_path / "preempted_once.py"
    script.write_text(WORKER)
    flags = tmp_path / "flags"
    flags.mkdir()
    env = {**standin_env(google_standin, tmp_path), "TPUCTL_ZONE": ZONE}
    return Slice(name, ips, env, config, script, flags, tmp_path / "logs")


def _launch_and_preempt(tpu: Slice, standin: GoogleStandin, *extra: str) -> Launch:
    """Both workers of attempt 1 running, then the node PREEMPTED and the workers ending with 42."""
    launch = Launch.start(
        [str(tpu.script), "--tpu", tpu.name, "--ssh-config", str(tpu.config), "--strategy", "none",
         "--log-dir", str(tpu.logs), "--env", f"FLAGS={tpu.flags}", *extra],
        tpu.env, tpu.script.parent,
    )  # fmt: skip
    try:
        wait_for(lambda: all((tpu.flags / f"started-1-{index}").exists() for index in (0, 1)) or launch.proc.poll() is not None)
    except AssertionError:
        launch.proc.kill()
        raise
    assert launch.proc.poll() is None, launch.stderr
    standin.preempt(ZONE, tpu.name)
    (tpu.flags / "preempt").write_text("")
    launch.wait_line(f"TPU VM {tpu.name} is PREEMPTED; waiting up to 30 min for it to be READY again")
    return launch



def test_a_preempted_slice_is_waited_for_and_the_workers_relaunched_on_its_new_hosts(tpu: Slice, google_standin: GoogleStandin) -> None:
    launch = _launch_and_preempt(tpu, google_standin)
    google_standin.set_node_state(ZONE, tpu.name, "REPAIRING")
    launch.wait_line(f"TPU VM {tpu.name} is REPAIRING (")
    google_standin.set_node_state(ZONE, tpu.name, "READY", addresses=NEW_IPS)
    assert launch.finish() == 0, launch.stderr
    notices = [line for line in launch.lines if line.startswith("tpuctl: ")]
    ours = [line for line in notices if "TPU VM" in line]
    assert [line.split(" (")[0].split(" after ")[0] for line in ours] == [
        f"tpuctl: TPU VM {tpu.name} is PREEMPTED; waiting up to 30 min for it to be READY again",
        f"tpuctl: TPU VM {tpu.name} is REPAIRING",
        f"tpuctl: TPU VM {tpu.name} is READY again",
        f"tpuctl: TPU VM {tpu.name}'s hosts are now {NEW_IPS[0]}, {NEW_IPS[1]}",
    ], launch.stderr
    assert any("was preempted (exit status 42)" in line and "preemption 1/10" in line for line in notices), launch.stderr
    outcome = json.loads((tpu.logs / "outcome.json").read_text())
    assert (outcome["exit_code"], outcome["attempts"], outcome["preemptions"]) == (0, 2, 1)
    first, second = (json.loads((tpu.logs / f"attempt-{n}" / "plan.json").read_text()) for n in (1, 2))
    assert [worker["host"] for worker in first["workers"]] == tpu.ips
    assert [worker["host"] for worker in second["workers"]] == NEW_IPS  # read afresh from the API
    assert all((tpu.flags / f"started-2-{index}").exists() for index in (0, 1))
    assert "Traceback" not in launch.stderr


def test_hosts_that_go_down_with_their_preempted_node_are_a_preemption(tpu: Slice, google_standin: GoogleStandin) -> None:
    """On a Cloud TPU VM TensorFlow ends no worker with 42: the connection is lost, and the node says why."""
    launch = _launch_and_preempt(tpu, google_standin, "--env", "VANISH=1")
    google_standin.set_node_state(ZONE, tpu.name, "READY")
    assert launch.finish() == 0, launch.stderr
    assert any("was lost with its TPU VM, which is PREEMPTED now: a preemption" in line for line in launch.lines), launch.stderr
    assert any("was preempted (lost the ssh connection" in line and "preemption 1/10" in line for line in launch.lines), launch.stderr
    outcome = json.loads((tpu.logs / "outcome.json").read_text())
    assert (outcome["exit_code"], outcome["attempts"], outcome["preemptions"]) == (0, 2, 1)


def test_a_slice_deleted_while_waited_for_ends_the_launch_in_one_line(tpu: Slice, google_standin: GoogleStandin) -> None:
    launch = _launch_and_preempt(tpu, google_standin)
    google_standin.vanish(ZONE, tpu.name)
    assert launch.finish() == FAILED, launch.stderr
    errors = [line for line in launch.lines if line.startswith("Error:")]
    assert errors == [
        f"Error: TPU VM {tpu.name} was deleted (project {google_standin.project}, zone {ZONE}): nothing left to relaunch on "
        f"(`tpuctl babysit {tpu.name} -- tpuctl launch ...` recreates a lost node and runs the launch again)"
    ], launch.stderr
    assert "Traceback" not in launch.stderr
    assert not any((tpu.flags / f"started-2-{index}").exists() for index in (0, 1))


def test_ctrl_c_while_waiting_for_the_slice_exits_130_at_once(tpu: Slice, google_standin: GoogleStandin) -> None:
    launch = _launch_and_preempt(tpu, google_standin)
    launch.proc.send_signal(signal.SIGINT)
    assert launch.finish(timeout=10) == 130, launch.stderr
    assert f"tpuctl: received SIGINT; no longer waiting for TPU VM {tpu.name}" in launch.lines
    assert [line for line in launch.lines if line.startswith("Error:")] == [f"Error: interrupted while waiting for TPU VM {tpu.name} to be READY again"], (
        launch.stderr
    )
    assert "Traceback" not in launch.stderr


def test_a_preempted_worker_on_listed_hosts_restarts_at_once_without_the_tpu_api(cluster: SshCluster, google_standin: GoogleStandin, tmp_path: Path) -> None:
    script = tmp_path / "preempted_once.py"
    script.write_text(WORKER)
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "preempt").write_text("")  # attempt 1 ends with 42 straight away
    env = standin_env(google_standin, tmp_path)  # the TPU API is the stand-in: any call would show
    launch = Launch.start(
        [str(script), "--hosts", "host1,host2", "--ssh-config", str(cluster.config), "--strategy", "none",
         "--log-dir", str(tmp_path / "logs"), "--env", f"FLAGS={flags}"],
        env, tmp_path,
    )  # fmt: skip
    assert launch.finish() == 0, launch.stderr
    assert google_standin.requests == []
    assert not any("TPU VM" in line for line in launch.lines), launch.stderr
    outcome = json.loads((tmp_path / "logs" / "outcome.json").read_text())
    assert (outcome["exit_code"], outcome["attempts"], outcome["preemptions"]) == (0, 2, 1)


# The wait itself, in-process: babysit's wait_ready_again through the real TpuApi.


@pytest.fixture
def api(google_standin: GoogleStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TpuApi:
    for name, value in {**standin_env(google_standin, tmp_path), "TPUCTL_ZONE": ZONE}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return TpuApi.connect(settings.resolve())


def test_the_wait_says_each_new_state_and_needs_ready_and_healthy(api: TpuApi, google_standin: GoogleStandin) -> None:
    (name,) = google_standin.add_ready_nodes(ZONE, 1, prefix="spot")
    google_standin.tpu.nodes[(ZONE, name)]["schedulingConfig"] = {"spot": True}
    google_standin.preempt(ZONE, name)
    # What the service does between two looks; each look sees the next one.
    script = [("PREEMPTED", ""), ("REPAIRING", ""), ("READY", "UNHEALTHY"), ("READY", "UNHEALTHY"), ("RESTARTING", ""), ("READY", "HEALTHY")]
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        state, health = script.pop(0)
        google_standin.set_node_state(ZONE, name, state, health=health)

    notes: list[str] = []
    node = wait_ready_again(api, ZONE, name, notes.append, pause=pause)
    assert node.ready and not script
    assert [note.split(" (")[0].split(" after ")[0] for note in notes] == [
        f"TPU VM {name} is PREEMPTED; waiting up to 30 min for it to be READY again; "
        "a preempted spot node is not restarted by the service, `tpuctl babysit` recreates it",
        f"TPU VM {name} is REPAIRING",
        f"TPU VM {name} is READY, UNHEALTHY",
        f"TPU VM {name} is RESTARTING",
        f"TPU VM {name} is READY again",
    ]
    assert pauses == sorted(pauses) and pauses[0] == pytest.approx(0.1) and max(pauses) <= 5.0  # backs off, never past 5 s
    again = wait_ready_again(api, ZONE, name, notes.append, pause=pause)  # READY at the first look: at once, silently
    assert again.ready and len(notes) == 5


def test_the_wait_ends_in_one_line_for_a_node_that_cannot_come_back(api: TpuApi, google_standin: GoogleStandin) -> None:
    (name,) = google_standin.add_ready_nodes(ZONE, 1, prefix="gone")
    for state in ("TERMINATED", "DELETING"):
        google_standin.set_node_state(ZONE, name, state)
        with pytest.raises(TpuctlError) as ended:
            wait_ready_again(api, ZONE, name, lambda note: None)
        assert ended.value.exit_code == FAILED
        assert ended.value.message == f"TPU VM {name} is {state}: it will not be READY again by itself"
        assert "tpuctl babysit" in str(ended.value.hint)
    google_standin.set_node_state(ZONE, name, "PREEMPTED")
    started = time.monotonic()
    with pytest.raises(TpuctlError) as late:
        wait_ready_again(api, ZONE, name, lambda note: None, timeout_s=0.3)
    assert late.value.message == f"TPU VM {name} is still PREEMPTED after 0.3s; giving up"
    assert late.value.exit_code == FAILED and time.monotonic() - started < 5
    google_standin.faults.latency_s = 30.0  # an API that hangs: each look is cut off, the wait still ends
    started = time.monotonic()
    with pytest.raises(TpuctlError) as hung:
        wait_ready_again(api, ZONE, name, lambda note: None, timeout_s=60, look_timeout_s=0.5)
    assert hung.value.message == f"the TPU API did not answer within 0.5s about TPU VM {name}"
    assert time.monotonic() - started < 15  # far less than one uncut look (30 s): a loaded machine's margin

"""A run's own TPU VM (`tpuctl launch --new-tpu`) in the TPU stand-in, its hosts real sshd servers: the cloud the
new-TPU scenarios share, a launch running in the background, and the remote agent a preemption takes down."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.conftest import run_tpuctl, tpuctl_cmd, wait_for
from tests.integration.sshd import SshCluster
from tests.standins import catalog
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value

ZONES = ["us-central2-a", "us-central2-b"]  # v4 is priced in us-central2 (the billing stand-in's SKUs)
OTHER_RUN = "20261127-080000-other-beef"
# Each worker says where it runs, waits for the test's word on its first attempt, and exits with EXIT.
WORKER = """\
import os, sys, time
from pathlib import Path

flags = Path(os.environ["FLAGS"])
index = os.environ["TPUCTL_WORKER_INDEX"]
print(f"worker {index} of run {os.environ['TPUCTL_RUN_ID']}", flush=True)
(flags / f"started-{index}").write_text("")
end = time.monotonic() + 120
while os.environ["TPUCTL_ATTEMPT"] == "1" and not (flags / "go").exists() and time.monotonic() < end:
    time.sleep(0.05)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


@dataclass
class Launch:
    """A `tpuctl launch` running in the background; its stderr lines (and its stdout's, in `out`) collected as they come."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    out: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, args: list[str], env: dict[str, str], cwd: Path) -> Launch:
        proc = subprocess.Popen(tpuctl_cmd("launch", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        launch = cls(proc)
        assert proc.stdout is not None and proc.stderr is not None
        for stream, keep in ((proc.stderr, launch.lines), (proc.stdout, launch.out)):  # both drained, so no pipe fills
            reader = threading.Thread(target=_read_lines, args=(stream, keep), daemon=True)
            reader.start()
            launch.readers.append(reader)
        return launch

    def said(self, text: str, *, on_stdout: bool = False) -> bool:
        return any(text in line for line in (self.out if on_stdout else self.lines))

    def wait_line(self, text: str, timeout: float = 60.0, *, on_stdout: bool = False) -> None:
        try:
            wait_for(lambda: self.said(text, on_stdout=on_stdout) or self.proc.poll() is not None, timeout=timeout)
        finally:
            if not self.said(text, on_stdout=on_stdout):
                self.proc.kill()
                self._drain()
        assert self.said(text, on_stdout=on_stdout), f"no {text!r} in:\n{self.stderr}"

    def finish(self, timeout: float = 120.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            self._drain()
        return code

    def _drain(self) -> None:
        for reader in self.readers:
            reader.join(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


def _read_lines(stream: IO[str], into: list[str]) -> None:
    for line in stream:
        into.append(line.rstrip("\n"))


@dataclass
class Cloud:
    g: GoogleStandin
    env: dict[str, str]
    config: Path
    script: Path
    flags: Path
    tmp: Path
    bystanders: list[tuple[str, str]]  # (zone, name): the user's node and another run's

    def launch(self, *extra: str, env: dict[str, str] | None = None) -> Launch:
        args = [str(self.script), "--new-tpu", "v4-16", "--ssh-config", str(self.config), "--strategy", "none",
                "--log-dir", str(self.tmp / "logs"), "--env", f"FLAGS={self.flags}", *extra]  # fmt: skip
        return Launch.start(args, {**self.env, **(env or {})}, self.tmp)

    @property
    def host_python(self) -> Path:
        """An interpreter with TensorFlow for these hosts, at a path of the hosts' own. They share this machine's disk,
        and a new VM's workers run its python3 (the system's here, without TensorFlow); the launcher's own interpreter is
        refused as this machine's (tpuctl/backends/ssh/fresh.py), so a wrapper outside its environment and home runs it."""
        wrapper = self.tmp / "host-python"
        if not wrapper.exists():
            wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
            wrapper.chmod(0o755)
        return wrapper

    def ours(self) -> list[dict[str, Any]]:
        """The nodes in the stand-in that a run of this test created (labelled, and not the other run's)."""
        with self.g._lock:
            self.g.tpu.advance()  # the service's scheduled changes (a delete's end) up to now
            nodes = [dict(node) for node in self.g.tpu.nodes.values()]
        return [n for n in nodes if LABEL_KEY in n.get("labels", {}) and n["labels"][LABEL_KEY] != label_value(OTHER_RUN)]

    def record(self) -> dict[str, Any]:
        (path,) = (Path(self.env["HOME"]) / ".local" / "state" / "tpuctl" / "records").glob("*.json")
        found: dict[str, Any] = json.loads(path.read_text())
        return found

    def started(self, launch: Launch, workers: int = 2) -> None:
        wait_for(lambda: all((self.flags / f"started-{i}").exists() for i in range(workers)) or launch.proc.poll() is not None, timeout=90)
        assert launch.proc.poll() is None, launch.stderr

    def assert_bystanders_survive(self) -> None:
        for zone, name in self.bystanders:
            assert self.g.node(zone, name) is not None, f"{name} in {zone} was deleted"


def new_tpu_cloud(cluster: SshCluster, g: GoogleStandin, tmp_path: Path) -> Cloud:
    """The stand-in with two v4 zones, a node the user made and one labelled for another run; every address a node may
    get reaches the two sshd hosts."""
    g.create_delay_s = 0.05
    g.set_zones(ZONES, ["v4-8", "v4-16"])
    mine = g.add_ready_nodes(ZONES[0], 1, prefix="mine", accelerator_type="v4-16")[0]
    other = g.add_ready_nodes(ZONES[1], 1, prefix="other", accelerator_type="v4-16")[0]
    with g._lock:
        g.tpu.nodes[(ZONES[1], other)]["labels"] = {LABEL_KEY: label_value(OTHER_RUN)}
    # Every address a node of either zone may get (one counter a zone, in the region's range): even ones to the first sshd.
    base = catalog.cidr_block(ZONES[0]).split("/")[0].rsplit(".", 1)[0]
    config = cluster.aliased(tmp_path / "ssh_config", [(f"{base}.{n + 2}", cluster.ports[n % 2]) for n in range(24)])
    script = tmp_path / "project" / "train.py"  # its folder is what --sync sends to a new VM's hosts: the script alone
    script.parent.mkdir()
    script.write_text(WORKER)
    flags = tmp_path / "flags"
    flags.mkdir()
    return Cloud(g, standin_env(g, tmp_path), config, script, flags, tmp_path, [(ZONES[0], mine), (ZONES[1], other)])


def ranked(cloud: Cloud) -> list[str]:
    """The zones in the order `tpuctl offers` ranks them: the order the hunt tries."""
    result = run_tpuctl("offers", "v4-16", "--zones", ",".join(ZONES), "--json", env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert result.returncode == 0, result.stderr
    return [offer["zone"] for offer in json.loads(result.stdout)]


def agent_of_worker(run_id: str, attempt: int) -> int | None:
    """The remote agent above a worker of this run and attempt (worker -> its reaper -> the agent), found through
    /proc as a host's own processes would be; None while there is none yet."""
    wanted = {f"TPUCTL_RUN_ID={run_id}".encode(), f"TPUCTL_ATTEMPT={attempt}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            variables = set((entry / "environ").read_bytes().split(b"\0"))
            if wanted <= variables and b"TPUCTL_WORKER_INDEX=0" in variables:
                reaper = _parent(int(entry.name))
                return _parent(reaper)
        except (OSError, ValueError):
            continue
    return None


def just_after_a_backup(launch: Launch, timeline: Path) -> None:
    """Once the run's worker has finished two backups, the moment it finishes the next (the runtime tells each save
    at once, never sampled): a preemption then cuts none half-written. The launch must still be running."""

    def saved() -> int:
        return timeline.read_text().count('"checkpoint_save_end"') if timeline.exists() else 0

    wait_for(lambda: saved() >= 2 or launch.proc.poll() is not None, timeout=180)
    before = saved()
    wait_for(lambda: saved() > before or launch.proc.poll() is not None, timeout=30)
    assert launch.proc.poll() is None, launch.stderr


def preempt_the_run_s_vm(cloud: Cloud) -> str:
    """The run's node goes PREEMPTED in the stand-in and its host goes down with the worker (the agent is killed, as a
    preempted Cloud TPU VM's host takes its ssh session and its disk); the node's name."""
    record = cloud.record()
    run_id, name = record["run_id"], record["created_node"]
    agent = agent_of_worker(run_id, 1)
    assert agent is not None
    cloud.g.preempt(ZONES[0], name)
    os.kill(agent, signal.SIGKILL)
    return str(name)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def preempted_where_no_capacity_is_left(
    cloud: Cloud, *, then: str | None = None, stocked_out: bool = True, extra: tuple[str, ...] = ()
) -> tuple[Launch, str, str, list[str]]:
    """A run on its own VM in the first zone of the ranked two (launched with `extra` too), that VM preempted with its
    zone out of capacity unless not `stocked_out` (and the second zone given fault `then`, if any): the launch, run id,
    VM name and zone order."""
    order = ranked(cloud)
    launch = cloud.launch("--zones", ",".join(order), *extra)
    cloud.started(launch)
    record = cloud.record()
    run_id, name = record["run_id"], record["created_node"]
    assert record["zone"] == order[0]
    agent = agent_of_worker(run_id, 1)
    assert agent is not None
    if stocked_out:
        cloud.g.faults.stockout(order[0], "capacity")
    if then is not None:
        cloud.g.faults.stockout(order[1], then)
    cloud.g.preempt(order[0], name)
    os.kill(agent, signal.SIGKILL)  # the preempted host takes worker 0's session with it
    return launch, run_id, name, order

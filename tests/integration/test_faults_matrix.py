"""The faults matrix: whatever ends a run, no process started for it survives, and the exit status is the documented one.

Outcomes (success, a worker crash, a worker killed from outside, SIGINT, SIGTERM
and SIGHUP to tpuctl, SIGKILL of tpuctl, a worker that ignores SIGINT and
SIGTERM, one that holds the GIL in C code, one whose main process exits leaving
a child in its group or in a new session, a full log disk) for the local and ssh backends, and
the subsets that apply to `tpuctl babysit` and to the Kubernetes follower, and a one-shot
kubectl that outlives a SIGKILLed tpuctl (the representative of reaper.run's children).

Every run carries a unique mark: in tpuctl's environment (inherited by its
children: workers, ssh, kubectl, a babysat command) and in the worker script's
path (which reaches the remote agent's command line, hex-packed). Within 10 s of
the outcome, /proc must hold no live process with the mark. Workers are the
stdlib script scripts/faults_worker.py with --strategy none: no TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, tpuctl_cmd, wait_for
from tests.standins.faults import Faults
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

SURVIVAL_S = 10.0
ZONE = "us-central2-b"


# ---- finding the run's processes -----------------------------------------------------------


def survivors(mark: str) -> list[str]:
    """Live processes (not zombies) with the mark in their environment or command line, as `pid: argv`."""
    needles = (mark.encode(), mark.encode().hex().encode())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            argv = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if state in ("Z", "X"):
            continue
        if any(needle in argv for needle in needles) or needles[0] in environ:
            words = argv.replace(bytes(1), b" ").decode(errors="replace")
            found.append(f"{entry.name}: {words[:200]}")
    return found


def assert_none_survive(mark: str, since: float) -> None:
    """No process of the run is alive SURVIVAL_S after `since` (the outcome); kill and name any that are."""
    while (left := survivors(mark)) and time.monotonic() < since + SURVIVAL_S:
        time.sleep(0.05)
    for line in left:
        with contextlib.suppress(OSError):
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
    assert not left, f"{len(left)} process(es) of the run outlived it by {SURVIVAL_S:g}s:\n" + "\n".join(left)


@dataclass
class Run:
    """One run under test: its mark, its pid folder, its worker script (in a folder named by the mark)."""

    tmp_path: Path
    mark: str = field(default_factory=lambda: f"faultsmark{uuid.uuid4().hex[:12]}")

    def __post_init__(self) -> None:
        self.pid_dir = self.tmp_path / "pids"
        self.pid_dir.mkdir()
        folder = self.tmp_path / self.mark
        folder.mkdir()
        self.script = folder / "faults_worker.py"
        shutil.copy(SCRIPTS / "faults_worker.py", self.script)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return {**(base if base is not None else os.environ), "FAULTS_MARK": self.mark, "NO_COLOR": "1"}

    def wait_ready(self, count: int, proc: subprocess.Popen[bytes]) -> None:
        try:
            wait_for(lambda: len(list(self.pid_dir.glob("ready-*"))) >= count or proc.poll() is not None, timeout=60)
        except AssertionError:
            proc.kill()
            raise
        assert proc.poll() is None, f"ended before its workers were ready: {proc.returncode}"

    def pid(self, name: str) -> int:
        return int((self.pid_dir / f"{name}.pid").read_text())


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def strike(proc: subprocess.Popen[bytes], run: Run, action: str, *, remote: bool = False) -> None:
    if action == "kill-worker":
        os.kill(run.pid("worker-1"), signal.SIGKILL)
    elif action == "stop-all-then-SIGKILL":
        # Everything of the run frozen at once (a debugger, a cgroup freezer, a hostile user), then tpuctl killed:
        # nothing is left to notice but the kernel. `remote`: the workers run on ssh "hosts" that are this machine;
        # only tpuctl's own machine is frozen (tpuctl and its ssh clients), as a user's laptop would be.
        marked = [int(line.split(":", 1)[0]) for line in survivors(run.mark)]
        for pid in [proc.pid, *(p for p in marked if not remote or _descends_from(p, proc.pid))]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        time.sleep(0.2)
        proc.kill()
    elif action != "wait":
        proc.send_signal(signal.Signals[action])


def start(args: list[str], run: Run, env: dict[str, str], **popen: object) -> subprocess.Popen[bytes]:
    """tpuctl with its stderr in a file: a survivor holding a pipe must not hang the test, only fail it."""
    with open(run.tmp_path / "stderr", "wb") as err:
        return subprocess.Popen(tpuctl_cmd(*args), env=env, stdin=subprocess.DEVNULL, stderr=err, **popen)  # type: ignore[call-overload]


def finish(proc: subprocess.Popen[bytes], run: Run, action: str, timeout: float = 60) -> tuple[int, str, float]:
    """(exit status, stderr, when it ended): the outcome's moment, from which survivors are counted."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        assert_none_survive(run.mark, time.monotonic() - SURVIVAL_S)
        raise AssertionError(f"still running {timeout:g}s after {action}: {_stderr(run)[-2000:]}") from None
    return proc.returncode, _stderr(run), time.monotonic()


def _stderr(run: Run) -> str:
    return (run.tmp_path / "stderr").read_text(errors="replace")


# ---- the launch matrix: local and ssh ------------------------------------------------------


@dataclass(frozen=True)
class Case:
    fault: str
    action: str  # wait, kill-worker, or the name of the signal sent to tpuctl
    expected: int | None  # exit status; None after SIGKILL of tpuctl
    hang: bool = False  # leave-*: worker 1 hangs instead of exiting
    full_disk: bool = False  # tpuctl's files may not grow past 32 KiB: its log writes fail as on a full disk


CASES = {
    "success": Case("exit", "wait", 0),
    "worker-crash": Case("crash", "wait", 7),
    "worker-killed": Case("hang", "kill-worker", 128 + signal.SIGKILL),
    "sigint": Case("hang", "SIGINT", 130),
    "sigterm": Case("hang", "SIGTERM", 130),
    "sighup": Case("hang", "SIGHUP", 130),
    "sigkill": Case("hang", "SIGKILL", None),
    "ignores-signals": Case("ignore", "SIGTERM", 130),
    "ignores-signals-sigkill": Case("ignore", "SIGKILL", None),
    "holds-the-gil-sigkill": Case("gil", "SIGKILL", None),
    "leaves-group-child": Case("leave-group", "wait", 0),
    "leaves-session-child": Case("leave-session", "wait", 0),
    "leaves-group-child-sigkill": Case("leave-group", "SIGKILL", None, hang=True),
    "leaves-session-child-sigkill": Case("leave-session", "SIGKILL", None, hang=True),
    "full-log-disk": Case("loud", "wait", 7, full_disk=True),
    "escapes-its-reaper": Case("escape", "wait", 128 + signal.SIGKILL),
    "all-stopped-then-sigkill": Case("hang", "stop-all-then-SIGKILL", None),
}


def _full_disk() -> None:
    """In tpuctl's process: a write past 32 KiB fails with EFBIG (SIGXFSZ ignored), as a full disk fails it."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, resource.RLIM_INFINITY))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_launch(backend: list[str], case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    run = Run(tmp_path)
    worker_env = {"FAULT": case.fault, "PID_DIR": str(run.pid_dir), "FAULTS_MARK": run.mark, **({"HANG": "1"} if case.hang else {})}
    args = ["launch", str(run.script), "--workers", "2", "--strategy", "none", "--log-dir", str(tmp_path / "logs"), *backend]
    for name, value in worker_env.items():
        args += ["--env", f"{name}={value}"]
    proc = start(args, run, run.env(), stdout=subprocess.DEVNULL, preexec_fn=_full_disk if case.full_disk else None)
    if case.action != "wait":
        run.wait_ready(2, proc)
    strike(proc, run, case.action, remote=bool(backend))
    status, err, ended = finish(proc, run, case.action)
    assert_none_survive(run.mark, ended)  # first: it also kills what survived, whatever else failed
    if case.expected is not None:
        assert status == case.expected, err[-3000:]
    if case.full_disk:
        assert "cannot write log" in err, err[-3000:]  # the fault really happened
    if case.fault == "escape" and not backend:
        assert "its reaper was killed (SIGKILL)" in err and "OOM" not in err, err[-3000:]


# ---- babysit -------------------------------------------------------------------------------

BABYSIT_CASES = {
    "success": Case("exit", "wait", 0),
    "command-fails": Case("crash", "wait", 7),
    "sigint": Case("hang", "SIGINT", 130),
    "sigterm": Case("hang", "SIGTERM", 130),
    "sighup": Case("hang", "SIGHUP", 130),
    "sigkill": Case("hang", "SIGKILL", None),
    "api-keeps-failing": Case("hang", "api-down", 1),
    "leaves-session-child": Case("leave-session", "wait", 0),
    "leaves-session-child-sigterm": Case("leave-session", "SIGTERM", 130, hang=True),
}


@pytest.fixture(scope="module")
def sat_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GoogleStandin, dict[str, str]]]:
    """One stand-in holding the spot TPU VM `sat`, made once by `tpuctl create` (its saved spec is what babysit needs),
    and the environment that reaches both. Babysit only watches the node (every case here ends before it is lost),
    so the cases share it instead of each paying a create (~0.7 CPU-s: the TPU client's imports)."""
    home = tmp_path_factory.mktemp("babysit-home")
    with GoogleStandin(project="tpuctl-test", seed=0) as g:
        env = {**standin_env(g, home), "TPUCTL_ZONE": ZONE}  # sealed from the user's files; keeps the tpuctl under test
        created = subprocess.run(tpuctl_cmd("create", "sat", "--accelerator-type", "v4-8", "--spot"), env=env, cwd=home, capture_output=True, timeout=120)
        assert created.returncode == 0, created.stderr
        yield g, env


@pytest.fixture
def sat(sat_node: tuple[GoogleStandin, dict[str, str]]) -> Iterator[tuple[GoogleStandin, dict[str, str]]]:
    """The shared node, READY as a new one is; a case's fault knobs (the api-down burst) end with the case."""
    g, _ = sat_node
    node = g.node(ZONE, "sat")
    assert node is not None and node["state"] == "READY", node
    yield sat_node
    g.faults = Faults(seed=0)


@pytest.mark.parametrize("case", BABYSIT_CASES.values(), ids=BABYSIT_CASES.keys())
def test_babysit(sat: tuple[GoogleStandin, dict[str, str]], case: Case, tmp_path: Path) -> None:
    google_standin, shared_env = sat
    run = Run(tmp_path)
    env = {**run.env(shared_env), "FAULT": case.fault, "PID_DIR": str(run.pid_dir)}
    # worker 1 of the launch matrix is the one that crashes or hangs: the command plays it.
    env.update({"TPUCTL_WORKER_INDEX": "1", **({"HANG": "1"} if case.hang else {})})
    command = ["babysit", "sat", "--interval", "0.2", "--", sys.executable, str(run.script)]
    proc = start(command, run, env, cwd=tmp_path, stdout=subprocess.DEVNULL)
    if case.action != "wait":
        run.wait_ready(1, proc)
    if case.action == "api-down":
        google_standin.faults.burst(100_000, 403)
    else:
        strike(proc, run, case.action)
    status, err, ended = finish(proc, run, case.action)
    assert_none_survive(run.mark, ended)  # first: it also kills what survived, whatever else failed
    if case.expected is not None:
        assert status == case.expected, err[-3000:]


# ---- the Kubernetes follower ---------------------------------------------------------------

KUBE_CASES = {
    "success": (None, "wait", 0),
    "replica-fails": (7, "wait", 7),
    "sigint": (None, "SIGINT", 130),
    "sigterm": (None, "SIGTERM", 130),
    "sighup": (None, "SIGHUP", 130),
    "sigkill": (None, "SIGKILL", None),
}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize(("exit_code", "action", "expected"), KUBE_CASES.values(), ids=KUBE_CASES.keys())
def test_kubernetes_follower(tmp_path: Path, exit_code: int | None, action: str, expected: int | None) -> None:
    from tests.standins.kube_api import KubeStandin, PodScript
    from tests.standins.processes import read_until

    run = Run(tmp_path)
    forever = action != "wait"
    with KubeStandin() as standin:
        standin.scripts = {
            "worker:0": PodScript(lines=["training"], exit_code=None if forever else 0),
            "worker:1": PodScript(lines=["training"], exit_code=None if forever else (exit_code or 0), start_after=0.2),
        }
        env = {
            **run.env(),
            "KUBECONFIG": str(standin.write_kubeconfig(tmp_path / "kubeconfig")),
            "KUBECACHEDIR": str(tmp_path / "kube-cache"),
            "TPUCTL_KUBE_POLL_S": "0.1",
        }
        args = ["launch", "train.py", "--backend", "kubernetes", "--image", "registry.example/train:1", "--workers", "2",
                "--job-name", "faults", "--log-dir", str(tmp_path / "logs")]
        proc = start(args, run, env, stdout=subprocess.PIPE)
        try:
            if forever:
                assert proc.stdout is not None
                read_until(proc.stdout, "[worker:1] training")
                strike(proc, run, action)
            status, err, ended = finish(proc, run, action)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert_none_survive(run.mark, ended)  # first: it also kills what survived, whatever else failed
        if expected is not None:
            assert status == expected, err[-3000:]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_a_one_shot_kubectl_dies_with_a_killed_tpuctl(tmp_path: Path) -> None:
    """Issue 29: tpuctl SIGKILLed while a one-shot kubectl waits on an API server that accepts and never answers (a
    hung control plane): kubectl goes too (reaper.run's parent-death signal), where it used to wait on for good."""
    import json
    import socket

    run = Run(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel completes each connection; nothing replies
        server = f"http://127.0.0.1:{silent.getsockname()[1]}"
        config = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "hung", "cluster": {"server": server}}],
                  "contexts": [{"name": "hung", "context": {"cluster": "hung", "namespace": "default"}}], "current-context": "hung",
                  "users": [{"name": "hung", "user": {}}]}  # fmt: skip
        (tmp_path / "kubeconfig").write_text(json.dumps(config), encoding="utf-8")
        env = {**run.env(), "KUBECONFIG": str(tmp_path / "kubeconfig"), "KUBECACHEDIR": str(tmp_path / "kube-cache")}
        args = ["launch", "train.py", "--backend", "kubernetes", "--image", "registry.example/train:1", "--workers", "2",
                "--job-name", "hung", "--log-dir", str(tmp_path / "logs")]  # fmt: skip
        proc = start(args, run, env, stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: any("kubectl" in line for line in survivors(run.mark)) or proc.poll() is not None)
            assert proc.poll() is None, (run.tmp_path / "stderr").read_text()[-3000:]
            time.sleep(0.5)  # kubectl is waiting on the server, not starting
            proc.kill()
            proc.wait()
            ended = time.monotonic()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert_none_survive(run.mark, ended)

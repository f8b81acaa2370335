"""SshStarter: the Supervisor's Starter over ssh (reserve a port per worker, start, release).

The Supervisor knows nothing about ssh; this knows nothing about restarts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tpuctl.backends.ssh.placement import RemotePaths, place
from tpuctl.backends.ssh.selection import Selection
from tpuctl.backends.ssh.session import (
    HELLO_TIMEOUT_S,
    Session,
    SshHandle,
    abandon,
    read_hello,
    spawn_agent,
)
from tpuctl.backends.ssh.sync import SYNC_EXCLUDES, FolderSync
from tpuctl.backends.ssh.wire import pack
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import Kind, exit_words
from tpuctl.inputs.errors import FAILED, LostConnection, PreflightFailed, TpuctlError, one_line
from tpuctl.launch.outcome import Failure
from tpuctl.launch.preflight import doctor_hint
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Starter
from tpuctl.safety import stack_dump
from tpuctl.ssh.client_args import SSH_FAILED, SshOptions
from tpuctl.ssh.fanout import parallel, run_everywhere, token
from tpuctl.ssh.remote_source import install_source
from tpuctl.ssh.shipment import shipment

if TYPE_CHECKING:
    from tpuctl.backends.ssh.environment.hosts import Environments

RUNTIME_HOME = "~/.cache/tpuctl/runtime/"  # as people read it; the host resolves it (cache.runtime_root)
PREFLIGHT = "preflight: "  # how the agent's preflight failures begin (agent.py)


class HostProblem(Exception):
    """Why one host could not take its workers: its error, of the type that says what kind (LostConnection when ssh
    never reached it, PreflightFailed when a check failed there), as the agent's reply or ssh's status told it."""

    def __init__(self, host: str, error: TpuctlError) -> None:
        super().__init__(error.message)
        self.host = host
        self.error = error


class SshStarter(Starter):
    name = "ssh"
    host = "ssh"  # every worker gets its own host from placement()
    remote = True  # the Supervisor tags lines and log files with the host

    def __init__(
        self,
        entries: Sequence[HostEntry],
        options: SshOptions,
        paths: RemotePaths,
        *,
        python: str,
        sync: Selection | None = None,
        notice: Callable[[str], None] = lambda line: None,
        hosts_again: Callable[[Callable[[str], None]], list[HostEntry]] | None = None,
        node_down: Callable[[], str | None] | None = None,
        preflight: Sequence[tuple[str, str]] = (),
        doctor: Callable[[str], str] = lambda hosts: "tpuctl doctor",
        profiler: bool = False,
        environments: Environments | None = None,
        jax_finds_hosts: bool = False,
    ) -> None:
        """hosts_again: for the hosts of a TPU slice, waits until they can run workers again after a
        preemption and returns them as they are then (runner.TpuSlice.hosts_again).
        node_down: for a TPU slice, the node's condition when it is not READY now (TpuSlice.down).
        preflight: what each host's first agent checks before any worker starts (tpuctl.launch.preflight.remote_hello);
        doctor: the doctor command that checks hosts ("h1,h2") in full, named when a check fails there;
        profiler: each agent holds a second port for its worker's profiler server (`tpuctl profile`);
        sync: the files --sync copies to every host before its first worker starts (selection.py), or None;
        environments: --requirements' and --setup's environment on each host (environment/hosts.py), made ready before
        each attempt's agents start, whose Python then runs the agents and the workers there; None: `python` does.
        jax_finds_hosts: the hosts are a TPU VM slice's, which JAX reads itself (a JAX run's plan writes no cluster)."""
        self.jax_finds_hosts = jax_finds_hosts
        self.entries = list(entries)
        self.hosts_again = hosts_again
        self.node_down = node_down
        self.options = options
        self.paths = paths
        self.python = python
        self.sync = sync
        self.notice = notice
        self.preflight = list(preflight)
        self.doctor = doctor
        self.profiler = profiler
        self.environments = environments
        self.pythons: dict[str, str] = {}  # each host's environment's Python, where the launch has environments
        self._attempt = 0
        self.nonce = token()
        self._placement: list[str] = []
        self._pending: dict[tuple[str, str], Session] = {}
        self._handles: list[SshHandle] = []
        self._synced = False
        self._options_checked = threading.Lock()
        self.runtime = shipment()
        self.installed: list[tuple[str, str]] = []  # (host, why) for each host the runtime was shipped to
        self._lock = threading.Lock()

    # Starter ------------------------------------------------------------------

    def reserve(self, count: int) -> list[str]:
        self._attempt += 1  # the process engine reserves once an attempt
        self._placement = place(self.entries, count)
        hosts = list(dict.fromkeys(self._placement))
        if self.environments is not None:
            self.pythons = self.environments.ensure(hosts, self._attempt)
        sessions = self._connect(self._placement)
        self._say_installed()
        addresses = []
        self._pending = {}
        for host, session in zip(self._placement, sessions, strict=True):
            address = session.address()
            addresses.append(address)
            self._pending[(host, address)] = session
        try:
            if self.sync is not None and not self._synced:
                FolderSync(self.options, self.paths, self.python, self.sync).run(sessions, self.notice)
                self._synced = True
            if self.environments is not None:  # once the workers' files are there: --setup may use them
                self.environments.setup(hosts, self._attempt)
        except BaseException:
            self._drop_pending()
            raise
        return addresses

    def connection(self) -> dict[str, object] | None:
        """The ssh options the launch took (not how hard it tried: that is each command's own)."""
        found = {"user": self.options.user, "key": self.options.key, "options": list(self.options.options), "config": self.options.config}
        return {name: value for name, value in found.items() if value not in (None, [])} | {"fanout": self.options.fanout}

    def placement(self, count: int) -> list[str]:
        return self._placement[:count]

    def start(self, spec: WorkerSpec) -> SshHandle:
        session = self._pending.pop((spec.host, spec.address or ""), None)
        if session is None:
            raise TpuctlError(f"{spec.name}: no session was opened for {spec.host} at {spec.address}", exit_code=FAILED)
        if spec.host in self.pythons:  # the host's environment's Python, not the one the plan names
            spec = dataclasses.replace(spec, argv=(self.pythons[spec.host], *spec.argv[1:]))
        if session.hello.profiler_port:
            # In the spec too: the attempt records each started worker's PROFILER_PORT (profilers.json).
            spec = dataclasses.replace(spec, env={**spec.env, contract.PROFILER_PORT: str(session.hello.profiler_port)})
        handle = SshHandle(spec, session)
        self._handles.append(handle)
        job = [("argv", arg) for arg in spec.argv] + [("env", f"{name}={value}") for name, value in spec.env.items()]
        if not session.send(pack(job)):
            session.close_stdin()
        return handle

    def started(self) -> None:
        """Nothing to do: each agent hands its held port to its worker, which frees it for TensorFlow."""

    def release(self) -> None:
        self._drop_pending()
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()
        deadline = time.monotonic() + 3.0
        for handle in handles:
            try:
                handle.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                handle.proc.kill()
                handle.proc.wait()
        self._kill_unheard(handles)

    def lost_to_preemption(self, failure: Failure) -> str | None:
        """A worker of a TPU slice whose connection was lost while its node is not READY went with the
        node (a TPU VM's preemption ends no worker with 42): the node's condition, else None."""
        if self.node_down is None or failure.ending.kind is not Kind.LOST:
            return None
        return self.node_down()

    def after_preemption(self, notice: Callable[[str], None]) -> None:
        """After a preempted attempt, before the next reserve(): a TPU slice's hosts once its node is
        READY again, read afresh (a repair may give them new addresses); hosts the user listed are
        used as they are, at once."""
        if self.hosts_again is None:
            return
        entries = self.hosts_again(notice)
        if len(entries) != len(self.entries):
            raise TpuctlError(
                f"the TPU slice came back with {len(entries)} host(s), not {len(self.entries)}; the launch was planned for those",
                exit_code=FAILED,
            )
        self.entries = entries
        self._synced = False  # a repaired host may have lost the copy: --sync sends what differs

    # internals ------------------------------------------------------------------

    def _hello(self, first: bool) -> list[tuple[str, str]]:
        """What an agent is asked to do before it says hello; the first per host prepares the host."""
        hello = [("nonce", self.nonce), ("cwd", self.paths.workdir), ("control_fd", contract.CONTROL_FD), ("reserved_fd", contract.RESERVED_FD)]
        hello.append(("message_limit", str(stack_dump.MESSAGE_LIMIT)))
        hello.append(("runtime", self.runtime.digest))
        if self.profiler:
            hello.append(("profiler_fd", contract.PROFILER_FD))
        if first:
            hello.append(("check_runtime", "1"))
            hello += self.preflight
            if self.sync is not None:
                hello += [("mkdir", self.paths.workdir), ("mkdir", self.paths.sync_dest)]
                if not self._synced:
                    hello += [("sync", self.paths.sync_dest), ("local_rsync", "1" if shutil.which("rsync") else "")]
                    hello += [("exclude", name) for name in SYNC_EXCLUDES]
            else:
                hello.append(("script", self.paths.script))
        return hello

    def _open(self, host: str, first: bool) -> Session:
        """One agent session that said hello, with connection failures retried."""
        problem = ""
        for attempt in range(1, self.options.attempts + 1):
            proc = spawn_agent(self.options, host, self._python(host), self._hello(first))
            hello, error, rest, diagnostics = read_hello(proc, self.nonce, time.monotonic() + HELLO_TIMEOUT_S)
            if hello is not None:
                return Session(host, proc, self.nonce, hello, rest)
            if proc.poll() is None:
                proc.kill()
            status = proc.wait()
            abandon(proc)
            if error is not None and error.startswith(PREFLIGHT):
                raise HostProblem(host, PreflightFailed(f"{host}: {error.removeprefix(PREFLIGHT)}"))
            if error is not None:
                hint = " (pass --sync, or copy it there)" if error.startswith("script not found") else ""
                raise HostProblem(host, TpuctlError(f"{host}: {error}{hint}", exit_code=FAILED))
            said = diagnostics[-1] if diagnostics else f"ssh {exit_words(status)}"
            if status != SSH_FAILED and not said.startswith("no answer"):
                raise HostProblem(host, TpuctlError(f"{host}: {self._python(host)} could not run tpuctl's agent: {said} (pass --python)", exit_code=FAILED))
            problem = said
            self._check_options(host)
            if attempt < self.options.attempts:
                time.sleep(0.25 * 2 ** (attempt - 1))
        raise HostProblem(host, LostConnection(f"cannot reach {host} over ssh ({self.options.attempts} attempts): {problem}"))

    def _install_runtime(self, host: str, why: str) -> None:
        """Ship the runtime to a host whose copy is missing or unusable, before any of its workers starts:
        one more command over the same connection, only then (the next launch finds the copy)."""
        [result] = run_everywhere(
            [host], [self._python(host), "-S", "-c", install_source(), self.runtime.digest], self.options, stdin=self.runtime.payload, timeout=120.0
        )
        if not result.ok:
            said = result.error or one_line(result.output, last=True) or exit_words(result.exit_code)
            raise HostProblem(host, TpuctlError(f"{host}: cannot install tpuctl's runtime: {said}", exit_code=FAILED))
        with self._lock:
            self.installed.append((host, why))

    def _python(self, host: str) -> str:
        """The Python that runs `host`'s agents and workers: its environment's where it has one."""
        return self.pythons.get(host, self.python)

    def _check_options(self, host: str) -> None:
        """After a failed connection, once: is it our options (a usage error) rather than the host?

        Checking before every launch would cost each one an `ssh -G` run up front.
        """
        if self._options_checked.acquire(blocking=False):
            self.options.check(host)

    def _open_host(self, host: str, count: int) -> list[Session] | HostProblem:
        """`count` sessions to one host: the first makes the ControlMaster, the rest share it."""
        sessions: list[Session] = []
        try:
            sessions.append(self._open(host, first=True))
            if sessions[0].hello.runtime:
                self._install_runtime(host, sessions[0].hello.runtime)
            if count > 1:
                sessions += parallel(lambda _: self._open(host, first=False), range(count - 1), count - 1)
        except HostProblem as problem:
            for session in sessions:
                abandon(session.proc)
            return problem
        except BaseException:
            for session in sessions:
                abandon(session.proc)
            raise
        return sessions

    def _connect(self, placement: list[str]) -> list[Session]:
        """A session per task, every host at once; one unreachable host fails them all, nothing started."""
        counts: dict[str, int] = {}
        for host in placement:
            counts[host] = counts.get(host, 0) + 1
        results = parallel(lambda host: self._open_host(host, counts[host]), list(counts), self.options.fanout)
        opened = {host: result for host, result in zip(counts, results, strict=True) if not isinstance(result, HostProblem)}
        problems = [result for result in results if isinstance(result, HostProblem)]
        if problems:
            for sessions in opened.values():
                for session in sessions:
                    session.close_stdin()
                    abandon(session.proc)
            raise launch_error(problems, self.doctor)
        return [opened[host].pop(0) for host in placement]

    def _say_installed(self) -> None:
        installed, self.installed = self.installed, []
        if not installed:
            return
        order = {host: index for index, host in enumerate(self._placement)}
        installed.sort(key=lambda item: order.get(item[0], 0))  # they finish in any order
        shown = ", ".join(host if why == "missing" else f"{host} (replaced: {why})" for host, why in installed[:8])
        more = f" and {len(installed) - 8} more" if len(installed) > 8 else ""
        self.notice(
            f"shipped tpuctl's runtime {self.runtime.digest[:12]} ({len(self.runtime.files)} files) to {shown}{more}; "
            f"kept in {RUNTIME_HOME} for the next launches"
        )

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for session in pending.values():
            session.close_stdin()
        for session in pending.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                session.proc.wait(timeout=2.0)
            abandon(session.proc)

    def _kill_unheard(self, handles: list[SshHandle]) -> None:
        """Belt and braces: a group whose exit was never reported is killed out of band."""
        groups: dict[str, list[int]] = {}
        for handle in handles:
            if handle.status is None and handle.pgid is not None:
                groups.setdefault(handle.spec.host, []).append(handle.pgid)
        if not groups:
            return
        quick = dataclasses.replace(self.options, attempts=1)
        parallel(
            lambda host: run_everywhere([host], ["kill", "-KILL", "--", *(f"-{pgid}" for pgid in groups[host])], quick, timeout=10.0),
            list(groups),
            self.options.fanout,
        )


def launch_error(problems: list[HostProblem], doctor: Callable[[str], str]) -> TpuctlError:
    """One error for every host that failed, in host order; a hint when any was unreachable, else the doctor
    command for the hosts whose preflight failed (`doctor` spells it for a comma-separated list of hosts). Its type is
    the hosts' one kind where they share it (LostConnection, PreflightFailed), else a plain TpuctlError."""
    problems = sorted(problems, key=lambda p: p.host)
    message = problems[0].error.message
    if len(problems) > 1:
        message = f"{len(problems)} hosts failed before anything started: " + "; ".join(p.error.message for p in problems)
    unreachable = any(isinstance(p.error, LostConnection) for p in problems)
    hint = "nothing was started; check the host names and `ssh HOST true`" if unreachable else None
    checked = [p.host for p in problems if isinstance(p.error, PreflightFailed)]
    if hint is None and checked:
        hint = doctor_hint(doctor(",".join(checked)))
    kinds = {type(p.error) for p in problems}
    kind = kinds.pop() if len(kinds) == 1 else TpuctlError
    return kind(message, hint=hint, exit_code=FAILED)

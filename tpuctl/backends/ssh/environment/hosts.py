"""Every host's environment before its workers start: looked for, built where missing, the same lock everywhere.

Each attempt of a launch (the first, and each after a restart or a preemption, whose hosts may be new) begins with
`ensure`: one ssh round trip to every host at once (`probe`: the host's Python, and the environment this request was
built as there, if it is ready). Where every host has it, that is all: no pip runs. Otherwise the run's lock is the
one it had (an earlier attempt's), else the one a host already built with, else one resolution on the first host;
every host without the lock's environment then gets it without the index: one host of each Python builds it from the
lock's wheels (environment/wheels.py), the others get a copy of that build (environment/copies.py). `setup` runs
--setup once per host and environment, once the workers' files are there (after --sync).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from tpuctl.backends.ssh.environment import copies, remote, setup_output
from tpuctl.backends.ssh.environment.host_env import env_key
from tpuctl.backends.ssh.environment.lock import Lock
from tpuctl.backends.ssh.environment.spec import EnvSpec
from tpuctl.backends.ssh.environment.wheels import WheelStore, send
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import FAILED, USAGE, LostConnection, TpuctlError, one_line
from tpuctl.inputs.private_files import write_private
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.ssh.client_args import SshOptions
from tpuctl.ssh.fanout import HostResult, parallel, run_everywhere

if TYPE_CHECKING:
    from tpuctl.launch.job import Job
    from tpuctl.launch.runner import RunContext

PROBE_TIMEOUT_S = 60.0  # one round trip a host (a first connection among them) and a few small files read there
RESOLVE_TIMEOUT_S = 1800.0  # pip's dry run and the downloads of one resolution, on the first host
BUILD_TIMEOUT_S = 1800.0  # per host: a venv and pip install from wheels already there, or a copy's unpacking
SSH_MARGIN_S = 30.0  # ssh's deadline past the program's own: the program's answer, not ssh's, says what took too long
# The program's own kinds of failure that are the request's (exit 2): a requirement no wheel satisfies, pins that
# conflict, a host without room, --setup failing; the rest (ssh, a host's folders) are the operation's (exit 1).
_USAGE_KINDS = frozenset({"unresolvable", "conflict", "disk", "hashes", "pip", "index", "venv", "setup", "timeout"})


@dataclass(frozen=True)
class Found:
    """What a probe found on one host."""

    facts: dict[str, Any]  # its Python: executable, version, platform (env_key's parts)
    key: str | None  # the environment this request was built as there, ready; None: none
    lock: Lock | None
    python: str | None
    setup: bool  # --setup ran in that environment
    wheels: frozenset[str]  # locks whose wheels the host keeps


@dataclass
class Console:
    """Where the step speaks: tpuctl's notices, the hosts' --setup lines (tagged with the host), the attempt's folder."""

    notice: Callable[[str], None]
    show: Callable[[str, str], None]  # (host, line): a --setup line on the console
    folder: RunFolder  # the run's logs: each host's pip and --setup words go in the attempt's folder
    timeline: tl.Timeline | None = None


@dataclass
class Environments:
    spec: EnvSpec
    ssh: SshOptions
    python: str  # the hosts' Python, as the launch names it: every environment is a venv over it
    console: Console
    start_timeout: float  # --setup's bound
    workdir: str  # where --setup runs (the workers' directory, once it exists)
    lock: Lock | None = None  # the run's lock, once it has one: every attempt installs exactly it
    keys: dict[str, str] = field(default_factory=dict)  # host -> its environment's key
    done_setup: set[str] = field(default_factory=set)  # hosts whose environment ran --setup
    copied: dict[str, str] = field(default_factory=dict)  # host -> the host its environment was copied from, this attempt

    def __post_init__(self) -> None:
        self.request = self.spec.request(self.python)
        self.store = WheelStore(self.ssh, self.python, self.spec.bucket, self.spec.scrub)
        self._keeping = threading.Lock()

    # ---- the packages -----------------------------------------------------------------------------

    def ensure(self, hosts: Sequence[str], attempt: int) -> dict[str, str]:
        """Each host's environment, looked for and built where missing: the Python its workers run, by host."""
        started = time.monotonic()
        self._mark(tl.ENV_BEGIN, attempt, step="packages", hosts=len(hosts))
        built: list[str] = []
        self.copied = {}
        try:
            found = self._probe(hosts)
            known = env_key(self.request, found[hosts[0]].facts)  # this request on the first host's Python and platform
            lock = self.lock or self._agreed(hosts, found) or self.store.recalled(known)
            resolved = lock is None and bool(self.spec.pip_text)
            if lock is None:  # no lock yet: resolved once, on the first host (with no requirement, --setup alone: empty)
                lock = self._resolve(hosts[0], attempt) if resolved else Lock(())
            self._refuse_replacing(lock, hosts[0])
            self.lock = lock
            self.keys = {host: env_key(lock.digest, found[host].facts) for host in hosts}
            pythons = {host: found[host].python or "" for host in hosts if found[host].key == self.keys[host]}
            built = [host for host in hosts if host not in pythons]
            self.done_setup = {host for host in pythons if found[host].setup}
            holders = [host for host in hosts if lock.digest in found[host].wheels or (resolved and host == hosts[0])]
            with ThreadPoolExecutor(max_workers=1) as keeping:  # a lock's wheels pulled here while the first host builds
                kept = keeping.submit(self._remember, known, lock, holders) if resolved and lock.wheels else None
                if kept is None and lock.wheels and holders and not self._kept_off_the_hosts(lock):
                    kept = keeping.submit(self._keep, lock, holders)  # a lock found on the hosts, kept nowhere else yet
                if built:
                    pythons.update(self._build(built, lock, holders, dict(pythons), attempt))
                if kept is not None:
                    kept.result()
        finally:
            self._mark(tl.ENV_END, attempt, step="packages", built=len(built), copied=len(self.copied), seconds=round(time.monotonic() - started, 3))
        self._say(lock, hosts, built, time.monotonic() - started)
        return {host: pythons[host] for host in hosts}

    def _probe(self, hosts: Sequence[str]) -> dict[str, Found]:
        argv = remote.command(self.python, "probe", self.request, self.spec.setup_hash, self.lock.digest if self.lock else "")
        results = run_everywhere(list(hosts), argv, self.ssh, timeout=PROBE_TIMEOUT_S)
        return {result.host: self._found(result) for result in results}

    def _found(self, result: HostResult) -> Found:
        answer = self._answer(result, "look for its environment")
        try:
            lock = Lock.of(answer["lock"]) if answer.get("key") else None
            facts = answer["facts"]
            if not isinstance(facts, dict):
                raise ValueError("no facts")
        except (KeyError, ValueError) as err:
            raise TpuctlError(f"{result.host}: its environment answers what no environment of tpuctl's holds ({err})", exit_code=FAILED) from None
        wheels = frozenset(str(w) for w in answer.get("wheels") or [] if isinstance(w, str))
        python = answer.get("python") if isinstance(answer.get("python"), str) else None
        return Found(facts, str(answer["key"]) if lock is not None else None, lock, python, bool(answer.get("setup")), wheels)

    def _agreed(self, hosts: Sequence[str], found: dict[str, Found]) -> Lock | None:
        """The lock a host already built this request with: the first host's, else the first of the others' (hosts
        that built it from another lock are built again from this one: one lock for the run)."""
        return next((found[host].lock for host in hosts if found[host].lock is not None), None)

    def _resolve(self, host: str, attempt: int) -> Lock:
        """One resolution, on the first host: its Python, its platform, its image's packages."""
        self.console.notice(f"environment: resolving {self.spec.requirements} on {host} ({self.spec.shown_index})")
        header = remote.header({"requirements": self.spec.pip_text, "index_url": self.spec.index_url or "", "deadline_s": RESOLVE_TIMEOUT_S})
        [result] = run_everywhere([host], remote.command(self.python, "resolve"), self.ssh, stdin=header, timeout=RESOLVE_TIMEOUT_S + SSH_MARGIN_S)
        answer = self._answer(result, f"resolve {self.spec.requirements}", attempt)
        try:
            return Lock.of(answer.get("lock"), answer.get("needs"))
        except ValueError as err:
            raise TpuctlError(f"{host}: its resolution answers no lock ({err})", exit_code=FAILED) from None

    def _refuse_replacing(self, lock: Lock, host: str) -> None:
        """On a TPU VM, a lock that adds or replaces TensorFlow, libtpu or jaxlib, refused before anything is
        installed (tpuctl.inputs.requirements: the file's own lines were refused already; this is what they pulled in),
        naming the host it was resolved on (its Python and platform) and the file's lines that pulled it in."""
        if not self.spec.tpu or self.spec.replace_tensorflow:
            return
        from tpuctl.inputs.requirements import JAX, breaks, protected_in

        for name in protected_in((wheel.name for wheel in lock.wheels), self.spec.framework):
            wheel = next(w for w in lock.wheels if w.name == name)
            by = lock.pulled_in_by(name)
            pulled = f" (required by {', '.join(by)})" if by else ""
            lines = self.spec.lines_named_in(" ".join(_ancestors(lock, name))).strip()[1:-1]  # "requirements.txt:2, 5"
            pulled += f", pulled in by {lines}" if lines else ""
            raise TpuctlError(
                f"{self.spec.requirements} resolves on {host} to {name} {wheel.version}{pulled}, which {breaks(name, (), self.spec.framework)} (on a TPU VM)",
                hint=(
                    "pin versions that pull in no TPU build of TensorFlow (tensorflow-cpu for tf.data)" if self.spec.framework == JAX
                    else "pin versions that the image's TensorFlow satisfies"
                ) + ", or pass --replace-tensorflow (docs/environments.md)",
            )

    def _build(self, hosts: list[str], lock: Lock, holders: list[str], ready: dict[str, str], attempt: int) -> dict[str, str]:
        """The lock's environment on each of `hosts`: built from its wheels on one host of each Python, and copied from
        there (or from a host that has it `ready`) to the others (copies.py); with a run's bucket, or no wheel to
        install, built on each."""
        if self.spec.bucket or not lock.wheels:
            return self._from_wheels(hosts, lock, holders, attempt)
        sources = copies.builders(hosts, self.keys, ready, holders)
        results = self._from_wheels([host for host in hosts if sources[self.keys[host]] == host], lock, holders, attempt)
        for key, sender in sources.items():
            receivers = [host for host in hosts if self.keys[host] == key and host != sender]
            if receivers:
                results.update(self._copy(receivers, sender, {**ready, **results}[sender], lock, attempt))
        return results

    def _from_wheels(self, hosts: list[str], lock: Lock, holders: list[str], attempt: int) -> dict[str, str]:
        """The lock's environment built on each of `hosts`, from its own wheels where it has them (`holders` have),
        else from the bucket or this machine (which gets them first, from a holder)."""
        header = remote.header({"request": self.request, "lock": lock.to_json(), "lock_hash": lock.digest, "deadline_s": BUILD_TIMEOUT_S})
        others = [host for host in hosts if host not in holders]
        source: dict[str, Any] = {"source": "local"}
        if others and lock.wheels:
            source = self._wheels_for(lock, holders)
        theirs = remote.header({**json.loads(header), **source})
        results: dict[str, str] = {}
        with contextlib.ExitStack() as stack:
            payload = stack.enter_context(self.store.payload(lock, theirs)) if source["source"] == "stdin" else None

            def one(host: str) -> None:
                argv = remote.command(self.python, "build", self.keys[host])
                if host in others and payload is not None:
                    results[host] = str(self._sent(host, argv, payload.name, attempt).get("python") or "")
                else:
                    given = theirs if host in others else header
                    [result] = run_everywhere([host], argv, self.ssh, stdin=given, timeout=BUILD_TIMEOUT_S + SSH_MARGIN_S)
                    results[host] = str(self._answer(result, "build its environment", attempt).get("python") or "")

            parallel(one, hosts, self.ssh.fanout)
        return results

    def _copy(self, hosts: list[str], sender: str, python: str, lock: Lock, attempt: int) -> dict[str, str]:
        """`sender`'s environment (its Python at `python`) unpacked on each of `hosts`, no pip there."""
        key = self.keys[sender]
        origin = str(PurePosixPath(python).parents[1])
        header = remote.header({"request": self.request, "lock": lock.to_json(), "lock_hash": lock.digest, "origin": origin, "deadline_s": BUILD_TIMEOUT_S})
        payload, size = copies.payload(self.ssh, self.python, sender, key, header, self.spec.scrub)
        answers: dict[str, dict[str, Any]] = {}
        with payload:
            argv = remote.command(self.python, "copy", key, str(size))
            parallel(lambda host: answers.update({host: self._sent(host, argv, payload.name, attempt)}), hosts, self.ssh.fanout)
        self.copied.update({host: sender for host, answer in answers.items() if answer.get("built")})  # not one another launch made
        return {host: str(answer.get("python") or "") for host, answer in answers.items()}

    def _sent(self, host: str, argv: list[str], payload: str, attempt: int) -> dict[str, Any]:
        """A build or a copy on `host`, with the file `payload` on its stdin; its answer."""
        status, output = send(self.ssh, host, argv, payload, BUILD_TIMEOUT_S + SSH_MARGIN_S)
        return self._answer(HostResult(host, status, output, "timed out" if status == 124 else None), "build its environment", attempt)

    def _remember(self, request: str, lock: Lock, holders: list[str]) -> None:
        """A new lock kept, and remembered as what `request` resolved to on these hosts' Python and platform."""
        self._keep(lock, holders)
        self.store.remember(request, lock, self.console.notice)

    def _keep(self, lock: Lock, holders: list[str]) -> None:
        """A new lock's wheels kept where a host that lacks them finds them later, whatever happens to the first host:
        this machine's cache (a VM recreated after a preemption has lost the first host's disk), and the run's bucket.
        One at a time: a build that needs them sent waits for the pull under way."""
        with self._keeping:
            if not self.store.kept(lock):
                self.store.pull(holders[0], lock)
            if self.spec.bucket and not self.store.in_bucket(lock):
                self.store.upload(lock)

    def _kept_off_the_hosts(self, lock: Lock) -> bool:
        """The lock's wheels are kept where a VM recreated bare finds them (this machine's cache, the run's bucket): a
        lock the hosts already had (another launcher built them) is kept there too before this run depends on it."""
        return self.store.kept(lock) or self.store.in_bucket(lock)

    def _wheels_for(self, lock: Lock, holders: list[str]) -> dict[str, Any]:
        """How hosts without the lock's wheels get them: from the run's bucket, else on their stdin from this machine
        (which gets them first from a host that keeps them, where it has lost its own copy)."""
        if self.store.in_bucket(lock):
            return {"source": "gcs", "gcs": self.store.from_bucket(lock)}
        if not self.store.kept(lock) and not holders:
            raise TpuctlError(
                f"the wheels of lock {lock.digest[:12]} are kept nowhere any more: not on the hosts, not in this machine's cache"
                + (f", not in {self.spec.wheels_home(lock.digest)}" if self.spec.bucket else ""),
                hint=f"remove ~/.cache/tpuctl/envs/requests/{self.request} on the hosts to resolve {self.spec.requirements} again",
                exit_code=FAILED,
            )
        self._keep(lock, holders)
        return {"source": "gcs", "gcs": self.store.from_bucket(lock)} if self.spec.bucket else {"source": "stdin"}

    # ---- --setup ----------------------------------------------------------------------------------

    def setup(self, hosts: Sequence[str], attempt: int) -> None:
        """--setup on each host whose environment has not run it, at once, each within --start-timeout; its output
        in the attempt's folder (setup@HOST.log) and on the console, tagged with the host."""
        todo = [host for host in dict.fromkeys(hosts) if host not in self.done_setup]
        if not self.spec.setup or not todo:
            return
        started = time.monotonic()
        self._mark(tl.ENV_BEGIN, attempt, step="setup", hosts=len(todo))
        try:
            results = parallel(lambda host: self._setup_on(host, attempt), todo, self.ssh.fanout)
        finally:
            self._mark(tl.ENV_END, attempt, step="setup", built=len(todo), seconds=round(time.monotonic() - started, 3))
        problems = []
        for result in results:
            problem = self._setup_problem(result, attempt)
            if problem is None:
                self.done_setup.add(result.host)
            else:
                problems.append(problem)
        if problems:
            raise TpuctlError(problems[0] if len(problems) == 1 else f"--setup failed on {len(problems)} hosts: " + "; ".join(problems), exit_code=USAGE)
        self.console.notice(f"environment: --setup ran on {', '.join(todo)} in {time.monotonic() - started:.1f}s")

    def _setup_on(self, host: str, attempt: int) -> HostResult:
        """--setup on one host, its lines on the console and in its log as they come (setup_output.py)."""
        header = remote.header(
            {"key": self.keys[host], "hash": self.spec.setup_hash, "command": self.spec.setup, "workdir": self.workdir, "deadline_s": self.start_timeout}
        )
        log = self.console.folder.setup_log(attempt, host)
        lines = setup_output.Lines(log, lambda line: self.console.show(host, line), self.spec.scrub, self.console.notice)
        argv = self.ssh.command(host, remote.command(self.python, "setup"))
        return setup_output.run(host, argv, header, self.start_timeout + SSH_MARGIN_S, lines)

    def _setup_problem(self, result: HostResult, attempt: int) -> str | None:
        log = self.console.folder.setup_log(attempt, result.host)
        try:
            answer = remote.answer(result.output)
        except remote.NoAnswer:
            return f"--setup on {result.host}: {self._no_answer(result)}"
        error = answer.get("error")
        if not isinstance(error, dict):
            return None
        if error.get("kind") == "timeout":
            return f"--setup did not finish on {result.host} within {self.start_timeout:g}s (--start-timeout); its output: {log}"
        status = error.get("status")
        said = exit_words(status) if isinstance(status, int) else one_line(str(error.get("message")))
        return f"--setup failed on {result.host}: {said}; its output: {log}"

    # ---- answers, logs, words ---------------------------------------------------------------------

    def _answer(self, result: HostResult, doing: str, attempt: int | None = None) -> dict[str, Any]:
        """A command's answer; its failure as one line naming the host (the requirement, where pip named one)."""
        try:
            answer = remote.answer(result.output)
        except remote.NoAnswer:
            if result.error is not None and result.exit_code == 255:
                raise LostConnection(f"cannot reach {result.host} over ssh: {result.error}", hint="check the host names and `ssh HOST true`") from None
            raise TpuctlError(f"{result.host}: cannot {doing}: {self._no_answer(result)}", exit_code=FAILED) from None
        log = answer.get("log") or (answer.get("error") or {}).get("log")
        if attempt is not None and isinstance(log, str) and log:
            self._log(self.console.folder.environment_log(attempt, result.host), self.spec.scrub(log))
        error = answer.get("error")
        if isinstance(error, dict):
            kind = str(error.get("kind"))
            message = self.spec.scrub(one_line(str(error.get("message")), 400))
            where = f" (pip's words: {self.console.folder.environment_log(attempt, result.host)})" if attempt is not None and log else ""
            named = self.spec.lines_named_in(message) if kind in ("unresolvable", "conflict") else ""
            raise TpuctlError(f"{result.host}: cannot {doing}: {message}{named}{where}", exit_code=USAGE if kind in _USAGE_KINDS else FAILED)
        return answer

    def _no_answer(self, result: HostResult) -> str:
        said = self.spec.scrub(one_line(result.output, last=True)) or result.error or exit_words(result.exit_code)
        return f"{said} ({self.python} could not run tpuctl's environment program: pass --python)" if result.exit_code not in (0, 124) else said

    def _log(self, path: Path, text: str) -> None:
        try:
            write_private(path, text)
        except OSError as err:
            self.console.notice(f"warning: cannot keep {path}: {err.strerror or err}")

    def _mark(self, event: str, attempt: int, **fields: Any) -> None:
        if self.console.timeline is not None:
            self.console.timeline.event(event, attempt=attempt, **fields)

    def _say(self, lock: Lock, hosts: Sequence[str], built: list[str], seconds: float) -> None:
        reused = len(hosts) - len(built)
        if built:
            kept = f"; wheels kept in {self.spec.wheels_home(lock.digest)}" if lock.wheels else ""
            what = lock.summary() if self.spec.requirements else "--setup's alone, no package of its own"
            made = [host for host in built if host not in self.copied]
            how = [f"built on {', '.join(made)}"] if made else []
            if self.copied:
                senders = sorted(set(self.copied.values()) - set(made), key=list(hosts).index)
                how.append(f"copied to {len(self.copied)} host(s)" + (f" from {', '.join(senders)}" if senders else ""))
            if reused:
                how.append(f"reused on {reused} host(s)")
            self.console.notice(f"environment {lock.digest[:12]}: {what}; {'; '.join(how)} in {seconds:.1f}s{kept}")
        else:
            self.console.notice(f"environment {lock.digest[:12]}: reused on {len(hosts)} host(s) ({seconds:.1f}s)")


def for_run(spec: EnvSpec, ssh: SshOptions, job: Job, context: RunContext, workdir: str) -> Environments:
    """A launch's environments, speaking on its console (--setup's lines tagged `[setup@HOST]`, as a worker's are
    with its host), keeping their logs in each attempt's folder and their time in the run's timeline."""
    from tpuctl.inputs.terminal import printable
    from tpuctl.launch.console.logs import tag

    console = Console(
        notice=context.notice,
        show=lambda host, line: context.writer.write(f"{tag('setup', 0, context.colour, host)} {printable(line)}"),
        folder=RunFolder(context.log_dir),
        timeline=context.timeline,
    )
    return Environments(spec, ssh, job.python, console, job.start_timeout, workdir)


def _ancestors(lock: Lock, name: str) -> set[str]:
    """Every locked project that requires `name`, directly or through others (the file's requirements among them)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for parent in lock.pulled_in_by(todo.pop()):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen

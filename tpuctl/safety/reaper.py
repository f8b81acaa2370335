"""Nothing a run starts outlives it: a small "reaper" process as the parent of each worker,
babysat command and `kubectl logs -f`.

Why a process of its own: a process group kill misses children that started a
session of their own (`start_new_session=True`), and children left behind by a
main process that already exited have nobody watching them once tpuctl is
killed with SIGKILL. A watch thread inside the worker does not help either: a
worker holding the GIL in C code never lets it run.

How (Linux): the reaper makes itself a child subreaper (prctl
PR_SET_CHILD_SUBREAPER), so every descendant orphaned below it is reparented
to it rather than to init, and the whole tree can be found by walking /proc's
parent links down from it. It ignores SIGINT, SIGTERM and SIGHUP (they are for
the command, whose process group it shares) and watches a *lifeline*: a file
descriptor whose other end only the launcher holds. EOF on it means the
launcher closed it (stop now) or died, even by SIGKILL. Then, and as soon as
the command's main process ends, it kills every descendant with SIGKILL,
reaps them, and exits with the command's status (a death by signal N is
mirrored, so the launcher's `wait` sees what it would have seen).

Two ways in, one loop (`watch`):
- `guard(lifeline)`: the worker runtime calls it first thing; it forks, the
  parent becomes the worker's reaper, the child goes on as the worker. A fork
  and about 1 ms of start-up, instead of another interpreter.
- `python -I -S reaper.py FD ARGV...` (`spawn` builds it): for commands tpuctl
  does not start as its own Python (kubectl, a babysat command).

Elsewhere (no prctl or no /proc: macOS, the BSDs) `supported()` is False and
callers keep to process-group kills, which miss descendants that left the
group. This module is standard library only and importable under `python -S`:
it is on every worker's start-up path and runs as a script by path.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress  # loaded anyway in a worker (runpy imports it)

TYPE_CHECKING = False  # typing costs the worker's start; mypy treats this name as True
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn, Protocol

    class Stacks(Protocol):
        """How a worker's stacks are taken: tpuctl/safety/stack_dump.py, which the worker runtime passes to
        `guard`. Passed in, not imported: stack_dump runs py-spy through `run` below."""

        def register(self, dumps: int) -> None: ...

        def capture(self, pid: int, dumps: int) -> bytes: ...


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
KILL_DEADLINE_S = 5.0  # a process stuck in the kernel (D state) must not keep the reaper forever


def supported() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def _prctl(option: int, value: int) -> bool:
    """prctl(option, value) through _ctypes' own entry points: the ctypes package costs 5-15 ms
    to import, the C module under 1 ms, and this runs before every worker."""
    if not supported():
        return False
    prctl = _prctl_function()
    if prctl is not None:
        import _ctypes

        return bool(_ctypes.call_function(prctl, (option, value, 0, 0, 0)) == 0)
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0)
    except (ImportError, AttributeError, OSError):
        return False


def _prctl_function() -> int | None:
    """prctl's address through _ctypes (under 1 ms; the ctypes package costs 5-15 ms), None where it cannot be had."""
    try:
        import _ctypes

        return int(_ctypes.dlsym(_ctypes.dlopen(None), "prctl"))  # type: ignore[arg-type]
    except (ImportError, AttributeError, OSError):
        return None


def become_subreaper(on: bool = True) -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): orphans below this process come to it, not to init."""
    return _prctl(PR_SET_CHILD_SUBREAPER, int(on))


def on_parent_death(sig: int, parent: int) -> None:
    """prctl(PR_SET_PDEATHSIG, sig): the kernel sends `sig` when the parent ends, whatever ends it.

    Why both ends of a reaper use it: its command's main process gets SIGKILL, so a worker
    that kills its reaper (after os.setsid(), out of reach of group kills) dies with it;
    the reaper gets SIGCONT, so a reaper stopped with everything else (SIGSTOP) wakes up
    when its launcher is killed, finds the lifeline closed and kills what it watches
    (SIGKILL ends stopped processes too). SIGCONT is harmless if it comes early: the kernel
    sends it when the *thread* that started the process ends. `parent`: the pid the parent
    had, to catch a death before the prctl."""
    if _prctl(PR_SET_PDEATHSIG, sig) and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def descendants(root: int) -> list[int]:
    """Every process below `root`, by the parent links in /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as stat:
                ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


class _Reaper:
    def __init__(self, main: int) -> None:
        self.main = main
        self.status: int | None = None

    def reap(self) -> bool:
        """Collect every finished child (orphans come to us too); False once we have no child at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.main:
                self.status = status

    def kill_all(self) -> None:
        """SIGKILL every descendant until none is left: a process forked meanwhile is
        orphaned by the kill of its parent, so it comes to us and the next round finds it."""
        import time

        deadline = time.monotonic() + KILL_DEADLINE_S
        while time.monotonic() < deadline:
            found = descendants(os.getpid())
            for pid in found:
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if not self.reap() and not found:
                return
            time.sleep(0.002)

    def exit(self) -> NoReturn:
        """Leave as the command did: its exit code, or death by the same signal."""
        status = self.status
        if status is None:
            os._exit(128 + signal.SIGKILL)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                import resource

                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command's crash, not ours, may dump core
            except (ImportError, ValueError, OSError):
                pass
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.WEXITSTATUS(status))


def watch(main: int, lifeline: int, stacks: Callable[[], bytes] | None = None, relay: int | None = None) -> NoReturn:
    """The reaper's life: wait for the command's main process to end or the lifeline to close,
    then kill every descendant and exit as the command did. Never returns.

    With `stacks` (a worker's: what takes its stacks), a "stacks" line on the
    lifeline is answered on it with `stacks HEX`: what `stacks()` returned. With
    `relay` (a worker's pipe), each "profile SESSION MS" line goes on into it as
    "SESSION MS STAMP" (tpuctl/runtime/profile_capture/requests.py), STAMP being
    this host's time.monotonic() on receipt; a full pipe drops it."""
    import select

    for sig in STOPPING:
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold none of the command's pipes: its readers see EOF when it ends
        os.dup2(null, fd)
    os.close(null)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    reaper = _Reaper(main)
    pending = b""
    try:
        while True:
            reaper.reap()
            if reaper.status is not None:
                break
            ready = [fd for fd, _ in poller.poll()]
            if wake_read in ready:
                while _read(wake_read):
                    pass
            if lifeline in ready:
                request = _read(lifeline)
                if not request:
                    break  # EOF: the launcher stopped us or is gone
                *lines, pending = (pending + request).split(b"\n")
                pending = pending[-512:]  # no request is that long
                for line in lines:
                    if stacks is not None and line.strip() == b"stacks":
                        _say(lifeline, b"stacks " + stacks().hex().encode() + b"\n")
                    elif relay is not None and line.startswith(b"profile "):
                        hand_on(relay, line[8:].strip())
    finally:
        # Whatever happened, this process must never go back to the caller (it would run the worker twice).
        try:
            reaper.kill_all()
            _say(lifeline, b"ended\n")  # the launcher tells this end from the reaper itself being killed
        finally:
            try:
                reaper.exit()
            finally:
                os._exit(128 + signal.SIGKILL)


def _say(lifeline: int, line: bytes) -> None:
    """A line to the launcher on a worker's control channel (a socket); nothing on a one-way
    lifeline (a pipe's read end) or once the launcher went away (the next read sees EOF)."""
    with suppress(OSError):
        while line:
            line = line[os.write(lifeline, line) :]


def hand_on(relay: int, request: bytes) -> None:
    """A "profile" request into the worker's pipe, stamped with its time of receipt, in one write (a pipe takes up to
    PIPE_BUF bytes whole) that never waits: a worker that does not read loses it, and the launcher hears nothing."""
    import time

    with suppress(OSError):
        os.write(relay, request + b" " + repr(time.monotonic()).encode() + b"\n")


def _read(fd: int) -> bytes:
    """Up to 256 bytes; b"" at EOF, and also for an empty non-blocking pipe or a broken channel."""
    try:
        return os.read(fd, 256)
    except OSError:
        return b""


def guard(lifeline: int, drop: Sequence[int] = (), stacks: Stacks | None = None, relay: tuple[int, int] | None = None) -> bool:
    """Fork this (worker) process: the parent becomes its reaper and never returns, the child
    returns True and goes on as the worker. False where no reaper can be had (then nothing forked).
    `drop`: descriptors the reaper must not keep (a reserved port, which must be free for the worker).
    `stacks`: how the reaper takes the worker's stacks when the launcher asks for them (tpuctl/safety/stack_dump.py).
    `relay`: a pipe (read end, write end) whose write end the reaper keeps for the launcher's "profile" requests
    (`watch`); the worker keeps the read end."""
    if not become_subreaper():
        return False
    taking = None if stacks is None else (stacks, *os.pipe())  # with the pipe the worker's stacks come through
    reaper = os.getpid()
    inherited = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPPING}  # a stop now is the worker's
    try:
        pid = os.fork()
    except OSError:
        for fd in taking[1:] if taking is not None else ():
            os.close(fd)
        for sig, handler in inherited.items():
            signal.signal(sig, handler)
        return False
    if pid == 0:
        for sig, handler in inherited.items():
            signal.signal(sig, handler)
        on_parent_death(signal.SIGKILL, reaper)
        if taking is not None:
            how, answers, dumps = taking
            os.close(answers)
            how.register(dumps)
        if relay is not None:
            os.close(relay[1])
        return True
    on_parent_death(signal.SIGCONT, os.getppid())
    _say(lifeline, b"reaper\n")  # so the launcher can tell this reaper killed from its worker killed
    for fd in (*drop, *(relay[:1] if relay is not None else ())):
        with suppress(OSError):
            os.close(fd)
    if relay is not None:
        os.set_blocking(relay[1], False)
    if taking is None:
        watch(pid, lifeline, relay=None if relay is None else relay[1])
    how, answers, dumps = taking
    os.close(dumps)
    os.set_blocking(answers, False)
    watch(pid, lifeline, lambda: how.capture(pid, answers), None if relay is None else relay[1])


# ---- the launcher's side ----------------------------------------------------------------------


class Reaped:
    """A command started under a reaper: its Popen (whose status is the command's) and the lifeline's
    launcher end. Closing the lifeline stops the command and everything it started, at once."""

    def __init__(self, proc: subprocess.Popen[Any], lifeline: int | None) -> None:
        self.proc = proc
        self.lifeline = lifeline

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cut(self) -> None:
        """Close the lifeline: the reaper kills every descendant and exits."""
        if self.lifeline is not None:
            lifeline, self.lifeline = self.lifeline, None
            os.close(lifeline)

    def stop(self, grace_s: float, first: int | None = signal.SIGINT) -> None:
        """`first` to the command's process group, `grace_s` to end by itself, then the lifeline cut,
        and SIGKILL to the group for whatever a missing reaper left."""
        import subprocess

        if first is not None and self.proc.poll() is None:
            _killpg(self.proc.pid, first)
            _killpg(self.proc.pid, signal.SIGCONT)  # a stopped command acts on `first` only once continued
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        reaped = self.lifeline is not None
        self.cut()
        if reaped:
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(KILL_DEADLINE_S)
        _killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def adopt_orphans() -> frozenset[int] | None:
    """Make the launcher a subreaper for the length of a local run: a worker's descendant whose
    reaper was killed (by the worker, out of its group after os.setsid()) comes to the launcher,
    not to init, and `kill_adopted` finds it. Returns the children the launcher had before (not
    the run's to kill: a caller in the same process may have its own), None where there is no subreaper."""
    if not become_subreaper():
        return None
    return frozenset(_children_of(os.getpid()))


def _children_of(pid: int) -> list[int]:
    return [child for child in descendants(pid) if _parent(child) == pid]


def _parent(pid: int) -> int | None:
    try:
        with open("/proc/" + str(pid) + "/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def kill_adopted(before: frozenset[int]) -> list[int]:
    """SIGKILL every process below this one but those under the children it had `before`, reap
    the ones that became its children, and stop adopting. Called once every worker of the run
    has ended: what is left escaped its reaper. Returns the pids killed."""
    import time

    killed: list[int] = []
    deadline = time.monotonic() + KILL_DEADLINE_S
    while time.monotonic() < deadline:
        kept = {pid for root in before for pid in (root, *descendants(root))}
        found = [pid for pid in descendants(os.getpid()) if pid not in kept]
        if not found:
            break
        for pid in found:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed:
                killed.append(pid)
        for pid in killed:
            with suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # only the pids found: a Popen's own status stays its own
        time.sleep(0.01)
    become_subreaper(False)
    return killed


def _killpg(pgid: int, sig: int) -> None:
    with suppress(OSError):
        os.killpg(pgid, sig)


def dies_with_parent(sig: int) -> Callable[[], None] | None:
    """A `preexec_fn` that gives a child `sig` as its parent-death signal, or None where there is none.

    prctl is looked up here, in the parent: the forked child of a threaded tpuctl must not import
    or dlopen (another thread may have held the loader's lock at the fork). The kernel sends `sig`
    when the *thread* that started the child ends: SIGKILL only for a child its thread waits for
    (`run`); SIGCONT, harmless early, for a long-lived one (an ssh client)."""
    prctl = _prctl_function() if supported() else None
    if prctl is None:
        return None
    import _ctypes

    parent = os.getpid()

    def preexec() -> None:
        _ctypes.call_function(prctl, (PR_SET_PDEATHSIG, sig, 0, 0, 0))
        if os.getppid() != parent:  # the parent died before the prctl
            os.kill(os.getpid(), sig)

    return preexec


def run(argv: Sequence[str], *, timeout: float | None, **popen: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run for the one-shot commands tpuctl runs (kubectl, nvidia-smi, py-spy, ssh, rsync, a compiler):
    a deadline, and SIGKILL when tpuctl dies, SIGKILL included (the calling thread waits for it). `timeout` is
    None only for the user's own remote command (`tpuctl ssh -- CMD`), which lasts as long as they want."""
    import subprocess

    return subprocess.run(list(argv), timeout=timeout, preexec_fn=dies_with_parent(signal.SIGKILL), **popen)


def spawn(argv: Sequence[str], **popen: Any) -> Reaped:
    """subprocess.Popen(argv, **popen) with the command under a reaper in a session of its own
    (so Ctrl-C on the terminal is the launcher's to handle). Where no reaper can run, the command
    runs directly and only its process group can be stopped."""
    import subprocess

    if not supported():
        return Reaped(subprocess.Popen(list(argv), start_new_session=True, **popen), None)
    theirs, ours = os.pipe()  # neither is inherited by anything else the launcher starts (PEP 446)
    try:
        wrapped = [sys.executable, "-I", "-S", os.path.abspath(__file__), str(theirs), *argv]
        passed = (theirs, *popen.pop("pass_fds", ()))
        proc = subprocess.Popen(wrapped, start_new_session=True, pass_fds=passed, **popen)
    except BaseException:
        os.close(ours)
        raise
    finally:
        os.close(theirs)
    return Reaped(proc, ours)


def _main(args: list[str]) -> NoReturn:
    """`reaper.py FD ARGV...`: run ARGV under a reaper whose lifeline is FD."""
    lifeline, argv = int(args[0]), args[1:]
    # A stop sent to the group while the command starts is the command's, not ours: the reaper must
    # outlive it to kill what it leaves. The command gets the dispositions the launcher gave us.
    inherited = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPPING}
    become_subreaper()
    on_parent_death(signal.SIGCONT, os.getppid())
    errors, report = os.pipe()
    reaper = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            on_parent_death(signal.SIGKILL, reaper)
            os.close(lifeline)
            os.close(errors)
            for sig, disposition in inherited.items():
                if disposition != signal.SIG_IGN:
                    signal.signal(sig, signal.SIG_DFL)
            for name in ("SIGPIPE", "SIGXFSZ"):  # as subprocess' restore_signals does
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as err:
            os.write(report, ("cannot run " + argv[0] + ": " + str(err.strerror)).encode())
        os._exit(127)
    os.close(report)
    problem = os.read(errors, 4096)
    os.close(errors)
    if problem:
        os.write(2, problem + b"\n")
    watch(pid, lifeline)


if __name__ == "__main__":
    _main(sys.argv[1:])

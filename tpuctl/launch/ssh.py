"""The ssh backend: workers on other hosts, through the user's own OpenSSH.

Every connection is `ssh` with the user's config, agent, known_hosts and
ProxyJump, plus BatchMode (never a prompt) and connection sharing: the first
session to a host becomes its ControlMaster (a socket under
$TMPDIR/tpuctl-$UID/ssh), so every later session to that host, and the next
launch within a minute, skips the handshake.

A worker is one ssh session running a small agent (`ssh_agent.py`, sent as
source text). A launch happens in two steps, so that TF_CONFIG can name a real
port on every host before any training starts:

  reserve   one session per worker, concurrently (at most `fanout` hosts being
            connected at a time; connection failures retried), each agent binds
            and holds a free port on its host and says hello. An unreachable
            host fails the whole launch here, with nothing started anywhere.
  start     each agent is sent its worker's argv and environment (one hex
            line on stdin, see `pack`) and starts it in a new process group,
            handing it the held port and a control socket as a local launch does.

Control flows over the same session: the agent's stderr carries only its
`NONCE kind value` lines (ready, pgid, exit status), stdout carries the
worker's output, and lines on the agent's stdin signal the worker's group.
When the session ends for any reason (tpuctl killed, ssh killed, network gone
and noticed) the agent sees EOF on stdin and kills the group. As a last resort
tpuctl kills a group whose exit it never heard about with a separate
`kill -- -PGID` over ssh.

`run_everywhere` is the same machinery for one command on many hosts.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import queue
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tpuctl.errors import FAILED, USAGE, TpuctlError
from tpuctl.hosts import HostEntry, format_address
from tpuctl.launch.plan import WorkerSpec

DEFAULT_FANOUT = 16
CONNECT_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 10
HELLO_TIMEOUT_S = 60.0
CONTROL_PERSIST = "60s"
SSH_FAILED = 255  # ssh's own status when it could not connect or lost the connection
SYNC_EXCLUDES = ("__pycache__", ".git")
_SIGNAL_WORDS = {signal.SIGINT: "INT", signal.SIGTERM: "TERM", signal.SIGKILL: "KILL"}
_SUN_PATH_MAX = 104  # the smallest sockaddr_un path among the systems OpenSSH runs on


def _agent_source() -> str:
    text = (Path(__file__).with_name("ssh_agent.py")).read_text(encoding="utf-8")
    return "\n".join(line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")) + "\n"


AGENT_SOURCE = _agent_source()

# Extracts a tar stream from stdin into argv[1]; the sync fallback when rsync is missing.
UNTAR_SOURCE = """import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
    for member in tar:
        if hasattr(tarfile, "data_filter"):
            tar.extract(member, sys.argv[1], filter="data")
        else:
            tar.extract(member, sys.argv[1])
"""


_T = TypeVar("_T")
_R = TypeVar("_R")


def parallel(function: Callable[[_T], _R], items: Iterable[_T], limit: int) -> list[_R]:
    """function(item) for every item on at most `limit` threads; results in item order.

    (concurrent.futures would do, but importing it costs a launch 5 ms of logging set-up.)
    The first exception is raised once every item has been tried.
    """
    work = list(items)
    results: list[_R | None] = [None] * len(work)
    errors: list[BaseException | None] = [None] * len(work)
    queue_ = iter(range(len(work)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                index = next(queue_, None)
            if index is None:
                return
            try:
                results[index] = function(work[index])
            except BaseException as err:  # handed to the caller below
                errors[index] = err

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(limit, len(work))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results  # type: ignore[return-value]


def _token() -> str:
    return os.urandom(8).hex()


# -- ssh command lines --------------------------------------------------------


def control_dir() -> Path:
    """Where ControlMaster sockets live: $TMPDIR/tpuctl-$UID/ssh, private to this user."""
    for base in (Path(tempfile.gettempdir()), Path("/tmp")):
        folder = base / f"tpuctl-{os.getuid()}" / "ssh"
        # ssh binds "<ControlPath>.<16 random chars>" first; %C is 40 hex digits.
        if len(str(folder)) + 1 + 40 + 17 < _SUN_PATH_MAX:
            break
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = folder.stat()
    except OSError as err:
        raise TpuctlError(f"cannot create the ssh control dir {folder}: {err.strerror}", exit_code=FAILED) from None
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise TpuctlError(f"{folder} must be a private directory of this user (mode 0700)", hint=f"remove {folder}")
    return folder


@dataclass(frozen=True)
class SshOptions:
    """How to reach hosts: what `ssh` gets besides the host (and how hard to try)."""

    user: str | None = None
    key: str | None = None
    options: tuple[str, ...] = ()  # each as `ssh -o VALUE`
    config: str | None = None  # as `ssh -F FILE`
    fanout: int = DEFAULT_FANOUT  # hosts being connected at the same time
    attempts: int = CONNECT_ATTEMPTS  # connection tries per host
    connect_timeout: int = CONNECT_TIMEOUT_S
    control_path: str | None = None  # default: control_dir()/%C

    def base(self) -> list[str]:
        """`ssh` and every option, without a host. The user's own -o values come
        first, because ssh keeps the first value it is given for an option."""
        argv = ["ssh"]
        if self.config:
            argv += ["-F", self.config]
        for option in self.options:
            argv += ["-o", option]
        if self.key:
            argv += ["-i", self.key]
        if self.user:
            argv += ["-l", self.user]
        control = self.control_path or str(control_dir() / "%C")
        for option in (
            "BatchMode=yes",
            "ControlMaster=auto",
            f"ControlPath={control}",
            f"ControlPersist={CONTROL_PERSIST}",
            f"ConnectTimeout={self.connect_timeout}",
            "ServerAliveInterval=15",
            "ServerAliveCountMax=4",
            "ClearAllForwardings=yes",
        ):
            argv += ["-o", option]
        return [*argv, "-T", "-x"]

    def command(self, host: str | HostEntry, remote: Sequence[str]) -> list[str]:
        """The full `ssh ... HOST COMMAND` argv; `remote` is quoted once, here."""
        name, port = (host.host, host.port) if isinstance(host, HostEntry) else (host, None)
        argv = self.base()
        if port is not None:
            argv += ["-p", str(port)]
        return [*argv, "--", name, remote_command(remote)]

    def check(self, host: str) -> None:
        """Let ssh itself validate the options and config file, without connecting (`ssh -G`)."""
        argv = [arg for arg in self.base() if arg not in ("-T", "-x")]
        try:
            done = subprocess.run([*argv, "-G", "--", host], capture_output=True, text=True, timeout=30, check=False)
        except FileNotFoundError:
            raise TpuctlError("ssh (OpenSSH client) is not installed", hint="e.g. apt-get install openssh-client") from None
        if done.returncode != 0:
            problem = _last_line(done.stderr) or f"ssh -G exit status {done.returncode}"
            raise TpuctlError(f"ssh rejects the options: {problem}", hint="check --ssh-option / --ssh-config", exit_code=USAGE)


def remote_command(argv: Sequence[str]) -> str:
    """One shell command line from an argv list: every word quoted exactly once."""
    if not argv:
        raise ValueError("empty remote command")
    return "exec " + shlex.join(argv)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def pack(pairs: Sequence[tuple[str, str]]) -> str:
    """key, value, key, value... as one hex word: the agent's message format (it has no json)."""
    return "\0".join(f"{key}\0{value}" for key, value in pairs).encode("utf-8", "surrogateescape").hex()


def unpack(text: str) -> list[tuple[str, str]]:
    words = bytes.fromhex(text.strip()).decode("utf-8", "surrogateescape").split("\0")
    return list(zip(words[0::2], words[1::2]))


@dataclass
class Hello:
    """What an agent reports once it holds a port: where it is and what the host has."""

    port: int
    ip: str = ""
    hostname: str = ""
    rsync: bool = False
    manifest: dict[str, tuple[int, int]] | None = None  # sync folder's files: size, mtime (when asked for)

    @classmethod
    def parse(cls, text: str) -> Hello:
        hello = cls(port=0)
        path = ""
        for key, value in unpack(text):
            if key == "port":
                hello.port = int(value)
            elif key in ("ip", "hostname"):
                setattr(hello, key, value)
            elif key == "rsync":
                hello.rsync = bool(value)
            elif key == "manifest":
                hello.manifest = {}
            elif key == "file":
                path = value
            elif key == "stat" and hello.manifest is not None:
                size, mtime = value.split()
                hello.manifest[path] = (int(size), int(mtime))
        return hello


# -- run_everywhere ------------------------------------------------------------


@dataclass(frozen=True)
class HostResult:
    """What one command did on one host."""

    host: str
    exit_code: int  # the command's status; 255 with `error` set when ssh never got it running
    output: str  # stdout and stderr together, as they came (ssh's own messages included)
    error: str | None = None  # why the command did not run (in ssh's words), after every attempt
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


def run_everywhere(
    hosts: Sequence[str | HostEntry],
    argv: Sequence[str],
    options: SshOptions,
    *,
    timeout: float | None = None,
    stdin: bytes | None = None,
) -> list[HostResult]:
    """Run `argv` on every host over ssh, at most `options.fanout` at a time; results in host order.

    A connection failure is retried (`options.attempts` tries in all); a command
    that ran is never run twice. `timeout` bounds each try; on expiry the
    result has exit_code 124 and an error.
    """
    if not hosts:
        return []
    remote = list(argv)
    remote_command(remote)  # empty argv fails here, before any connection
    return parallel(lambda host: _run_on(host, remote, options, timeout, stdin), hosts, options.fanout)


def _run_on(
    host: str | HostEntry, argv: list[str], options: SshOptions, timeout: float | None, stdin: bytes | None
) -> HostResult:
    name = host.host if isinstance(host, HostEntry) else host
    marker = f"tpuctl-connected-{_token()}"
    # The marker proves the command started: after it, a 255 is the command's own status.
    remote = ["sh", "-c", f'echo {marker} >&2; exec "$@"', "sh", *argv]
    error = ""
    for attempt in range(1, options.attempts + 1):
        try:
            done = subprocess.run(
                options.command(host, remote),
                input=stdin,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as expired:
            text = (expired.output or b"").decode("utf-8", "replace")
            return HostResult(name, 124, _strip_marker(text, marker)[0], f"timed out after {timeout:g}s", attempt)
        text, connected = _strip_marker(done.stdout.decode("utf-8", "replace"), marker)
        if connected or done.returncode != SSH_FAILED:
            return HostResult(name, done.returncode, text, None, attempt)
        error = _last_line(text) or f"ssh exit status {done.returncode}"
        if attempt < options.attempts:
            time.sleep(0.25 * 2 ** (attempt - 1))
    return HostResult(name, SSH_FAILED, "", error, options.attempts)


def _strip_marker(text: str, marker: str) -> tuple[str, bool]:
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if line.rstrip("\r\n") != marker]
    return "".join(kept), len(kept) != len(lines)


# -- placement and remote paths -------------------------------------------------


def place(entries: Sequence[HostEntry], count: int) -> list[str]:
    """The host of each of `count` tasks: every host's slots in turn, in list order (mpirun's "by slot")."""
    hosts = [entry.host for entry in entries for _ in range(entry.slots)]
    if count > len(hosts):
        raise TpuctlError(f"{count} process(es) need {count} slots, but the hosts give {len(hosts)}", hint="add hosts, or host:SLOTS")
    return hosts[:count]


@dataclass(frozen=True)
class RemotePaths:
    """Where a launch lives on the hosts.

    `workdir` is the workers' working directory there (the local working
    directory's absolute path unless --remote-dir says otherwise), `script` the
    script as the workers are told it (relative to `workdir` when it sits
    under the local working directory), `sync_source`/`sync_dest` the script's
    folder here and there.
    """

    workdir: str
    script: str
    sync_source: str
    sync_dest: str

    @classmethod
    def resolve(cls, script: str, remote_dir: str | None, local_cwd: str | None = None) -> RemotePaths:
        cwd = local_cwd or os.getcwd()
        workdir = remote_dir or cwd
        absolute = os.path.abspath(os.path.join(cwd, script))
        relative = os.path.relpath(absolute, cwd)
        inside = not (relative == os.pardir or relative.startswith(os.pardir + os.sep))
        if inside and (not os.path.isabs(script) or remote_dir):
            remote_script = script if not os.path.isabs(script) else relative
        elif remote_dir is None:
            remote_script = absolute
        else:
            remote_script = os.path.basename(absolute)
        dest = posixpath.normpath(posixpath.join(workdir, posixpath.dirname(remote_script)))
        return cls(workdir=workdir, script=remote_script, sync_source=os.path.dirname(absolute), sync_dest=dest)

    def remote_path(self, local: str, local_cwd: str | None = None) -> str:
        """A local path under the working directory, moved to the same place under `workdir`."""
        cwd = local_cwd or os.getcwd()
        relative = os.path.relpath(local, cwd)
        if relative == os.pardir or relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
            return local
        return posixpath.normpath(posixpath.join(self.workdir, relative))


# -- sessions -----------------------------------------------------------------


class _HostProblem(Exception):
    def __init__(self, host: str, message: str, *, connection: bool) -> None:
        super().__init__(message)
        self.host = host
        self.message = message
        self.connection = connection


@dataclass
class _Session:
    """One ssh session running an agent that said hello and holds a port."""

    host: str
    proc: subprocess.Popen[bytes]
    nonce: str
    hello: Hello
    stderr_rest: bytes = b""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def address(self) -> str:
        """The worker's TF address: the host's address on the interface ssh reached it through."""
        return format_address(self.hello.ip or self.hello.hostname or self.host, self.hello.port)

    def send(self, line: str) -> bool:
        with self.lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                return False
            data = memoryview(line.encode() + b"\n")
            try:
                while data:  # a raw pipe may take a long line in parts
                    data = data[stdin.write(data) or 0 :]
                return True
            except (OSError, ValueError):
                return False

    def close_stdin(self) -> None:
        with self.lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass


def _read_hello(proc: subprocess.Popen[bytes], nonce: str, deadline: float) -> tuple[Hello | None, str | None, bytes, list[str]]:
    """Read the agent's stderr until its hello: (hello, agent error, bytes after it, ssh's lines)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    buffer = b""
    diagnostics: list[str] = []
    prefix = nonce.encode() + b" "
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            while b"\n" in buffer:
                raw, buffer = buffer.split(b"\n", 1)
                if raw.startswith(prefix):
                    kind, _, value = raw[len(prefix) :].decode().partition(" ")
                    if kind == "hello":
                        return Hello.parse(value), None, buffer, diagnostics
                    if kind == "error":
                        return None, _message(value), buffer, diagnostics
                elif raw.strip():
                    diagnostics.append(raw.decode("utf-8", "replace").strip())
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(timeout=left):
                return None, None, buffer, diagnostics + [f"no answer within {HELLO_TIMEOUT_S:g}s"]
            chunk = os.read(fd, 65536)
            if not chunk:
                if buffer.strip():
                    diagnostics.append(buffer.decode("utf-8", "replace").strip())
                return None, None, b"", diagnostics
            buffer += chunk


class SshHandle:
    """A worker on another host: its output, its messages, its exit status, its signals."""

    def __init__(self, spec: WorkerSpec, session: _Session) -> None:
        self.spec = spec
        self._session = session
        self.proc = session.proc
        self.pgid: int | None = None
        self.status: int | None = None  # what the agent reported; None: never heard
        self._messages: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._finished = threading.Event()  # exit reported, or both streams ended
        self.output = _SessionStream(self, session)

    def messages(self) -> Iterator[str]:
        while (message := self._messages.get()) is not None:
            yield message

    def wait(self) -> int:
        self._finished.wait()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            # The worker is done, but something on the host still holds the session open.
            self.proc.kill()
            self.proc.wait()
        return SSH_FAILED if self.status is None else self.status

    def describe_exit(self, returncode: int) -> str | None:
        if self.status is None:
            return f"lost the ssh connection to {self.spec.host} (worker state unknown)"
        return None

    def signal(self, sig: int) -> None:
        word = _SIGNAL_WORDS.get(signal.Signals(sig))
        if word is not None and self.status is None:
            self._session.send(word)

    def close(self) -> None:
        """End the session's input: an agent still running kills its worker group."""
        self._session.close_stdin()

    # called by _SessionStream as lines arrive
    def _on_marker(self, kind: str, value: str) -> bytes | None:
        if kind == "msg":
            self._messages.put(value)
        elif kind == "pgid":
            self.pgid = int(value)
        elif kind == "exit":
            self.status = int(value)
            self._finished.set()
        elif kind == "error":
            return f"tpuctl: {_message(value)}\n".encode()
        return None

    def _on_end(self) -> None:
        self._messages.put(None)
        self._finished.set()


class _SessionStream:
    """`readline()` over a session's stdout (the worker's output) and stderr (agent
    markers, which are taken out, and ssh's own messages, which are kept)."""

    def __init__(self, handle: SshHandle, session: _Session) -> None:
        proc = session.proc
        assert proc.stdout is not None and proc.stderr is not None
        self._handle = handle
        self._prefix = session.nonce.encode() + b" "
        self._selector = selectors.DefaultSelector()
        self._buffers = {proc.stdout.fileno(): b"", proc.stderr.fileno(): session.stderr_rest}
        self._stderr = proc.stderr.fileno()
        for fd in self._buffers:
            self._selector.register(fd, selectors.EVENT_READ)
        self._open = set(self._buffers)
        self._ended = False

    def readline(self) -> bytes:
        while True:
            for fd, buffer in self._buffers.items():
                if b"\n" in buffer or (buffer and fd not in self._open):
                    line, newline, rest = buffer.partition(b"\n")
                    self._buffers[fd] = rest
                    if fd == self._stderr and line.startswith(self._prefix):
                        kind, _, value = line[len(self._prefix) :].decode("utf-8", "replace").partition(" ")
                        extra = self._handle._on_marker(kind, value)
                        if extra:
                            return extra
                        break
                    return line + newline
            else:
                if not self._open:
                    if not self._ended:
                        self._ended = True
                        self._selector.close()
                        self._handle._on_end()
                    return b""
                for key, _ in self._selector.select():
                    fd = int(key.fd)
                    chunk = os.read(fd, 65536)
                    if chunk:
                        self._buffers[fd] += chunk
                    else:
                        self._open.discard(fd)
                        self._selector.unregister(fd)


def _message(packed: str) -> str:
    return dict(unpack(packed)).get("message", "?")


def _spawn(options: SshOptions, host: str, python: str, hello: list[tuple[str, str]]) -> subprocess.Popen[bytes]:
    argv = options.command(host, [python, "-S", "-c", AGENT_SOURCE, pack(hello)])
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            # Ctrl-C on the terminal is tpuctl's to handle, not every ssh's.
            start_new_session=True,
        )
    except FileNotFoundError:
        raise TpuctlError("ssh (OpenSSH client) is not installed", hint="e.g. apt-get install openssh-client") from None


def _abandon(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


# -- the backend ----------------------------------------------------------------


class SshBackend:
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
        sync: bool = False,
        notice: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.entries = list(entries)
        self.options = options
        self.paths = paths
        self.python = python
        self.sync = sync
        self.notice = notice
        self.nonce = _token()
        self._placement: list[str] = []
        self._pending: dict[tuple[str, str], _Session] = {}
        self._handles: list[SshHandle] = []
        self._synced = False
        self._options_checked = threading.Lock()

    # Backend protocol ---------------------------------------------------------

    def reserve(self, count: int) -> list[str]:
        self._placement = place(self.entries, count)
        sessions = self._connect(self._placement)
        addresses = []
        self._pending = {}
        for host, session in zip(self._placement, sessions):
            address = session.address()
            addresses.append(address)
            self._pending[(host, address)] = session
        if self.sync and not self._synced:
            try:
                self._sync_all(sessions)
            except BaseException:
                self._drop_pending()
                raise
            self._synced = True
        return addresses

    def placement(self, count: int) -> list[str]:
        return self._placement[:count]

    def start(self, spec: WorkerSpec) -> SshHandle:
        session = self._pending.pop((spec.host, spec.address or ""), None)
        if session is None:
            raise TpuctlError(f"{spec.name}: no session was opened for {spec.host} at {spec.address}", exit_code=FAILED)
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

    # internals ------------------------------------------------------------------

    def _hello(self, first: bool) -> list[tuple[str, str]]:
        hello = [("nonce", self.nonce), ("cwd", self.paths.workdir)]
        if first:
            if self.sync:
                hello += [("mkdir", self.paths.workdir), ("mkdir", self.paths.sync_dest)]
                if not self._synced:
                    hello += [("sync", self.paths.sync_dest), ("local_rsync", "1" if shutil.which("rsync") else "")]
                    hello += [("exclude", name) for name in SYNC_EXCLUDES]
            else:
                hello.append(("script", self.paths.script))
        return hello

    def _open(self, host: str, first: bool) -> _Session:
        """One agent session that said hello, with connection failures retried."""
        problem = ""
        for attempt in range(1, self.options.attempts + 1):
            proc = _spawn(self.options, host, self.python, self._hello(first))
            hello, error, rest, diagnostics = _read_hello(proc, self.nonce, time.monotonic() + HELLO_TIMEOUT_S)
            if hello is not None:
                return _Session(host, proc, self.nonce, hello, rest)
            if proc.poll() is None:
                proc.kill()
            status = proc.wait()
            _abandon(proc)
            if error is not None:
                hint = " (pass --sync, or copy it there)" if error.startswith("script not found") else ""
                raise _HostProblem(host, f"{host}: {error}{hint}", connection=False)
            said = diagnostics[-1] if diagnostics else f"ssh exit status {status}"
            if status != SSH_FAILED and not said.startswith("no answer"):
                raise _HostProblem(
                    host, f"{host}: {self.python} could not run tpuctl's agent: {said} (pass --python)", connection=False
                )
            problem = said
            self._check_options(host)
            if attempt < self.options.attempts:
                time.sleep(0.25 * 2 ** (attempt - 1))
        raise _HostProblem(host, f"cannot reach {host} over ssh ({self.options.attempts} attempts): {problem}", connection=True)

    def _check_options(self, host: str) -> None:
        """After a failed connection, once: is it our options (a usage error) rather than the host?

        Checking before every launch would cost each one an `ssh -G` run up front.
        """
        if self._options_checked.acquire(blocking=False):
            self.options.check(host)

    def _open_host(self, host: str, count: int) -> list[_Session] | _HostProblem:
        """`count` sessions to one host: the first makes the ControlMaster, the rest share it."""
        sessions: list[_Session] = []
        try:
            sessions.append(self._open(host, first=True))
            if count > 1:
                sessions += parallel(lambda _: self._open(host, first=False), range(count - 1), count - 1)
        except _HostProblem as problem:
            for session in sessions:
                _abandon(session.proc)
            return problem
        except BaseException:
            for session in sessions:
                _abandon(session.proc)
            raise
        return sessions

    def _connect(self, placement: list[str]) -> list[_Session]:
        counts: dict[str, int] = {}
        for host in placement:
            counts[host] = counts.get(host, 0) + 1
        results = parallel(lambda host: self._open_host(host, counts[host]), list(counts), self.options.fanout)
        opened = {host: result for host, result in zip(counts, results) if not isinstance(result, _HostProblem)}
        problems = [result for result in results if isinstance(result, _HostProblem)]
        if problems:
            for sessions in opened.values():
                for session in sessions:
                    session.close_stdin()
                    _abandon(session.proc)
            raise _launch_error(problems)
        return [opened[host].pop(0) for host in placement]

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for session in pending.values():
            session.close_stdin()
        for session in pending.values():
            try:
                session.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            _abandon(session.proc)

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

    # sync ----------------------------------------------------------------------------

    def _sync_all(self, sessions: list[_Session]) -> None:
        first: dict[str, _Session] = {}
        for session in sessions:
            first.setdefault(session.host, session)
        local_rsync = shutil.which("rsync") is not None
        source = self.paths.sync_source
        local = _manifest(source)
        results = parallel(lambda s: self._sync_one(s, local_rsync, local), list(first.values()), self.options.fanout)
        failed = [message for message in results if message.startswith("!")]
        if failed:
            raise TpuctlError("; ".join(m[1:] for m in failed), exit_code=FAILED)
        self.notice(f"synced {source} to {self.paths.sync_dest} on {len(first)} host(s): " + ", ".join(results))

    def _sync_one(self, session: _Session, local_rsync: bool, local: dict[str, tuple[int, int]]) -> str:
        host = session.host
        if local_rsync and session.hello.rsync:
            done = subprocess.run(
                rsync_command(self.options, host, self.paths.sync_source, self.paths.sync_dest),
                capture_output=True,
                text=True,
                check=False,
                start_new_session=True,
            )
            if done.returncode != 0:
                return f"!{host}: rsync failed: {_last_line(done.stderr) or done.returncode}"
            return f"{host} (rsync)"
        remote = session.hello.manifest or {}
        changed = [path for path, info in local.items() if info != remote.get(path)]
        if not changed:
            return f"{host} (unchanged)"
        payload = _tar(self.paths.sync_source, changed)
        [result] = run_everywhere(
            [host], [self.python, "-S", "-c", UNTAR_SOURCE, self.paths.sync_dest], self.options, stdin=payload, timeout=600
        )
        if not result.ok:
            return f"!{host}: copying {len(changed)} file(s) failed: {result.error or _last_line(result.output)}"
        return f"{host} ({len(changed)} file(s))"


def rsync_command(options: SshOptions, host: str, source: str, dest: str) -> list[str]:
    """rsync over the same ssh (and ControlMaster) as everything else; unchanged files are skipped."""
    excludes = [f"--exclude={name}" for name in SYNC_EXCLUDES]
    # --protect-args: the destination reaches the remote rsync as data, not shell words.
    return ["rsync", "-a", "--protect-args", *excludes, "-e", shlex.join(options.base()), "--", f"{source}/", f"{host}:{dest}/"]


def _manifest(folder: str) -> dict[str, tuple[int, int]]:
    """relative path -> (size, whole-second mtime) of every file under folder, as the agent reports it."""
    found: dict[str, tuple[int, int]] = {}
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in SYNC_EXCLUDES]
        for name in files:
            path = os.path.join(top, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found[os.path.relpath(path, folder)] = (info.st_size, int(info.st_mtime))
    return found


def _tar(folder: str, paths: list[str]) -> bytes:
    import tarfile  # only for this fallback: rsync is the usual path
    from io import BytesIO

    data = BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for path in sorted(paths):
            tar.add(os.path.join(folder, path), arcname=path, recursive=False)
    return data.getvalue()


def _launch_error(problems: list[_HostProblem]) -> TpuctlError:
    problems = sorted(problems, key=lambda p: p.host)
    if len(problems) == 1:
        message = problems[0].message
    else:
        message = f"{len(problems)} hosts failed before anything started: " + "; ".join(p.message for p in problems)
    hint = "nothing was started; check the host names and `ssh HOST true`" if any(p.connection for p in problems) else None
    return TpuctlError(message, hint=hint, exit_code=FAILED)

"""One worker's ssh session: the agent started, its hello read, then the worker's Handle.

The session's stdout is the worker's output; its stderr carries the agent's
NONCE lines (taken out here) among ssh's own messages (kept); its stdin takes
the job, then signal words.
"""

from __future__ import annotations

import contextlib
import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from tpuctl.backends.ssh.wire import pack, read_manifest, unpack
from tpuctl.cluster.hosts import format_address
from tpuctl.endings import Ending, Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.console.logs import LINE_PIECE
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Handle
from tpuctl.safety import reaper, stack_dump
from tpuctl.ssh.client_args import SSH_FAILED, SshOptions
from tpuctl.ssh.remote_source import cache_source, shipped_lines

HELLO_TIMEOUT_S = 60.0
# An agent's hello: a few hundred bytes, but for --sync without rsync its manifest of the sync folder's files on the
# host (hex of a path, a size and a time each: ~200 bytes a file) is in it too; 64 MiB is ~300,000 files there.
HELLO_LIMIT = 64 << 20
# A marker line: `NONCE msg stacks HEX` is the longest an agent writes (it drops a worker's longer lines itself).
MARKER_LIMIT = stack_dump.MESSAGE_LIMIT + 256
DIAGNOSTICS, DIAGNOSTIC_CHARS = 20, 2000  # ssh's lines kept before a hello (the last says why none came), and each's length
LOST_CONNECTION = "lost the ssh connection"  # how a worker that never reported its exit is described
_SIGNAL_WORDS = {signal.SIGINT: "INT", signal.SIGTERM: "TERM", signal.SIGKILL: "KILL"}


def agent_source() -> str:
    """The remote agent as one program: wire.py, cache.py (the transport's check of the host's runtime), then
    agent.py; the launcher imports wire.py and cache.py too."""

    def text(name: str) -> str:
        return "\n".join(shipped_lines(Path(__file__).with_name(name))) + "\n"

    return text("wire.py") + cache_source() + text("agent.py")


AGENT_SOURCE = agent_source()


@dataclass
class Hello:
    """What an agent reports once it holds a port: where it is and what the host has."""

    port: int
    ip: str = ""
    hostname: str = ""
    rsync: bool = False
    manifest: dict[str, tuple[int, int]] | None = None  # sync folder's files: size, mtime (when asked for)
    runtime: str = ""  # why the host's copy of the runtime cannot be used ("" when it can, or was not asked)
    profiler_port: int = 0  # the port held for the worker's profiler server (0: not asked for)

    @classmethod
    def parse(cls, text: str) -> Hello:
        hello = cls(port=0)
        pairs = unpack(text)
        for key, value in pairs:
            if key == "port":
                hello.port = int(value)
            elif key == "profiler":
                hello.profiler_port = int(value)
            elif key in ("ip", "hostname"):
                setattr(hello, key, value)
            elif key == "runtime":
                hello.runtime = value
            elif key == "rsync":
                hello.rsync = bool(value)
            elif key == "manifest":
                hello.manifest = read_manifest(pairs)
        if not 0 < hello.port < 65536:  # every agent holds a port: an answer without one is no agent's
            raise ValueError(f"no port in the hello: {hello.port}")
        return hello


@dataclass
class Session:
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
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()


def read_hello(proc: subprocess.Popen[bytes], nonce: str, deadline: float) -> tuple[Hello | None, str | None, bytes, list[str]]:
    """Read the agent's stderr until its hello: (hello, agent error, bytes after it, ssh's last lines).

    Bounded as the session's stream is: ssh's lines before the hello are kept as their last DIAGNOSTICS lines, each
    cut at DIAGNOSTIC_CHARS, and a hello longer than HELLO_LIMIT, or one no agent writes, is an error of this host's."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    buffer = bytearray()  # grown in place: a hello near HELLO_LIMIT is not copied at every chunk
    searched = 0  # the bytes of `buffer` known to hold no newline: a long hello is searched once, not at every chunk
    diagnostics: deque[str] = deque(maxlen=DIAGNOSTICS)
    prefix = nonce.encode() + b" "
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            while (end := buffer.find(b"\n", searched)) >= 0:
                raw = bytes(buffer[:end])
                del buffer[: end + 1]
                searched = 0
                if raw.startswith(prefix):
                    kind, _, value = raw[len(prefix) :].decode("utf-8", "replace").partition(" ")
                    if kind in ("hello", "error"):
                        return (*_hello_or_error(kind, value), bytes(buffer), list(diagnostics))
                elif raw.strip():
                    diagnostics.append(_diagnostic(raw))
            if len(buffer) > (HELLO_LIMIT if buffer.startswith(prefix) else LINE_PIECE):
                if buffer.startswith(prefix):
                    return None, f"its agent's hello is longer than {HELLO_LIMIT} bytes, more than any agent says", b"", list(diagnostics)
                diagnostics.append(_diagnostic(buffer))  # a line of ssh's without end: its start is enough to show
                buffer.clear()
            searched = len(buffer)
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(timeout=left):
                return None, None, bytes(buffer), [*diagnostics, f"no answer within {HELLO_TIMEOUT_S:g}s"]
            chunk = os.read(fd, 65536)
            if not chunk:
                if buffer.strip():
                    diagnostics.append(_diagnostic(buffer))
                return None, None, b"", list(diagnostics)
            buffer += chunk


def _hello_or_error(kind: str, value: str) -> tuple[Hello | None, str | None]:
    """An agent's `hello` or `error` line read; one that is not packed as an agent packs it (a host that answers in
    its stead) is an error of that host's, not a traceback."""
    try:
        return (Hello.parse(value), None) if kind == "hello" else (None, message(value))
    except ValueError:
        return None, f"its agent's {kind} line is not one tpuctl's agent writes"


def _diagnostic(raw: bytes | bytearray) -> str:
    return raw[: DIAGNOSTIC_CHARS * 4].decode("utf-8", "replace").strip()[:DIAGNOSTIC_CHARS]


class SshHandle(Handle):
    """A worker on another host: its output, its messages, its exit status, its signals."""

    can_give_stacks = True

    def __init__(self, spec: WorkerSpec, session: Session) -> None:
        self.spec = spec
        self._session = session
        self.proc = session.proc
        self.pgid: int | None = None
        self.status: int | None = None  # what the agent reported; None: never heard
        self._messages: queue.SimpleQueue[str | _End | None] = queue.SimpleQueue()
        self._finished = threading.Event()  # exit reported, or both streams ended
        self.output = _SessionStream(self, session)

    def messages(self) -> Iterator[str | None]:
        while not isinstance(message := self._messages.get(), _End):
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

    def describe_exit(self, returncode: int) -> Ending | None:
        if self.status is None:
            return replace(Ending.of_returncode(returncode), kind=Kind.LOST, words=f"{LOST_CONNECTION} to {self.spec.host} (worker state unknown)")
        return None

    def signal(self, sig: int) -> None:
        word = _SIGNAL_WORDS.get(signal.Signals(sig))
        if word is not None and self.status is None:
            self._session.send(word)

    def request_stacks(self) -> None:
        """Ask the agent for the worker's stacks; they come back among `messages()` as `stacks HEX`."""
        if self.status is None:
            self._session.send("STACKS")

    def request_profile(self, session: str, milliseconds: int) -> bool:
        """Ask the agent to pass a capture request to the worker's reaper; the answer comes back among `messages()`."""
        return self.status is None and self._session.send(f"PROFILE {session} {milliseconds}")

    def close(self) -> None:
        """End the session's input: an agent still running kills its worker group."""
        self._session.close_stdin()

    def process_group(self) -> int:
        """The worker's group is on its host, out of sight; its ssh client's is here (a session of its
        own, see spawn_agent), and a client frozen by SIGSTOP freezes the worker's output and signals."""
        return self.proc.pid

    # called by _SessionStream as lines arrive
    def _on_marker(self, kind: str, value: str) -> bytes | None:
        """One of the agent's lines; one no agent writes (a host that answers in its stead) is passed over."""
        try:
            if kind == "msg":
                self._messages.put(value)
            elif kind == "dropped":  # the agent dropped a line of the worker's longer than any message
                self._messages.put(None)
            elif kind == "pgid":
                self.pgid = int(value)
            elif kind == "exit":
                self.status = int(value)
                self._finished.set()
            elif kind == "error":
                return f"tpuctl: {message(value)}\n".encode()
        except ValueError:
            pass
        return None

    def _on_end(self) -> None:
        self._messages.put(_END)
        self._finished.set()


class _End:
    """The end of a handle's messages (None is taken: a dropped message)."""


_END = _End()


class _SessionStream:
    """`readline()` over a session's stdout (the worker's output) and stderr (agent
    markers, which are taken out, and ssh's own messages, which are kept).

    Nothing is held whole past a bound, whatever the host sends: output with no newline comes in pieces of
    LINE_PIECE bytes, and a marker line longer than MARKER_LIMIT (no agent writes one) is dropped as it comes,
    its message counted as a dropped one."""

    def __init__(self, handle: SshHandle, session: Session) -> None:
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
        self._midline: set[int] = set()  # streams whose buffer goes on with a line already given in part: no marker
        self._dropping = False  # inside a marker line past MARKER_LIMIT: stderr's bytes are dropped up to its newline
        self._ended = False

    def readline(self) -> bytes:
        while True:
            for fd in self._buffers:
                taken = self._take(fd)
                if taken is None:
                    continue
                if taken:
                    return taken
                break  # a marker was taken out (or dropped): look again
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

    def _take(self, fd: int) -> bytes | None:
        """The next line or piece of `fd`'s buffer to show; b"" where a marker was taken out or bytes dropped; None
        where the buffer holds nothing to take yet."""
        buffer, ended = self._buffers[fd], fd not in self._open
        if not buffer:
            return None
        end = buffer.find(b"\n")
        if fd == self._stderr and self._dropping:
            self._buffers[fd] = buffer[end + 1 :] if end >= 0 else b""
            self._dropping = end < 0
            return b""
        if fd == self._stderr and fd not in self._midline and self._prefix.startswith(buffer[: len(self._prefix)]):
            return self._marker(buffer, end, ended)
        if end < 0 and len(buffer) < LINE_PIECE and not ended:
            return None
        cut = end + 1 if 0 <= end < LINE_PIECE else LINE_PIECE
        piece, self._buffers[fd] = buffer[:cut], buffer[cut:]
        (self._midline.discard if piece.endswith(b"\n") else self._midline.add)(fd)
        return piece

    def _marker(self, buffer: bytes, end: int, ended: bool) -> bytes | None:
        """A line that starts as the agent's markers do (or may, once more of it comes)."""
        line = buffer[:end] if end >= 0 else buffer
        if len(line) > MARKER_LIMIT:
            self._buffers[self._stderr] = buffer[end + 1 :] if end >= 0 else b""
            self._dropping = end < 0
            self._handle._on_marker("dropped", "")
            return b""
        if end < 0 and not ended:
            return None
        self._buffers[self._stderr] = buffer[end + 1 :] if end >= 0 else b""
        if not line.startswith(self._prefix):
            return line + b"\n"  # the start of the nonce, and no more: ssh's, after all
        kind, _, value = line[len(self._prefix) :].decode("utf-8", "replace").partition(" ")
        return self._handle._on_marker(kind, value) or b""


def message(packed: str) -> str:
    """The text of an agent's `error` line."""
    return dict(unpack(packed)).get("message", "?")


def agent_command(options: SshOptions, host: str, python: str, hello: str, source: str = AGENT_SOURCE) -> list[str]:
    """One agent session's ssh argv. A dry run prints it with stand-ins for the agent's source and the hello,
    so that what it shows is what a launch runs, not a copy that could drift."""
    return options.command(host, [python, "-S", "-c", source, hello])


def spawn_agent(options: SshOptions, host: str, python: str, hello: list[tuple[str, str]]) -> subprocess.Popen[bytes]:
    """Start one agent session; it answers on stderr (see read_hello)."""
    argv = agent_command(options, host, python, pack(hello))
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            # Ctrl-C on the terminal is tpuctl's to handle, not every ssh's.
            start_new_session=True,
            # Stopped with everything else (SIGSTOP) and tpuctl then killed, an ssh client would never see its stdin
            # end, nor tell the agent: SIGCONT when tpuctl's spawning thread ends wakes it to do both (harmless early).
            preexec_fn=reaper.dies_with_parent(signal.SIGCONT),
        )
    except FileNotFoundError:
        raise TpuctlError("ssh (OpenSSH client) is not installed", hint="e.g. apt-get install openssh-client") from None


def abandon(proc: subprocess.Popen[bytes]) -> None:
    """Kill a session if it still runs, reap it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()

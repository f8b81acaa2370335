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
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from tpuctl.backends.ssh.wire import pack, read_manifest, unpack
from tpuctl.cluster.hosts import format_address
from tpuctl.endings import Ending, Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Handle
from tpuctl.safety import reaper
from tpuctl.ssh.client_args import SSH_FAILED, SshOptions
from tpuctl.ssh.remote_source import cache_source, shipped_lines

HELLO_TIMEOUT_S = 60.0
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
                        return None, message(value), buffer, diagnostics
                elif raw.strip():
                    diagnostics.append(raw.decode("utf-8", "replace").strip())
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(timeout=left):
                return None, None, buffer, [*diagnostics, f"no answer within {HELLO_TIMEOUT_S:g}s"]
            chunk = os.read(fd, 65536)
            if not chunk:
                if buffer.strip():
                    diagnostics.append(buffer.decode("utf-8", "replace").strip())
                return None, None, b"", diagnostics
            buffer += chunk


class SshHandle(Handle):
    """A worker on another host: its output, its messages, its exit status, its signals."""

    can_give_stacks = True

    def __init__(self, spec: WorkerSpec, session: Session) -> None:
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
        if kind == "msg":
            self._messages.put(value)
        elif kind == "pgid":
            self.pgid = int(value)
        elif kind == "exit":
            self.status = int(value)
            self._finished.set()
        elif kind == "error":
            return f"tpuctl: {message(value)}\n".encode()
        return None

    def _on_end(self) -> None:
        self._messages.put(None)
        self._finished.set()


class _SessionStream:
    """`readline()` over a session's stdout (the worker's output) and stderr (agent
    markers, which are taken out, and ssh's own messages, which are kept)."""

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

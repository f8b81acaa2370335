"""What a child prints, read within bounds: in memory, at most what a caller keeps, and in time, its deadline.

`subprocess.run(capture_output=True)` and `communicate()` keep all a child prints until it ends or its deadline
passes: a tool or an interpreter that prints without end (a sitecustomize's loop, /dev/zero, a remote host that never
stops) fills tpuctl's memory first, at hundreds of megabytes a second. Here every chunk is read as it comes and only a
bounded part is kept: the first `limit` bytes, the child killed past them (`run(..., keep=HEAD)`: a tool whose whole
answer matters, nvidia-smi, py-spy), or the last `limit` bytes, the earlier ones read and dropped (`keep=TAIL`: an
answer that is its output's last line, and an error that is its last words). Standard library only, as the rest of
tpuctl.safety: py-spy is run from a worker's reaper.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from tpuctl.safety import reaper

HEAD, TAIL = "head", "tail"
KILLED_WAIT_S = 2.0  # for a killed child to be reaped: one stuck in the kernel (a hung GPU) dies when it can
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Output:
    """A child's exit status and what was kept of its streams (stderr is b"" where it was merged into stdout)."""

    returncode: int | None  # None: stopped at the limit (HEAD), before it ended
    stdout: bytes
    stderr: bytes
    dropped: int = 0  # bytes read and not kept: the start of an over-long output (TAIL)

    @property
    def over(self) -> bool:
        """The child printed more than the limit: stopped there (HEAD), or its output's start dropped (TAIL)."""
        return self.returncode is None or self.dropped > 0


class _Kept:
    """One stream's kept bytes: the first `limit` (HEAD) or the last `limit` (TAIL), the rest counted."""

    def __init__(self, limit: int, keep: str) -> None:
        self.limit = limit
        self.keep = keep
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> bool:
        """Keep `chunk` as the policy says; False once a HEAD stream has passed its limit."""
        self.data += chunk
        if len(self.data) <= self.limit:
            return True
        if self.keep == HEAD:
            return False
        if len(self.data) > 2 * self.limit:  # trimmed now and then, not at every chunk: each trim copies `limit` bytes
            cut = len(self.data) - self.limit
            del self.data[:cut]
            self.dropped += cut
        return True

    def value(self) -> tuple[bytes, int]:
        """One copy of what is kept (a slice of the bytearray would be a second, up to 2 x limit bytes at a time)."""
        extra = max(0, len(self.data) - self.limit)
        with memoryview(self.data) as view:
            kept = bytes(view[extra:] if self.keep == TAIL else view[: self.limit])
        return kept, self.dropped + extra


def run(argv: list[str], *, timeout: float | None, limit: int, keep: str = HEAD, input: bytes | None = None, **popen: Any) -> Output:
    """reaper.run with bounded output: `argv` with stdout and stderr (or stdout alone, given stderr=STDOUT) read
    as `read` reads them, `input` written to its stdin meanwhile (else stdin is /dev/null). It dies with tpuctl
    (SIGKILL as its parent-death signal) and is killed, its session too where it has one of its own, when it is
    stopped at the limit or passes `timeout` (subprocess.TimeoutExpired, with what was kept as its output). `timeout`
    is None only for the user's own remote command (`tpuctl ssh -- CMD`), as for reaper.run."""
    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL
    stderr = popen.pop("stderr", subprocess.PIPE)
    proc = subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, preexec_fn=reaper.dies_with_parent(signal.SIGKILL), **popen
    )  # fmt: skip
    try:
        return read(proc, deadline=math.inf if timeout is None else time.monotonic() + timeout, limit=limit, keep=keep, input=input)
    finally:
        if proc.poll() is None:
            _kill(proc, session=bool(popen.get("start_new_session")))


def read(proc: subprocess.Popen[bytes], *, deadline: float, limit: int, keep: str = TAIL, input: bytes | None = None) -> Output:
    """`proc`'s piped streams until both end, then its exit status, all by `deadline` (time.monotonic()), past which
    subprocess.TimeoutExpired is raised (its `output`: what was kept of stdout); the caller stops the child then.
    Each stream keeps `limit` bytes as `keep` says; a HEAD stream past its limit ends the reading at once (the
    caller kills the child: returncode None). `input` goes to proc's stdin as it takes it, then stdin is closed.
    Its pipes are closed on the way out, as communicate() closes them."""
    try:
        return _read(proc, deadline, limit, keep, input)
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _read(proc: subprocess.Popen[bytes], deadline: float, limit: int, keep: str, input: bytes | None) -> Output:
    streams = {stream.fileno(): _Kept(limit, keep) for stream in (proc.stdout, proc.stderr) if stream is not None}
    pending = memoryview(input or b"")
    writing = proc.stdin if input is not None else None
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        if writing is not None:
            os.set_blocking(writing.fileno(), False)
            selector.register(writing.fileno(), selectors.EVENT_WRITE)
        while any(key.events == selectors.EVENT_READ for key in selector.get_map().values()):
            left = deadline - time.monotonic()
            ready = selector.select(None if left == math.inf else left) if left > 0 else []
            if not ready:
                raise subprocess.TimeoutExpired(proc.args, 0, output=_kept(proc.stdout, streams)[0])
            for key, _ in ready:
                if key.events == selectors.EVENT_WRITE:
                    pending = _write(selector, key.fd, pending, writing)
                    continue
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    selector.unregister(key.fd)
                elif not streams[key.fd].add(chunk):
                    out, err, dropped = _taken(proc, streams)
                    return Output(None, out, err, dropped)
    try:
        returncode = proc.wait(None if deadline == math.inf else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired(proc.args, 0, output=_kept(proc.stdout, streams)[0]) from None
    out, err, dropped = _taken(proc, streams)
    return Output(returncode, out, err, dropped)


def _write(selector: selectors.BaseSelector, fd: int, pending: memoryview, stream: Any) -> memoryview:
    """As much of `pending` as the pipe takes now; stdin closed once all is written or the child stopped reading."""
    try:
        pending = pending[os.write(fd, pending[:_CHUNK]) :]
    except BlockingIOError:
        return pending
    except OSError:  # BrokenPipeError: the child closed its stdin, or ended
        pending = pending[:0]
    if not pending:
        selector.unregister(fd)
        with contextlib.suppress(OSError):
            stream.close()
    return pending


def _kept(stream: Any, streams: dict[int, _Kept]) -> tuple[bytes, int]:
    return streams[stream.fileno()].value() if stream is not None and stream.fileno() in streams else (b"", 0)


def _taken(proc: subprocess.Popen[bytes], streams: dict[int, _Kept]) -> tuple[bytes, bytes, int]:
    (out, out_dropped), (err, err_dropped) = _kept(proc.stdout, streams), _kept(proc.stderr, streams)
    return out, err, out_dropped + err_dropped


def _kill(proc: subprocess.Popen[bytes], *, session: bool) -> None:
    """SIGKILL to the child (and its session's group, where it leads one), then reap it within KILLED_WAIT_S."""
    with contextlib.suppress(OSError):
        if session:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILLED_WAIT_S)

"""--setup's output as it comes, not once the command ends: each line on the console tagged with its host, and in
the attempt's `setup@HOST.log`, both within bounds.

Why as it comes: a setup that downloads a data set or builds apt packages runs for minutes, and one that hangs until
--start-timeout is only understood from what it printed last. Why bounds: the host is the user's, its command prints
what it likes (a progress bar with no line end, a `yes` gone wrong); the console shows the start of each line and the
first SHOWN_LIMIT bytes, the log keeps the first LOG_LIMIT, and the launcher holds only the output's tail in memory
(the host program's answer is its last line).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tpuctl.backends.ssh.environment.host_env import REPLY
from tpuctl.launch.console.logs import LogFile, display_text
from tpuctl.safety import reaper
from tpuctl.ssh.fanout import HostResult

LINE_LIMIT = 2000  # characters of one line on the console; the log keeps 4 x as many bytes of it
SHOWN_LIMIT = 64 << 10  # bytes of a host's output on the console; the rest only in its log
LOG_LIMIT = 16 << 20  # bytes of a host's output its log keeps
TAIL_LIMIT = 64 << 10  # the output's last bytes kept in memory: the program's answer, or ssh's last words
_CHUNK = 1 << 16
_REPLY = REPLY.encode()


class Lines:
    """One host's output split into lines as it comes: each shown (cut at LINE_LIMIT, SHOWN_LIMIT in all) and logged
    (LOG_LIMIT in all); the host program's answer line, and the blank line before it, neither."""

    def __init__(self, log: Path, show: Callable[[str], None], scrub: Callable[[str], str], warn: Callable[[str], None]) -> None:
        self.log, self.show, self.scrub = log, show, scrub
        self.partial = bytearray()
        self.partial_size = 0  # bytes of the line under way, its cut part included
        self.blanks = 0  # blank lines held back: the answer line is preceded by one
        self.shown = self.logged = self.hidden = self.unlogged = 0
        self.out = LogFile(log, False, warn)  # a log that cannot be written warns once; the lines are still shown

    def feed(self, chunk: bytes) -> None:
        *ended, rest = chunk.split(b"\n")
        for piece in ended:
            self._add(piece)
            self._line(bytes(self.partial), self.partial_size)
            self.partial, self.partial_size = bytearray(), 0
        self._add(rest)

    def close(self) -> None:
        if self.partial_size:
            self._line(bytes(self.partial), self.partial_size)
        if self.unlogged:
            self.out.write(f"... {self.unlogged} bytes more, not kept (a --setup log keeps {LOG_LIMIT >> 20} MiB)\n".encode())
        self.out.close()
        if self.hidden:
            self.show(f"... {self.hidden} bytes more in {self.log}")

    def _add(self, piece: bytes) -> None:
        """A piece of the line under way: its first 4 x LINE_LIMIT bytes kept (enough for LINE_LIMIT characters)."""
        room = 4 * LINE_LIMIT - len(self.partial)
        self.partial += piece[: max(0, room)]
        self.partial_size += len(piece)

    def _line(self, raw: bytes, size: int) -> None:
        if raw.startswith(_REPLY):
            self.blanks = 0
            return
        if not raw.strip():
            self.blanks += 1
            return
        for _ in range(self.blanks):  # blank lines within the output are its own
            self._keep(b"", 0)
        self.blanks = 0
        self._keep(raw, size)

    def _keep(self, raw: bytes, size: int) -> None:
        text = self.scrub(raw.decode("utf-8", "replace"))
        if self.logged + size + 1 <= LOG_LIMIT:
            cut = b"" if size == len(raw) else f" ... [cut: {size} bytes in all]".encode()
            self.out.write(text.encode("utf-8", "replace") + cut + b"\n")
            self.logged += size + 1
        else:
            self.unlogged += size + 1
        if self.hidden or self.shown + size + 1 > SHOWN_LIMIT:  # past the bound, no later line either: the log has them in order
            self.hidden += size + 1
            return
        self.shown += size + 1
        shown = display_text(text.encode())
        self.show(shown if len(shown) <= LINE_LIMIT and size == len(raw) else f"{shown[:LINE_LIMIT]} ... [cut: {size} bytes in all]")


def run(host: str, argv: list[str], stdin: bytes, timeout: float, lines: Lines) -> HostResult:
    """`argv` (the ssh command running the host program's `setup`) with `stdin`, its output fed to `lines` as it comes;
    killed, its whole group, past `timeout` (exit 124, as run_everywhere's). Its output's tail is the result's."""
    proc = started(argv, subprocess.PIPE, subprocess.STDOUT)
    assert proc.stdin is not None and proc.stdout is not None
    tail = bytearray()
    deadline = time.monotonic() + timeout
    timed_out = True  # until its output ends and it exits, by the deadline
    status = 124
    try:
        with contextlib.suppress(OSError):  # ssh that could not connect reads nothing: its words say why
            proc.stdin.write(stdin)
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout.fileno(), selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0 and selector.select(left):
                chunk = os.read(proc.stdout.fileno(), _CHUNK)
                if not chunk:
                    status, timed_out = proc.wait(max(0.0, deadline - time.monotonic())), False
                    break
                lines.feed(chunk)
                tail += chunk
                del tail[: max(0, len(tail) - TAIL_LIMIT)]
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        stopped(proc)
        lines.close()
    text = tail.decode("utf-8", "replace")
    return HostResult(host, 124, text, f"timed out after {timeout:g}s") if timed_out else HostResult(host, status, text)


def started(argv: list[str], stdin: int, stderr: IO[bytes] | int) -> subprocess.Popen[bytes]:
    """An ssh client whose output the launcher reads as it comes (--setup's lines, a tar into a file): in a session of
    its own, SIGKILLed when tpuctl dies; its caller's deadline ends it with stopped()."""
    kill_with_tpuctl = reaper.dies_with_parent(signal.SIGKILL)
    return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True, preexec_fn=kill_with_tpuctl)


def stopped(proc: subprocess.Popen[bytes]) -> None:
    """A command started in a session of its own killed, its whole group, where it still runs; its output closed."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()

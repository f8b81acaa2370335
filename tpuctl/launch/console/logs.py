"""Worker output: a stable `[worker:1]` tag per line on the terminal, raw bytes on disk."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO, Protocol, TextIO

from tpuctl.inputs.terminal import printable
from tpuctl.launch.console.tracebacks import is_exception_line

# Foreground colours, picked by worker position so a worker keeps its colour across restarts.
_PALETTE = ("36", "35", "33", "32", "34", "96", "95", "93", "92", "94")
TAIL_LINES = 12
# How long an exception line stays pinned at the top of the tail: TensorFlow's "Detected at node ...
# defined at" blocks run to ~60 lines under Keras' fit (tests/data/tf_console/keras3_fit_bad_label.log);
# an exception that is that far behind was caught, and what followed it is the news.
PIN_LINES = 200
# A line that starts in the middle of another: a Keras progress bar has no newline until its epoch
# ends, so the next stderr line (TF's C++ log, a traceback) lands on the bar's line.
_GLUED = re.compile(
    r"(?<=\S)(?=[IWEF]\d{4} \d+:\d+:\d+\.\d+ +\d+ [\w./-]+:\d+\]"  # absl: W0000 00:00:1795586699.661483    6111 op_kernel.cc:1858]
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [\w./-]+:\d+\]"  # TF before 2.16
    r"|Traceback \(most recent call last\):$)"
)


def use_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def tag(name: str, position: int, colour: bool, host: str | None = None) -> str:
    """`[worker:1]` or `[worker:1@HOST]` before each of a worker's lines; the names may come from a log folder's file
    names (`tpuctl logs`), so they are made safe for a terminal."""
    text = f"[{printable(name)}@{printable(host)}]" if host else f"[{printable(name)}]"
    if not colour:
        return text
    return f"\x1b[{_PALETTE[position % len(_PALETTE)]}m{text}\x1b[0m"


class LineWriter:
    """Serialises whole lines from many pump threads onto one stream."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                # A closed reader (`| head`) or a full disk under a redirected stdout must not
                # stop the pumps: a pump that dies leaves its worker blocked on a full pipe.
                pass


def display_text(raw: bytes) -> str:
    """What a terminal would end up showing for one line, progress-bar carriage returns included."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    segments = [s for s in text.split("\r") if s.strip()]
    return segments[-1].rstrip() if segments else ""


def display_lines(raw: bytes) -> list[str]:
    """`display_text`, with a log line glued onto a progress bar given a line of its own.

    The worker's stdout and stderr share one pipe: a bar that has not ended its line yet
    (`2/4 ━━━━ loss: 2.3531`) takes the next C++ log line or traceback as its own tail, which
    would show a warning inside a bar and hide it from the noise filter.
    """
    line = display_text(raw)
    parts = [part.rstrip() for part in _GLUED.split(line[:4096])] + ([line[4096:]] if len(line) > 4096 else [])
    return [part for part in parts if part] or [""]


class Tail(deque[str]):
    """A worker's last display lines for the failure summary: blank ones left out, and the last
    exception line kept in sight while the lines after it run past the window.

    TensorFlow's errors put the exception line first and the details after it (a "Detected at
    node ... defined at" block of frames, then the message): the last TAIL_LINES lines alone
    would be frames. Then the tail is that line, `[… N lines …]`, and the last lines.
    """

    def __init__(self) -> None:
        super().__init__(maxlen=TAIL_LINES)
        self._recent: deque[str] = deque(maxlen=TAIL_LINES)
        self._pinned: str | None = None
        self._after = 0  # lines since the pinned one

    def append(self, line: str) -> None:
        if not line.strip():
            return
        self._recent.append(line)
        if is_exception_line(line):
            self._pinned, self._after = line, 0
        elif self._pinned is not None:
            self._after += 1
            if self._after > PIN_LINES:
                self._pinned = None
        if self._pinned is None or self._after < TAIL_LINES:
            super().append(line)
            return
        kept = list(self._recent)[-(TAIL_LINES - 2) :]
        self.clear()
        self.extend([self._pinned, f"    [… {self._after - len(kept)} lines …]", *kept])


class LineSource(Protocol):
    """Where a worker's output comes from: a pipe, or an ssh session's merged streams (only `readline` is used).
    A line longer than LINE_PIECE comes in pieces of at most that many bytes, so that no line is held whole."""

    def readline(self) -> bytes: ...


# Bytes of a line held at once: past any line a person reads (a Keras bar's carriage returns included), and a bound on
# what an endless line with no newline (a binary's bytes written to the console) costs while it is copied on.
LINE_PIECE = 1 << 20


class Pieces:
    """A pipe as a LineSource: readline() stops at LINE_PIECE bytes; the line's rest is the next piece. The log file
    still gets every byte, in order; the console shows each piece as a line of its own."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def readline(self) -> bytes:
        return self._stream.readline(LINE_PIECE)


def pump(
    source: LineSource,
    prefix: str,
    writer: LineWriter,
    log_path: Path,
    tail: deque[str],
    *,
    append: bool = False,
    warn: Callable[[str], None] | None = None,
    hide: Callable[[str], bool] | None = None,
) -> None:
    """Copy one worker's output to the terminal (tagged) and to its log file (as is), until EOF.

    Every backend's output goes through here: the Supervisor's workers and kubectl's pod logs alike.
    The pipe is drained whatever happens to the log file: a worker whose pipe nobody
    reads blocks on its next print, and the launch would hang forever. So a log that
    cannot be opened or written (a full disk, a directory in its place) costs one
    warning through `warn` (by default a tagged line) and the rest of that log, never
    the terminal's copy, the tail of last lines, or the launch.

    `hide` sees every line (as the terminal would show it, untagged). One for which it is true
    (tf_noise.Fold.hides) goes to the log file only: neither to the terminal nor to the tail, so
    a failed worker's last lines are its own, not TensorFlow's start-up chatter. Blank lines go the
    same way (a TensorFlow error prints one after every frame). Once the log file has failed
    nothing is hidden: the terminal is then the only copy.
    """
    log = LogFile(log_path, append, warn or (lambda message: writer.write(f"{prefix} tpuctl: {message}")))
    try:
        for raw in iter(source.readline, b""):
            log.write(raw)
            for line in display_lines(raw):
                if hide is not None and _hidden(hide, line) and log.ok:
                    continue
                if not line.strip() and log.ok:
                    continue  # a traceback's blank lines (TF's run to dozens) stay in the log only
                tail.append(line)
                writer.write(f"{prefix} {line}")
    except (OSError, ValueError):
        pass  # the pipe itself was closed under us (the worker's handle closed): nothing left to drain
    finally:
        log.close()


def _hidden(hide: Callable[[str], bool], line: str) -> bool:
    try:
        return hide(line)
    except Exception:  # noqa: BLE001 - a filter that fails shows the line: the pump must go on draining the pipe
        return False


class LogFile:
    """A worker's log file (or a host's --setup log) that turns its first failure into one warning and then stays quiet."""

    def __init__(self, path: Path, append: bool, warn: Callable[[str], None]) -> None:
        self.path = path
        self._warn = warn
        self._file: BinaryIO | None = None
        try:
            # 0600: a worker may print what --env gave it. Never through a symlink (O_NOFOLLOW): the attempt
            # folder is this user's and closed to others (private_files.private_dir), so none can be planted
            # there since, and one found there is refused, not followed.
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
            self._file = os.fdopen(os.open(path, flags, 0o600), "ab" if append else "wb")
        except OSError as err:
            self._fail(err)

    @property
    def ok(self) -> bool:
        """The file is open and every write so far reached it."""
        return self._file is not None

    def write(self, raw: bytes) -> None:
        if self._file is None:
            return
        try:
            self._file.write(raw)
            self._file.flush()
        except OSError as err:
            self._fail(err)

    def _fail(self, err: OSError) -> None:
        self.close()
        reason = err.strerror or str(err)
        self._warn(f"warning: cannot write log {self.path}: {reason}; its output goes on to the terminal only")

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()


def new_tail() -> Tail:
    return Tail()

"""Worker output: a stable `[worker:1]` tag per line on the terminal, raw bytes on disk."""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path
from typing import Protocol, TextIO

# Foreground colours, picked by worker position so a worker keeps its colour across restarts.
_PALETTE = ("36", "35", "33", "32", "34", "96", "95", "93", "92", "94")
TAIL_LINES = 12


def use_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def tag(name: str, position: int, colour: bool, host: str | None = None) -> str:
    text = f"[{name}@{host}]" if host else f"[{name}]"
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
            except (BrokenPipeError, ValueError):
                # A closed reader (`| head`) must not stop the launch or its log files.
                pass


def display_text(raw: bytes) -> str:
    """What a terminal would end up showing for one line, progress-bar carriage returns included."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    segments = [s for s in text.split("\r") if s.strip()]
    return segments[-1].rstrip() if segments else ""


class LineSource(Protocol):
    """Where a worker's output comes from: a pipe, or an ssh session's merged streams (only `readline` is used)."""

    def readline(self) -> bytes: ...


def pump(source: LineSource, prefix: str, writer: LineWriter, log_path: Path, tail: deque[str], *, append: bool = False) -> None:
    """Copy one worker's output to the terminal (tagged) and to its log file (as is), until EOF.

    Every backend's output goes through here: the Supervisor's workers and kubectl's pod logs alike.
    """
    with open(log_path, "ab" if append else "wb") as log:
        for raw in iter(source.readline, b""):
            log.write(raw)
            log.flush()
            line = display_text(raw)
            tail.append(line)
            writer.write(f"{prefix} {line}")


def new_tail() -> deque[str]:
    return deque(maxlen=TAIL_LINES)

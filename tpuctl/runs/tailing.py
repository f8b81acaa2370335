"""One file that another process may still be writing (a worker's log, a detached run's console), read a bounded piece at a time.

A log may be gigabytes: it is read in chunks, never whole, and a line is handed on as
soon as it is complete (a line longer than LINE_LIMIT in pieces of that size). A log
folder may also hold what is no log: a FIFO would block an open or a read for good, a
symlink to /dev/zero would fill memory. The file is opened without blocking and never
through a symlink (tpuctl writes its logs with O_NOFOLLOW, so one found there is not
tpuctl's), and is read only once its descriptor is known to be a regular file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

CHUNK = 64 * 1024
LINE_LIMIT = 64 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class Refused(Exception):
    """The path is there but is no file tpuctl wrote (a FIFO, a device, a symlink, a folder) or cannot be opened."""


class Tail:
    """Where the reading of one file has got to: its open descriptor and the start of a line not yet ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._partial = b""
        self.at_end = False  # the last call read all there was

    def lines(self, *, final: bool, budget: int | None = None) -> Iterator[bytes]:
        """The lines written since the last call, without their newline; nothing while the file does not exist.

        With `final` the writer is done: an unfinished last line is handed on too. `budget` caps the
        bytes read in this call (a follower visiting many files); None reads to the end of the file.
        Raises Refused (once; the caller drops this Tail) for a path that is not a regular file."""
        self.at_end = False
        if self._fd is None and not self._open():
            self.at_end = True
            return
        assert self._fd is not None
        left = budget
        while left is None or left > 0:
            try:
                chunk = os.read(self._fd, CHUNK if left is None else min(CHUNK, left))
            except OSError as err:
                raise Refused(f"cannot read it: {err.strerror or err}") from None
            if not chunk:
                self.at_end = True
                break
            if left is not None:
                left -= len(chunk)
            yield from self._split(chunk)
        if final and self.at_end and self._partial:
            line, self._partial = self._partial, b""
            yield line

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, _OPEN_FLAGS)
        except FileNotFoundError:
            return False
        except OSError as err:
            raise Refused("a symlink, not a file tpuctl wrote" if err.errno == errno.ELOOP else f"cannot open it: {err.strerror or err}") from None
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        if not regular:
            os.close(fd)
            raise Refused("not a regular file")
        self._fd = fd
        return True

    def _split(self, chunk: bytes) -> Iterator[bytes]:
        data = self._partial + chunk
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            yield from _pieces(data[start:end])
            start = end + 1
        rest = data[start:]
        while len(rest) > LINE_LIMIT:  # a line with no end in sight (/dev/urandom, a progress bar): on in pieces
            yield rest[:LINE_LIMIT]
            rest = rest[LINE_LIMIT:]
        self._partial = rest


def _pieces(line: bytes) -> Iterator[bytes]:
    if len(line) <= LINE_LIMIT:
        yield line
        return
    for start in range(0, len(line), LINE_LIMIT):
        yield line[start : start + LINE_LIMIT]

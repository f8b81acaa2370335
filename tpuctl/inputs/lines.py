"""Lines from a stream someone else writes (a worker's control channel), each held no longer than a limit.

`for line in stream` and `readline()` hold a line whole until its newline comes: a writer that never sends one (an
endless line, a binary's bytes) grows the reader's memory until it fails, and a huge line is held twice over by
the time it is decoded. Here a line is held up to `limit` bytes; past that it is given up at once (a None in its
place, so the caller can say so) and its remaining bytes are passed over as they come, up to its newline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

CHUNK = 1 << 16


def bounded_lines(read: Callable[[int], bytes | None], limit: int) -> Iterator[bytes | None]:
    """Each line `read` gives, its newline taken off, until `read` returns b"" or None (EOF; a last line with no newline
    counts); None in place of each line longer than `limit` bytes, said as soon as it passes the limit."""
    held = bytearray()
    passing = False  # inside a line already given up: its bytes are dropped up to its newline
    while chunk := read(CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if not passing:
                held += chunk[start:end]
                yield bytes(held) if len(held) <= limit else None
            held.clear()
            passing = False
            start = end + 1
        if not passing:
            held += chunk[start:]
            if len(held) > limit:
                held.clear()
                passing = True
                yield None
    if held and not passing:
        yield bytes(held)

"""Checks every parser of user data shares: whole numbers, path text, small files, nesting.

Each one exists because Python's own answer to hostile input is a traceback, not
a message: `int()` refuses digits that `str.isdigit()` accepts ("²", "①") and
strings of more than 4300 digits; `open()` raises ValueError on a NUL byte;
reading /dev/zero or a FIFO never ends; a parser recursing through `[[[[…` or
`{"a": {"a": …` runs out of stack. Every check here raises TpuctlError (exit 2
unless told otherwise) with the offending text shown on one line.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from tpuctl.inputs.errors import USAGE, TpuctlError, one_line

# Deeper than any real config file or saved spec nests, shallow enough that every
# recursive walk over the data (==, repr, json.dumps) stays far from the stack limit.
MAX_NESTING = 64
# A config file, hostfile or saved spec is a few kilobytes; a megabyte is a mistake (or /dev/zero).
MAX_FILE_BYTES = 1 << 20


def shown(text: str, limit: int = 60) -> str:
    """User input echoed in a message: quoted, control characters escaped, long text cut."""
    return repr(one_line(text, limit))


def whole_number(
    text: str, what: str, *, minimum: int = 0, maximum: int | None = None, digits: int = 9, hint: str | None = None
) -> int:
    """`text` as a non-negative whole number written in ASCII digits, within [minimum, maximum].

    `str.isdigit()` is true for "²" (which `int()` refuses) and for Arabic-Indic digits
    (which it reads as another number); `digits` caps the length so int() never meets its 4300-digit limit."""
    plain = text.strip()
    if not plain or len(plain) > digits or not (plain.isascii() and plain.isdigit()):
        raise TpuctlError(f"{what} {shown(text)} is not a whole number", hint=hint or f"digits 0-9, at most {digits}")
    value = int(plain)
    if value < minimum or (maximum is not None and value > maximum):
        upper = f"-{maximum}" if maximum is not None else " or more"
        raise TpuctlError(f"{what} {value} is out of range", hint=hint or f"{minimum}{upper}")
    return value


def check_text(value: str, what: str) -> str:
    """A path or name that the OS will see: no NUL byte (open() and exec() raise ValueError on one).

    No real command line or environment can carry a NUL; a config file (TOML's "\\u0000")
    or a caller in the same process can."""
    if "\x00" in value:
        raise TpuctlError(f"{what} {shown(value)} contains a NUL byte")
    return value


def open_regular(path: Path, what: str, exit_code: int) -> int | None:
    """A descriptor on `path` once it is known to be a regular file; None when it does not exist.

    Opened without blocking and checked on the descriptor itself (fstat), so a FIFO cannot
    hang the open and nothing can be swapped in between the check and the read."""
    check_text(str(path), what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None
    except OSError as err:
        raise TpuctlError(f"cannot read {what} {path}: {err.strerror or err.__class__.__name__}", exit_code=exit_code) from None
    try:
        kind = os.fstat(fd).st_mode
    except OSError as err:
        os.close(fd)
        raise TpuctlError(f"cannot read {what} {path}: {err.strerror or err.__class__.__name__}", exit_code=exit_code) from None
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise TpuctlError(f"cannot read {what} {path}: not a regular file", exit_code=exit_code)
    return fd


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to limit + 1 bytes (one more than allowed, so that "too large" can be told)."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_small_bytes(path: Path, what: str, *, limit: int = MAX_FILE_BYTES, exit_code: int = USAGE) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes; None when it does not exist.

    A directory, a device (/dev/zero) or a FIFO is refused before it is read: the first
    two would fill memory, the last would block forever."""
    fd = open_regular(path, what, exit_code)
    if fd is None:
        return None
    try:
        data = _read_at_most(fd, limit)
    except OSError as err:
        raise TpuctlError(f"cannot read {what} {path}: {err.strerror or err.__class__.__name__}", exit_code=exit_code) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TpuctlError(f"{what} {path} is larger than {limit} bytes", exit_code=exit_code)
    return data


def _utf8(data: bytes, what: str, exit_code: int, *, reading: bool = False) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        message = f"cannot read {what}: not UTF-8 text" if reading else f"{what} is not UTF-8 text"
        raise TpuctlError(message, exit_code=exit_code) from None


def read_small_text(path: Path, what: str, *, limit: int = MAX_FILE_BYTES, exit_code: int = USAGE) -> str | None:
    """The UTF-8 text of a regular file of at most `limit` bytes; None when it does not exist."""
    data = read_small_bytes(path, what, limit=limit, exit_code=exit_code)
    return None if data is None else _utf8(data, f"{what} {path}", exit_code)


def read_stream_text(read: Callable[[int], bytes | str], what: str, *, limit: int = MAX_FILE_BYTES, exit_code: int = USAGE) -> str:
    """The UTF-8 text of an open stream (stdin, through its `read`), read no further than `limit`.

    A stream has no size to check first: `< /dev/zero` or an endless pipe is cut at the
    limit and refused, instead of growing in memory until the kernel steps in."""
    try:
        data = read(limit + 1)
    except (OSError, ValueError, UnicodeDecodeError) as err:  # ValueError: a closed stream
        reason = getattr(err, "strerror", None) or ("not UTF-8 text" if isinstance(err, UnicodeDecodeError) else str(err))
        raise TpuctlError(f"cannot read {what}: {reason}", exit_code=exit_code) from None
    if len(data) > limit:
        raise TpuctlError(f"{what} holds more than {limit} bytes", exit_code=exit_code)
    return data if isinstance(data, str) else _utf8(data, what, exit_code, reading=True)


def tool_file(path: str, what: str, *, limit: int = MAX_FILE_BYTES) -> str:
    """`path`, checked as a regular file of at most `limit` bytes before another tool reads it.

    ssh reads its -F file with no limit of its own (`/dev/zero` grew it to 12 GB) and
    blocks on a FIFO; the file is checked here, where the refusal can be one line."""
    fd = open_regular(Path(path), what, USAGE)
    if fd is None:
        raise TpuctlError(f"{what} {path} does not exist")
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > limit:
        raise TpuctlError(f"{what} {path} is larger than {limit} bytes")
    return path


def _children(value: object) -> Iterator[object]:
    if isinstance(value, dict):
        yield from value.keys()
        yield from value.values()
    elif isinstance(value, (list, tuple)):
        yield from value


def check_data(data: object, what: str, *, max_depth: int = MAX_NESTING, exit_code: int = USAGE) -> None:
    """Parsed data (TOML, JSON) nested at most `max_depth` deep, with no NUL byte in any string.

    Walked with an explicit stack: the point is that a hostile depth must not recurse."""
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise TpuctlError(f"{what} holds a NUL byte in {shown(value)}", exit_code=exit_code)
            continue
        if isinstance(value, (dict, list, tuple)):
            if depth >= max_depth:
                raise TpuctlError(f"{what} nests deeper than {max_depth} levels", exit_code=exit_code)
            stack.extend((child, depth + 1) for child in _children(value))


# Outside JSON strings, the brackets that open and close a level; a string whole (escapes included), so that none in it count.
_LEVELS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_within(text: str, max_depth: int = MAX_NESTING) -> object:
    """json.loads(text) of a line from outside (a timeline's, a worker's message), refused with ValueError, as any text
    that is no JSON, where it nests deeper than `max_depth`: json.loads recurses once a level, and 1,500 levels (3 KB
    of `[`) raise RecursionError, which no caller catches as bad data. Counted before parsing, in one scan; a line with
    fewer brackets than that in all costs two str.count calls."""
    if text.count("[") + text.count("{") > max_depth:
        depth = 0
        for found in _LEVELS.finditer(text):
            bracket = found[0]
            depth += 1 if bracket in "[{" else -1 if bracket in "]}" else 0
            if depth > max_depth:
                raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return json.loads(text)


# A size as rsync's --max-size takes it: K, M, G, T (or KiB...) are powers of 1024, KB, MB, GB, TB powers of 1000.
_SIZE = re.compile(r"([0-9]+)(?:\.([0-9]+))?[ ]?(?:([KMGT])(i?B)?|B)?", re.ASCII | re.IGNORECASE)
_SIZE_POWERS = {"K": 1, "M": 2, "G": 3, "T": 4}
MAX_SIZE = 1 << 50  # a pebibyte: past any folder a launch copies, and a unit slip (1e9 G) is caught


def parse_size(text: str, what: str) -> int:
    """A number of bytes from text like `1 GiB`, `500M`, `1.5G`, `2GB`, `4096`: above 0 and at most a
    pebibyte; anything else (negative, nan, `1e9`, `12 parsecs`, digits past 40 characters) is one line."""
    found = _SIZE.fullmatch(text.strip()) if len(text) <= 40 else None
    if found is None:
        raise TpuctlError(f"{what} {shown(text)} is not a size", hint="e.g. 1GiB, 500M, 2GB (K, M, G, T are powers of 1024; KB, MB, GB, TB of 1000)")
    whole, fraction, unit, suffix = (group or "" for group in found.groups())
    scale = 1
    if unit:
        scale = (1000 if suffix and suffix.lower() == "b" else 1024) ** _SIZE_POWERS[unit.upper()]
    value: int = int(whole) * scale + int(fraction or "0") * scale // 10 ** len(fraction)
    if not 0 < value <= MAX_SIZE:
        raise TpuctlError(f"{what} {shown(text)} is not within 1 byte and 1 PiB")
    return value


def format_size(count: int) -> str:
    """Bytes as people read them: `3.1 MiB`, `812 bytes`."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"

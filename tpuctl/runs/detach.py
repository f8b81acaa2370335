"""A run that outlives the terminal it was started from (`launch --detach`, `babysit --detach`).

The command forks twice: the grandchild is in a session of its own, so it has no
controlling terminal (a closed terminal, a lost SSH session or a Ctrl-C there sends it
nothing), its stdin is /dev/null, and its stdout and stderr go to the run's console file
once it holds its folder. It then does exactly what the attached command does (fail-fast,
restarts, --hang-timeout, the outcome, the run's record), so everything said of an attached
run holds for it; what it starts still dies with it, SIGKILL included (reaper.py), and a
record whose supervisor died reads `lost`.

The command itself waits only until the detached process says `ready` (it holds its folder
and its record says running) or fails before that, whose one-line error it relays: the same
bad input is refused the same way, detached or not.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from tpuctl.inputs.errors import FAILED, TpuctlError

# What a detached body is handed: call it with the run's console file once the run holds its folder.
Ready = Callable[[Path], None]
_ANSWER_LIMIT = 64 * 1024
_INTERNAL = 70  # EX_SOFTWARE: the detached process failed in a way that is not a TpuctlError


def start(body: Callable[[Ready], int]) -> int:
    """Run `body` detached; return its pid once it called `ready`, or raise its error (a TpuctlError) here."""
    answer_from, answer_to = os.pipe()
    child = os.fork()
    if child == 0:  # the child: a new session, then at once the grandchild, which cannot take a terminal back
        try:
            os.close(answer_from)
            os.setsid()
            if os.fork() == 0:
                _run(body, answer_to)
        finally:
            os._exit(0)
    os.close(answer_to)
    os.waitpid(child, 0)
    answer = _read_all(answer_from)
    kind, _, rest = answer.partition(b" ")
    if kind == b"ready":
        return int(rest)
    if kind == b"error":
        raised = json.loads(rest)
        raise TpuctlError(str(raised["message"]), hint=raised["hint"], exit_code=int(raised["exit_code"]))
    raise TpuctlError("the detached run ended before it started", hint="its console file, if any, is in its log folder", exit_code=FAILED)


def _run(body: Callable[[Ready], int], answer: int) -> None:
    """The detached process: quiet until it holds its folder, then its console there. Never returns."""
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    told = False

    def ready(console: Path) -> None:
        nonlocal told
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(console, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        _say(answer, f"ready {os.getpid()}".encode())
        os.close(answer)
        told = True

    code = _INTERNAL
    try:
        code = body(ready)
    except TpuctlError as err:
        code = err.exit_code
        if not told:
            _say(answer, b"error " + json.dumps({"message": err.message, "hint": err.hint, "exit_code": err.exit_code}).encode())
        else:
            print(f"Error: {err.message}" + (f"\n  hint: {err.hint}" if err.hint else ""), file=sys.stderr)
    except SystemExit as ended:
        code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
    except BaseException:  # noqa: BLE001 - an internal error: kept in the console file for the bug report, never lost
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _say(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    size = 0
    try:
        while size < _ANSWER_LIMIT and (chunk := os.read(fd, 4096)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)

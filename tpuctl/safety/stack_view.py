"""Where each worker is: parse the workers' stack dumps and show a short view (issue 14).

When a synchronous multi-worker job hangs, the workers are usually all waiting in one
collective for the worker that is stuck elsewhere (input, a lock, a bug). Full dumps are
long (library frames, helper threads), so the console gets only the main thread's
innermost frames in the script's own code, a line for the library call it is inside, and
which workers are not where the others are.

Two formats, told apart by their thread headers:

* faulthandler (CPython Python/traceback.c, 3.11 to 3.14): ``Thread 0xHEX (most recent
  call first):`` or ``Current thread 0xHEX ...`` (3.14 puts ``[native name]`` after the
  id); frames ``  File "PATH", line N in NAME``, ``???`` where unknown; ``  <no Python
  frame>``, ``  <tstate is freed>``, ``  Garbage-collecting``; ``  ...`` after 100 frames,
  ``...`` after 100 threads. New thread states go first in the interpreter's list, so the
  main thread comes last (and is cut past 100 threads). ``Stack (most recent call
  first):`` heads a one-thread dump.
* ``py-spy dump`` 0.4: ``Thread TID (idle|active|active+gil): "NAME"``, frames
  ``    QUALNAME (FILE:LINE)``, ``(FILE)`` for native frames, locals indented deeper; FILE
  is shortened to its package part (``train.py``) unless --full-filenames.

Nothing here raises on any text: a dump is whatever a worker (or a stranger) wrote.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

SHOWN = 3  # own frames shown per worker, and compared between workers
MAX_NAMES = 8  # workers named on one line
MAX_GROUPS = 16  # distinct places shown; the rest are counted
NO_ANSWER = "no stack (the worker did not answer)"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # py-spy colours its output on a terminal
_FH_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*)\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'  File (?:"(.*)"|\?\?\?), line ([0-9]{1,9}|\?\?\?) in (.*)')
_FH_NOTES = ("  ...", "  <no Python frame>", "  <tstate is freed>", "  Garbage-collecting")
_SPY_THREAD = re.compile(r'Thread (\S+)(?: \((idle|active|active\+gil|gil)\))?(?:: "(.*)")?')
_PYLIB = re.compile(r"python[0-9]+(\.[0-9]+)?t?|site-packages|dist-packages")
_PEERS = re.compile(r"collective|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|barrier|nccl", re.IGNORECASE)
_TF_STEP = ("quick_execute", "TFE_Py_Execute", "TFE_Execute")


# The names in tpuctl's package folder: `tpuctl/NAME` in a path is tpuctl's code (its runtime wraps the script).
_TPUCTL = frozenset(p.name for p in Path(__file__).resolve().parents[1].iterdir())


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None


@dataclass(frozen=True)
class Thread:
    """One thread's stack, innermost frame first, with what the format says about it."""

    name: str
    frames: tuple[Frame, ...]
    current: bool = False  # faulthandler: the thread the dump ran on
    idle: bool | None = None  # py-spy only
    gil: bool | None = None  # py-spy only: it holds the GIL
    truncated: bool = False  # faulthandler stopped after 100 frames
    main: bool = False  # the best guess at the main thread, where the training loop runs


def parse(text: str) -> list[Thread]:
    """Every thread found in a faulthandler or py-spy dump, in dump order; [] for anything else."""
    threads: list[Thread] = []
    head: Thread | None = None
    frames: list[Frame] = []
    spy = faulthandler = False
    for line in _ANSI.sub("", text).splitlines():
        if head is not None:
            frame = _spy_frame(line) if spy else _fh_frame(line)
            if frame is not None:
                frames.append(frame)
                continue
            if not spy and line in _FH_NOTES:
                head = replace(head, truncated=head.truncated or line == "  ...")
                continue
            if spy and line.startswith("        "):
                continue  # py-spy --locals
            threads.append(replace(head, frames=tuple(frames)))
            head, frames = None, []
        if m := _FH_THREAD.fullmatch(line):
            head, spy, faulthandler = Thread(m[3] or m[2], (), current=m[1] == "Current thread"), False, True
        elif line == "Stack (most recent call first):":
            head, spy, faulthandler = Thread("Stack", (), current=True), False, True
        elif m := _SPY_THREAD.fullmatch(line):
            idle, gil = (None, None) if m[2] is None else (m[2] == "idle", "gil" in m[2])
            head, spy = Thread(m[1] if m[3] is None else m[3], (), idle=idle, gil=gil), True
    if head is not None:
        threads.append(replace(head, frames=tuple(frames)))
    return _mark_main(threads, last=faulthandler)


def _fh_frame(line: str) -> Frame | None:
    m = _FH_FRAME.fullmatch(line)
    return None if m is None else Frame(m[3], "?" if m[1] is None else m[1], None if m[2] == "???" else int(m[2]))


def _spy_frame(line: str) -> Frame | None:
    """`    NAME (FILE:LINE)`; C++ names hold parentheses and spaces, so FILE is in the last ` (`."""
    if not line.startswith("    ") or line[4:5].isspace() or not line.endswith(")"):
        return None
    body = line[4:-1]
    cut = body.rfind(" (")
    if cut <= 0:
        return None
    file, colon, number = body[cut + 2 :].rpartition(":")
    if colon and file and number.isascii() and number.isdigit() and len(number) <= 9:
        return Frame(body[:cut], file, int(number))
    return Frame(body[:cut], body[cut + 2 :], None)


def _mark_main(threads: list[Thread], last: bool) -> list[Thread]:
    """py-spy names the main thread MainThread; otherwise it is the one threading did not start
    (outermost frame not threading's _bootstrap), the last such one in faulthandler's order."""
    if not threads:
        return threads
    named = [i for i, t in enumerate(threads) if t.name == "MainThread"]
    unstarted = [i for i, t in enumerate(threads) if not (t.frames and _bare(t.frames[-1].function) == "_bootstrap")]
    pick = (named or unstarted or list(range(len(threads))))[-1 if last and not named else 0]
    return [replace(t, main=True) if i == pick else t for i, t in enumerate(threads)]


def _bare(function: str) -> str:
    """py-spy shows qualified names (Queue.get), faulthandler bare ones (get)."""
    return function if function.startswith("<") else function.rsplit(".", 1)[-1]


def _main(threads: list[Thread]) -> Thread | None:
    return next((t for t in threads if t.main), threads[0] if threads else None)


def _native(file: str) -> bool:
    return not (file.endswith((".py", ".pyw", ".pyx")) or file.startswith("<"))


def _python_first(frames: tuple[Frame, ...]) -> list[Frame]:
    """The Python frames, or the native ones where there are none (py-spy --native adds them)."""
    return [f for f in frames if not _native(f.file)] or list(frames)


def _basename(file: str) -> str:
    return file.replace("\\", "/").rsplit("/", 1)[-1]


def signature(threads: list[Thread], own: Callable[[str], bool]) -> tuple[tuple[str, str, int | None], ...]:
    """Where a worker is, comparable across workers and both formats: the main thread's innermost
    frames in the script's own code (function, file name, line), else its innermost frames."""
    main = _main(threads)
    mine = [f for f in main.frames if own(f.file)][:SHOWN] if main else []
    if mine:
        return tuple((_bare(f.function), _basename(f.file), f.line) for f in mine)
    return tuple((_bare(f.function), _basename(f.file), None) for f in _python_first(main.frames)[:SHOWN]) if main else ()


def innermost(text: str, own: Callable[[str], bool]) -> str | None:
    """The first frame the view shows for a worker: its main thread's innermost frame in the script's own
    code, else its innermost Python frame, as `function (file:line)`; None for a dump without one."""
    main = _main(parse(text))
    if main is None or not main.frames:
        return None
    return _show(next((f for f in main.frames if own(f.file)), None) or _python_first(main.frames)[0])


def _waits_on_peers(threads: list[Thread], own: Callable[[str], bool]) -> bool:
    """Inside a collective (or a TensorFlow step, where a multi-worker job waits for its peers):
    such a worker is usually the victim of a hang, not its cause."""
    main = _main(threads)
    for frame in main.frames if main else ():
        if own(frame.file):
            return False
        if _PEERS.search(frame.function) or _PEERS.search(frame.file) or frame.function in _TF_STEP:
            return True
    return False


@dataclass(frozen=True)
class Comparison:
    """Where the workers are relative to each other, computed once from their dumps: the view's marks and
    title and the hang's cause line all read this, so they cannot tell two stories (issue 30)."""

    off: tuple[str, ...]  # the workers away from the most common place: marked '!', named by the cause line
    places: int  # how many places the workers with a readable stack are at
    readable: int  # workers whose stack was read and shows a place
    answered: int  # workers that sent a dump at all
    workers: int  # workers asked


def compare(dumps: Mapping[str, str | None], own_code: Callable[[str], bool]) -> Comparison:
    """The one comparison of the workers' places (see Comparison)."""
    found = [signature(parse(text), own_code) for text in dumps.values() if text]
    readable = [place for place in found if place]
    return Comparison(tuple(differing(dumps, own_code)), len(set(readable)), len(readable), len(found), len(dumps))


def differing(dumps: Mapping[str, str | None], own_code: Callable[[str], bool]) -> list[str]:
    """The workers away from the most common place. A tie goes to the place inside a collective
    (the others wait there for the one elsewhere); with no such tie-break nobody is named.
    Workers without a stack (or with an unreadable one) do not count."""
    parsed = {name: parse(text) for name, text in dumps.items() if text}
    places = {name: place for name, threads in parsed.items() if (place := signature(threads, own_code))}
    if len(places) < 2:
        return []
    counts = Counter(places.values())
    leaders = [place for place, count in counts.items() if count == max(counts.values())]
    if len(leaders) > 1:
        leaders = list({places[n] for n in places if places[n] in leaders and _waits_on_peers(parsed[n], own_code)})
        if len(leaders) != 1:
            return []
    return [name for name, place in places.items() if place != leaders[0]]


def _where(file: str) -> str:
    """A short name for the library a Python file belongs to (tensorflow, the stdlib)."""
    parts = [p for p in file.replace("\\", "/").split("/") if p] or ["?"]
    relative = not file.startswith("/")
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages"):
            return parts[i + 1].removesuffix(".py")
    if any(_PYLIB.fullmatch(p) for p in parts[:-1]) or (relative and parts[0].removesuffix(".py") in sys.stdlib_module_names):
        return "the stdlib"
    return parts[0] if relative or len(parts) == 1 else parts[-2]


def _show(frame: Frame) -> str:
    return f"{frame.function} ({_basename(frame.file)}{'' if frame.line is None else f':{frame.line}'})"


def _body(threads: list[Thread], own: Callable[[str], bool]) -> tuple[str, ...]:
    """One worker's lines: its own frames, then the library call it is inside (and the collective)."""
    main = _main(threads)
    if main is None or not main.frames:
        return ("    (the dump could not be read)" if main is None else "    (no Python frame)",)
    mine = [f for f in main.frames if own(f.file)][:SHOWN]
    lines = [f"    {_show(f)}" for f in mine or _python_first(main.frames)[:SHOWN]]
    inner = next((f for f in main.frames if not _native(f.file)), main.frames[0])
    if mine and inner is mine[0]:  # in own Python code: name the C function it called (py-spy --native)
        inner = main.frames[main.frames.index(inner) - 1] if main.frames.index(inner) else inner
    if mine and not own(inner.file):
        above = main.frames[: main.frames.index(mine[0])]
        peers = next((f for f in reversed(above) if _PEERS.search(f.function) or _PEERS.search(f.file)), None)
        note = f", in a collective ({_bare(peers.function)})" if peers and peers is not inner else ""
        lines.append(f"    in {'native code' if _native(inner.file) else _where(inner.file)}: {_show(inner)}{note}")
    return tuple(lines)


def _state(threads: list[Thread]) -> str:
    main = _main(threads)
    if main is None or main.idle is None or main.idle:
        return ""
    return "  (running, holds the GIL)" if main.gil else "  (running)"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    return shown if len(names) <= MAX_NAMES else f"{shown} and {len(names) - MAX_NAMES} more ({len(names)} workers)"


def render(dumps: Mapping[str, str | None], own_code: Callable[[str], bool], comparison: Comparison | None = None) -> list[str]:
    """The console view. Workers at the same place are shown once (the view stays short for
    any number of workers and any dump size): those that differ from the others first,
    marked '!', then the rest, then those without a stack. `comparison`: compare()'s, when
    the caller also tells the cause line from it."""
    seen = comparison or compare(dumps, own_code)
    parsed = {name: parse(text) for name, text in dumps.items() if text}
    groups: dict[tuple[bool, str, tuple[str, ...]], list[str]] = {}
    for name, threads in parsed.items():
        groups.setdefault((name in seen.off, _state(threads), _body(threads, own_code)), []).append(name)
    silent = [name for name, text in dumps.items() if not text]
    title = f"stacks of {len(dumps)} workers"
    if len(dumps) == 1:
        title = "stack of 1 worker"
    elif seen.places == 1 and seen.readable == seen.answered > 1:
        title += f": all {'that answered ' if silent else ''}at the same place"
    elif seen.places > 1 and not seen.off:
        title += ": they differ, and no majority shows which is off"
    lines = [f"{title} (main thread, innermost first):"]
    ordered = sorted(groups.items(), key=lambda group: not group[0][0])
    for (marked, state, body), names in ordered[:MAX_GROUPS]:
        lines.append(f"{'! ' if marked else '  '}{_names(names)}{state}{'  differs from the others' if marked else ''}")
        lines.extend(body)
    if len(ordered) > MAX_GROUPS:
        rest = ordered[MAX_GROUPS:]
        lines.append(f"  ... and {sum(len(names) for _, names in rest)} more workers at {len(rest)} other places")
    if silent:
        lines.append(f"  {_names(silent)}  {NO_ANSWER}")
    return lines


def own_code_predicate(script_dir: str) -> Callable[[str], bool]:
    """Whether a frame's file is the script's own code: under the script's folder (anywhere
    when the folder is not known) and not in a Python library folder there (site-packages,
    dist-packages, pythonX.Y: a venv inside the folder) nor tpuctl itself. A relative name
    outside a relative folder is py-spy's shortened one (the package part only): own for a
    top-level module outside the stdlib, not for a package file, which cannot be told from
    a library's (`py-spy dump --full-filenames` avoids the guess)."""
    base = [p for p in script_dir.replace("\\", "/").split("/") if p not in ("", ".")]
    rooted = script_dir.startswith("/")

    def own(file: str) -> bool:
        path = file.replace("\\", "/")
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not parts or path.startswith("<") or _native(path):
            return False
        absolute = path.startswith("/")
        rest: list[str] | None = parts if absolute else None
        if base:
            starts = range(min(1, len(parts) - len(base))) if rooted else range(len(parts) - len(base))
            rest = next((parts[i + len(base) :] for i in starts if parts[i : i + len(base)] == base), None)
            rest = None if rooted and not absolute else rest
        if rest is None:
            return not absolute and len(parts) == 1 and parts[0].removesuffix(".py") not in sys.stdlib_module_names
        if any(_PYLIB.fullmatch(p) for p in rest[:-1]):
            return False
        return not any(rest[i] == "tpuctl" and rest[i + 1] in _TPUCTL for i in range(len(rest) - 1))

    return own

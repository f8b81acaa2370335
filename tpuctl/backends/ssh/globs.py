"""Globs as git's wildmatch reads them (wildmatch.c, with WM_PATHNAME), matched without backtracking.

A glob is kept as the literal bytes a match must start and end with and the tokens between them; the common
shapes (a name, `*.log`, `build/`, `logs/**`, `**/x`) need nothing more than comparing bytes, and a glob that
needs more bytes than a text has is not tried. Anything else runs as a bit-parallel automaton (Shift-And, a
self-loop for each `*`): one bit a position in the glob, each byte of the text moves all of them at once in a
few integer operations, nothing is ever retried. So a text costs time in proportion to its length and to the
glob, 64 positions a machine word, whatever the glob: wildmatch itself retries, and takes minutes on some
pairs (`a*a*a*a*a*a*a*a*a*a*a*a*a*c` on a name of 250 `a`s), as did the regular expressions tpuctl used to
build (issue 46). ignore_rules.py reads the lines of ignore files into these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_SLASH, _STAR, _BACKSLASH, _LBRACKET, _RBRACKET = b"/"[0], b"*"[0], b"\\"[0], b"["[0], b"]"[0]
_GLOB_BYTES = b"*?[\\"  # what ends a pattern's literal head (dir.c: simple_length)
_GLOB_BYTE = re.compile(rb"[*?[\\]")

# POSIX classes as wildmatch's ctype tests answer them in the C locale: ASCII only.
_ASCII = range(128)
_CLASSES: dict[bytes, frozenset[int]] = {
    b"alnum": frozenset(c for c in _ASCII if chr(c).isalnum()),
    b"alpha": frozenset(c for c in _ASCII if chr(c).isalpha()),
    b"blank": frozenset(b" \t"),
    b"cntrl": frozenset([*range(32), 127]),
    b"digit": frozenset(b"0123456789"),
    b"graph": frozenset(range(33, 127)),
    b"lower": frozenset(b"abcdefghijklmnopqrstuvwxyz"),
    b"print": frozenset(range(32, 127)),
    b"punct": frozenset(c for c in range(33, 127) if not chr(c).isalnum()),
    b"space": frozenset(b" \t\n\v\f\r"),
    b"upper": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"xdigit": frozenset(b"0123456789abcdefABCDEF"),
}
_EVERY = frozenset(range(256))
_NOT_SLASH = _EVERY - {_SLASH}
_ONE = tuple(frozenset([c]) for c in range(256))  # a literal byte, shared by every glob


@dataclass(frozen=True)
class _Loop:
    """Zero or more bytes of `members`: any but `/` for `*` (and a `**` not between slashes), any for a `**` that ends
    the glob after a slash."""

    members: frozenset[int]


@dataclass(frozen=True)
class _Dirs:
    """`**/` after a slash or at the start: no folder, or any number of them (a regular expression's `(.*/)?`)."""


_DIRS = _Dirs()
_IN_A_NAME, _ANYTHING = _Loop(_NOT_SLASH), _Loop(_EVERY)  # `*`; `**` at the end
Token = frozenset[int] | _Loop | _Dirs  # a frozenset: exactly one byte of it
Classes = dict[frozenset[int], frozenset[int]]  # one copy of each `[...]` of a file: `[!x]` is 255 bytes long


class Glob:
    """A glob as the literal bytes a match starts and ends with (`head`, `tail`) and the tokens between them."""

    __slots__ = ("_machine", "head", "middle", "shortest", "tail")

    def __init__(self, head: bytes, tail: bytes, middle: tuple[Token, ...]) -> None:
        self.head, self.tail, self.middle = head, tail, middle
        self.shortest = len(head) + len(tail) + (sum(isinstance(token, frozenset) for token in middle) if middle else 0)  # bytes a match needs
        self._machine: Automaton | None = None  # built the first time a text reaches the middle

    def matches(self, text: bytes) -> bool:
        head, tail, middle = self.head, self.tail, self.middle
        if len(text) < self.shortest or not text.startswith(head) or not text.endswith(tail):
            return False
        rest = text[len(head) : len(text) - len(tail)]
        if not middle:
            return not rest
        if len(middle) == 1:
            token = middle[0]
            if isinstance(token, _Loop):
                return token.members is _EVERY or _SLASH not in rest
            if isinstance(token, _Dirs):
                return not rest or rest.endswith(b"/")
        if self._machine is None:
            self._machine = Automaton([middle])
        return bool(self._machine.run(rest) >> self._machine.accepts[0] & 1)

    def key(self) -> tuple[bytes, bytes, tuple[Token, ...]]:
        """Equal for two globs that match the same texts as written (`a\\b` and `ab` among them)."""
        return self.head, self.tail, self.middle


class Automaton:
    """Globs run side by side as one nondeterministic automaton, its states the bits of an integer (Shift-And).

    Bit k of a glob is "its first k tokens matched". A byte moves every live bit at once: a step token's bit
    shifts up where the byte is among its members, a loop's bit stays where it is. A `**/` is a gate bit that
    opens at once onto the bit inside folders (any byte, `/` leaves it) and the bit after it. So a name costs
    a few integer operations a byte, whatever the globs hold: there is nothing to backtrack."""

    def __init__(self, globs: Sequence[Sequence[Token]]) -> None:
        steps: dict[frozenset[int], int] = {}
        loops: dict[frozenset[int], int] = {}
        start = gates = bit = 0
        self.accepts: list[int] = []  # each glob's last bit, in the order given
        for tokens in globs:
            start |= 1 << bit
            for token in tokens:
                if isinstance(token, _Loop):
                    loops[token.members] = loops.get(token.members, 0) | 1 << bit
                elif isinstance(token, _Dirs):
                    gates |= 1 << bit
                    loops[_EVERY] = loops.get(_EVERY, 0) | 2 << bit
                    steps[_ONE[_SLASH]] = steps.get(_ONE[_SLASH], 0) | 2 << bit
                    bit += 2
                else:
                    steps[token] = steps.get(token, 0) | 1 << bit
                    bit += 1
            self.accepts.append(bit)
            bit += 1
        self._steps, self._loops, self._gates = _table(steps), _table(loops), gates
        opened = start & gates
        self.start = start | opened << 1 | opened << 2

    def run(self, text: bytes) -> int:
        """The bits live after `text`: glob i matched it if its accept bit is among them."""
        steps, loops, gates = self._steps, self._loops, self._gates
        state = self.start
        for byte in text:
            state = (state & steps[byte]) << 1 | state & loops[byte]
            if not state:
                return 0
            if gates:
                opened = state & gates
                state |= opened << 1 | opened << 2
        return state


def _table(masks: dict[frozenset[int], int]) -> list[int]:
    """For each byte, the bits of every token that takes it."""
    table = [0] * 256
    for members, mask in masks.items():
        for byte in members:
            table[byte] |= mask
    return table


def read_glob(pattern: bytes, pathname: bool, classes: Classes) -> Glob | None:
    """The glob in `pattern`, or None where wildmatch gives up on it (a trailing `\\`, an open `[`, an unknown class).
    `pathname`: matched as match_pathname does, its literal head compared before wildmatch sees the rest, so that
    a `**` right after that head is at a start (`a**/x` matches `ab/x` and `a/b/x`)."""
    if _GLOB_BYTE.search(pattern) is None:  # a plain name or path: the common case, no tokens
        return Glob(pattern, b"", ())
    tokens = _tokens(pattern, _literal_head(pattern) if pathname else 0, classes)
    return None if tokens is None else _split(tokens)


def _literal_head(pattern: bytes) -> int:
    """How many bytes start the pattern before its first glob character (dir.c's simple_length)."""
    return next((i for i, char in enumerate(pattern) if char in _GLOB_BYTES), len(pattern))


def _split(tokens: list[Token]) -> Glob:
    """The glob with its literal ends taken out: what a name must start and end with, compared as bytes."""
    first = next((i for i, token in enumerate(tokens) if not _literal(token)), len(tokens))
    last = next((i for i in range(len(tokens), first, -1) if not _literal(tokens[i - 1])), first)
    return Glob(_bytes(tokens[:first]), _bytes(tokens[last:]), tuple(tokens[first:last]))


def _literal(token: Token) -> bool:
    return isinstance(token, frozenset) and len(token) == 1


def _bytes(tokens: list[Token]) -> bytes:
    return bytes(min(token) for token in tokens if isinstance(token, frozenset))


def _tokens(pattern: bytes, start: int, classes: Classes) -> list[Token] | None:
    """The glob as wildmatch reads it, or None where wildmatch gives up on it (a trailing `\\`, an open `[`, an
    unknown class). `start`: where wildmatch's pattern begins (match_pathname compares the literal head before it
    and hands wildmatch the rest), which decides whether a `**` right after the head is at a start."""
    out: list[Token] = []
    i, end = 0, len(pattern)
    while i < end:
        char = pattern[i]
        if char == _BACKSLASH:
            if i + 1 == end:
                return None
            out.append(_ONE[pattern[i + 1]])
            i += 2
        elif char == _STAR:
            stars = i
            while i < end and pattern[i] == _STAR:
                i += 1
            after_slash = stars == start or pattern[stars - 1] == _SLASH
            before_slash = i == end or pattern[i] == _SLASH or pattern[i : i + 2] == b"\\/"
            if i - stars < 2 or not (after_slash and before_slash):
                out.append(_IN_A_NAME)
            elif i < end and pattern[i] == _SLASH:
                if not out or out[-1] != _DIRS:  # `**/**/` is `**/`: one gate, however many are written
                    out.append(_DIRS)
                i += 1
            else:
                out.append(_ANYTHING)
        elif char == b"?"[0]:
            out.append(_NOT_SLASH)
            i += 1
        elif char == _LBRACKET:
            found = _bracket(pattern, i + 1)
            if found is None:
                return None
            members, i = found
            out.append(classes.setdefault(members - {_SLASH}, members - {_SLASH}))
        else:
            out.append(_ONE[char])
            i += 1
    return out


def _bracket(pattern: bytes, i: int) -> tuple[frozenset[int], int] | None:
    """The bytes a `[...]` starting at `i` (just past `[`) matches, and where the glob goes on; None when
    it never closes or names an unknown class. A first `]` is a member; `!` or `^` first negates."""
    end = len(pattern)
    negated = i < end and pattern[i] in b"!^"
    i += negated
    members: set[int] = set()
    previous = 0  # the last single member, the start of a range; 0 after a range or a class
    first = True
    while True:
        if i >= end:
            return None
        char = pattern[i]
        if char == _RBRACKET and not first:
            break
        first = False
        if char == _BACKSLASH:
            i += 1
            if i >= end:
                return None
            previous = pattern[i]
            members.add(previous)
        elif char == b"-"[0] and previous and i + 1 < end and pattern[i + 1] != _RBRACKET:
            i += 1
            if pattern[i] == _BACKSLASH:
                i += 1
                if i >= end:
                    return None
            members.update(range(previous, pattern[i] + 1))
            previous = 0
        elif char == _LBRACKET and pattern[i + 1 : i + 2] == b":":
            close = pattern.find(b"]", i + 2)
            if close < 0:
                return None
            if close - (i + 2) - 1 < 0 or pattern[close - 1] != b":"[0]:
                members.add(_LBRACKET)  # no `:]`: the `[` is a member, and what follows is read as members
                previous = _LBRACKET
            else:
                named = _CLASSES.get(pattern[i + 2 : close - 1])
                if named is None:
                    return None
                members.update(named)
                previous = 0
                i = close
        else:
            previous = char
            members.add(char)
        i += 1
    chosen = _EVERY - members if negated else frozenset(members)
    return chosen, i + 1


def literal_runs(tokens: Sequence[Token]) -> list[bytes]:
    """The literal bytes between the glob's other tokens: each must appear, whole, in a text it matches."""
    runs, run = [], bytearray()
    for token in tokens:
        if isinstance(token, frozenset) and len(token) == 1:
            run.append(min(token))
        elif run:
            runs.append(bytes(run))
            run.clear()
    return [*runs, bytes(run)] if run else runs

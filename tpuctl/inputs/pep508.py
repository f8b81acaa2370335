"""A dependency specifier as pip reads one line of a requirements file: a project name, extras, version specifiers and
an environment marker (PEP 508, https://peps.python.org/pep-0508/; versions as the version specifiers specification
writes them, https://packaging.python.org/en/latest/specifications/version-specifiers/).

tpuctl does not depend on `packaging`, so this reads the forms the specifications define, strictly, and refuses the
rest with the reason (a URL requirement, a marker variable that is only an alias some readers tolerate, a version no
PEP 440 reader takes): a line whose meaning is guessed here could mean something else to the hosts' pip. What is
read is checked, not rebuilt: the text pip gets is the user's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

# PEP 508 `identifier`: letters and digits at both ends, `-`, `_` and `.` between.
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_OP = re.compile(r"[ \t]*(===|~=|==|!=|<=|>=|<|>)[ \t]*")  # longest first: `===` is not `==` and `=`
# PEP 440's public version, as the specification's appendix spells it: epoch, release, pre, post, dev (and `v`).
_RELEASE = r"[0-9]+(?:\.[0-9]+)*"
_TAIL = r"(?:[-_.]?(?:alpha|beta|preview|pre|a|b|c|rc)[-_.]?[0-9]*)?(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?(?:[-_.]?dev[-_.]?[0-9]*)?"
_LOCAL = r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?"
# What each operator takes: a prefix match (`==1.2.*`) and a local label only with == and !=; ~= needs two release parts.
_VERSIONS = {
    "==": re.compile(rf"v?(?:[0-9]+!)?(?:{_RELEASE}\.\*|{_RELEASE}{_TAIL}{_LOCAL})", re.IGNORECASE),
    "~=": re.compile(rf"v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+{_TAIL}", re.IGNORECASE),
    "<": re.compile(rf"v?(?:[0-9]+!)?{_RELEASE}{_TAIL}", re.IGNORECASE),
}
_VERSIONS["!="] = _VERSIONS["=="]
_VERSIONS.update(dict.fromkeys(("<=", ">=", ">"), _VERSIONS["<"]))
_ARBITRARY = re.compile(r"[^\s;,()]+")  # `===`: compared as a string, never read as a version
MAX_VERSION = 100  # characters: past any real version, and every match above stays linear

# The marker variables PEP 508 defines (packaging also reads dotted aliases, `os.name`; old pips do not).
VARIABLES = frozenset(
    {
        "python_version", "python_full_version", "os_name", "sys_platform", "platform_release", "platform_system",
        "platform_version", "platform_machine", "platform_python_implementation", "implementation_name",
        "implementation_version", "extra",
    }
)  # fmt: skip
# A quoted string holds PEP 508's `python_str_c` characters and the other quote.
_TOKEN = re.compile(
    r"""\s*(?:(?P<paren>[()])|(?P<string>'[\w\s(){}.\-*#:;,/?\[\]!~`@$%^&=+|<>"]*'|"[\w\s(){}.\-*#:;,/?\[\]!~`@$%^&=+|<>']*")"""
    r"""|(?P<op>===|==|!=|<=|>=|~=|<|>)|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))""",
    re.ASCII,
)
MAX_NESTING = 16  # parentheses in a marker: more than any real one, few enough for the recursion below


class Invalid(ValueError):
    """Why a line is no dependency specifier, in words a message can end with."""


@dataclass(frozen=True)
class Compare:
    """`left op right`, each side a marker variable's name or a quoted string (`quoted` says which)."""

    left: str
    op: str
    right: str
    quoted: tuple[bool, bool]


@dataclass(frozen=True)
class Either:
    """`and` (all) or `or` (any) of its parts."""

    all: bool
    parts: tuple[Marker, ...]


Marker: TypeAlias = Compare | Either


@dataclass(frozen=True)
class Spec:
    name: str
    extras: tuple[str, ...]  # normalized (PEP 685)
    specifiers: tuple[tuple[str, str], ...]  # (operator, version)
    marker: Marker | None


def normalize(name: str) -> str:
    """A project or extra name as PEP 503 (and PEP 685, for extras) compares them: `Keras_Hub` is `keras-hub`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str) -> Spec:
    """`text` (a requirement, its comment and options already gone) read as PEP 508 without a URL; Invalid says why not.
    The marker is split off at the first `;`, as pip does for a requirement that is not a URL."""
    body, semicolon, marker_text = text.partition(";")
    body = body.strip(" \t")
    found = NAME.match(body)
    if found is None:
        raise Invalid("it names no project")
    rest = body[found.end() :].lstrip(" \t")
    extras: tuple[str, ...] = ()
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise Invalid("its extras' [ is never closed")
        extras = _extras(rest[1:close])
        rest = rest[close + 1 :].lstrip(" \t")
    if rest.startswith("@"):
        raise Invalid("it is a URL requirement (NAME @ URL)")
    marker = _marker(marker_text) if semicolon else None
    return Spec(found.group(), extras, _specifiers(rest), marker)


def _extras(text: str) -> tuple[str, ...]:
    names = [part.strip(" \t") for part in text.split(",")] if text.strip(" \t") else []
    for name in names:
        if not NAME.fullmatch(name):
            raise Invalid(f"{name!r} is not an extra's name")
    return tuple(normalize(name) for name in names)


def _specifiers(text: str) -> tuple[tuple[str, str], ...]:
    """`>=1.0, <2` (or `(>=1.0, <2)`): each clause an operator and a version that operator takes."""
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    if not text.strip(" \t"):
        return ()
    clauses = []
    for clause in text.split(","):
        found = _OP.match(clause)
        if found is None:
            raise Invalid(f"{clause.strip()!r} is not a version specifier (an operator such as >=, then a version)")
        op, version = found.group(1), clause[found.end() :].rstrip(" \t")
        pattern = _ARBITRARY if op == "===" else _VERSIONS[op]
        if len(version) > MAX_VERSION or not pattern.fullmatch(version):
            raise Invalid(f"{op}{version!r} is not a version {op} takes" if version else f"{op} has no version")
        clauses.append((op, version))
    return tuple(clauses)


def _marker(text: str) -> Marker:
    tokens = _tokens(text)
    if not tokens:
        raise Invalid("its marker after ; is empty")
    reader = _Reader(tokens)
    marker = reader.either(0)
    if reader.at < len(tokens):
        raise Invalid(f"its marker cannot be read at {tokens[reader.at][1]!r}")
    return marker


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) for each token; anything that is none of PEP 508's tokens is Invalid."""
    tokens = []
    at, end = 0, len(text.rstrip())
    while at < end:
        found = _TOKEN.match(text, at)
        if found is None or found.lastgroup is None:
            raise Invalid(f"its marker cannot be read at {text[at:].strip()[:20]!r}")
        tokens.append((found.lastgroup, found.group(found.lastgroup)))
        at = found.end()
    return tokens


class _Reader:
    """PEP 508's marker grammar over a token list: or of ands of comparisons or parenthesised markers."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "the end")

    def either(self, depth: int) -> Marker:
        """An `or` of `and`s (`and` binds tighter, as in PEP 508), each of comparisons or parenthesised markers."""
        return self._joined("or", lambda: self._joined("and", lambda: self.one(depth)))

    def _joined(self, word: str, part: Callable[[], Marker]) -> Marker:
        parts = [part()]
        while self._peek() == ("word", word):
            self.at += 1
            parts.append(part())
        return parts[0] if len(parts) == 1 else Either(word == "and", tuple(parts))

    def one(self, depth: int) -> Marker:
        if self._peek() == ("paren", "("):
            if depth >= MAX_NESTING:
                raise Invalid(f"its marker nests deeper than {MAX_NESTING} parentheses")
            self.at += 1
            inner = self.either(depth + 1)
            if self._peek() != ("paren", ")"):
                raise Invalid(f"its marker has a ( closed by {self._peek()[1]!r}")
            self.at += 1
            return inner
        left, left_quoted = self._value()
        op = self._op()
        right, right_quoted = self._value()
        return Compare(left, op, right, (left_quoted, right_quoted))

    def _value(self) -> tuple[str, bool]:
        kind, text = self._peek()
        self.at += 1
        if kind == "string":
            return text[1:-1], True
        if kind == "word" and text in VARIABLES:
            return text, False
        raise Invalid(f"its marker has {text!r} where a marker variable (PEP 508 names them) or a quoted string goes")

    def _op(self) -> str:
        kind, text = self._peek()
        self.at += 1
        if kind == "op" or (kind == "word" and text == "in"):
            return text
        if (kind, text) == ("word", "not") and self._peek() == ("word", "in"):
            self.at += 1
            return "not in"
        raise Invalid(f"its marker has {text!r} where a comparison (==, <, in, not in ...) goes")


def holds(marker: Marker, known: Mapping[str, str]) -> bool | None:
    """Whether `marker` holds where the variables in `known` have those values: True, False, or None where it depends
    on one that is not known (three-valued: `and` is False when any part is, `or` True when any part is). Only string
    comparisons (==, !=, in, not in) of known values are decided; versions are left to pip."""
    if isinstance(marker, Either):
        results = [holds(part, known) for part in marker.parts]
        decisive = not marker.all  # `or` is decided by a True part, `and` by a False one
        if decisive in results:
            return decisive
        return None if None in results else not decisive
    left = marker.left if marker.quoted[0] else known.get(marker.left)
    right = marker.right if marker.quoted[1] else known.get(marker.right)
    if left is None or right is None or marker.op not in ("==", "!=", "in", "not in"):
        return None
    return {"==": left == right, "!=": left != right, "in": left in right, "not in": left not in right}[marker.op]


"""gitignore rules, read the way git reads them, for a folder git cannot list (not a checkout, or no git).

In a git checkout `selection.py` asks git itself. Elsewhere this module walks the folder and applies
every `.gitignore` and `.tpuctlignore` on the way down with git's semantics, as git's own code has them
(dir.c: add_patterns_from_buffer, trim_trailing_spaces, parse_path_pattern, match_basename,
match_pathname, last_matching_pattern_from_list; wildmatch.c for the globs), byte for byte:

- a line is a pattern unless empty or starting with `#`; unescaped trailing spaces go, a CR before
  the newline goes, a UTF-8 byte-order mark at the start of the file goes;
- `!` negates, `\\` escapes (`\\#`, `\\!`, `\\ `), a trailing `/` matches directories only;
- a pattern without `/` (a trailing one aside) matches a name at any depth; with one it is anchored
  to the folder of the file it is in (a leading `/` only anchors);
- `*`, `?` and `[...]` never match `/`; `**` between slashes (or at either end) matches any depth; a
  pattern with a `/` is matched as its literal head, then the rest as a glob of its own (match_pathname), so
  `**` right after that head counts as at its start (`/a**/x` matches `ab/x` and `a/b/x`);
- the deepest file with a matching line decides, and within a file its last matching line;
- an excluded directory is not entered, so nothing under it can be re-included.

The two kinds of file are separate rule sets, as the two `git ls-files` calls of a checkout are:
a path is left out when either excludes it. tests/unit/test_ssh_sync_rules.py checks this against
real git on generated trees.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

IGNORE_FILES = (".gitignore", ".tpuctlignore")
_MAX_RULES_BYTES = 100 << 20  # git refuses a larger pattern file (PATTERN_MAX_FILE_SIZE)
_SLASH, _STAR, _BACKSLASH, _LBRACKET, _RBRACKET = b"/"[0], b"*"[0], b"\\"[0], b"["[0], b"]"[0]

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


@dataclass(frozen=True)
class Rule:
    """One pattern line: `base` is the folder of its file ("" at the top, else ending in "/")."""

    base: bytes
    regex: re.Pattern[bytes] | None  # None: a glob git can never match (a trailing `\\`, an open `[`)
    negative: bool
    directories_only: bool
    basename: bool  # no `/` in it: matched against the last path component at any depth

    def matches(self, path: bytes, is_dir: bool) -> bool:
        if self.regex is None or (self.directories_only and not is_dir):
            return False
        if self.basename:
            return self.regex.match(path.rsplit(b"/", 1)[-1]) is not None
        return path.startswith(self.base) and self.regex.match(path[len(self.base) :]) is not None


def parse(text: bytes, base: bytes) -> list[Rule]:
    """The rules of one ignore file in `base`, in file order."""
    text = text.removeprefix(b"\xef\xbb\xbf")
    rules = []
    for line in text.split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        rules.append(_rule(_trim_spaces(line.removesuffix(b"\r")), base))
    return rules


def _trim_spaces(line: bytes) -> bytes:
    """Trailing spaces go unless escaped; a line ending in a lone backslash keeps its spaces (git does)."""
    cut: int | None = None
    i = 0
    while i < len(line):
        if line[i] == b" "[0]:
            cut = i if cut is None else cut
        elif line[i] == _BACKSLASH:
            i += 1
            if i == len(line):
                return line
            cut = None
        else:
            cut = None
        i += 1
    return line if cut is None else line[:cut]


def _rule(line: bytes, base: bytes) -> Rule:
    negative = line.startswith(b"!")
    pattern = line[1:] if negative else line
    directories_only = pattern.endswith(b"/")
    pattern = pattern[:-1] if directories_only else pattern
    basename = b"/" not in pattern
    anchored = pattern[1:] if pattern.startswith(b"/") else pattern
    return Rule(base, _glob(anchored, 0 if basename else _literal_head(anchored)), negative, directories_only, basename)


def _literal_head(pattern: bytes) -> int:
    """How many bytes start the pattern before its first glob character (dir.c's simple_length)."""
    return next((i for i, char in enumerate(pattern) if char in b"*?[\\"), len(pattern))


def _glob(pattern: bytes, start: int = 0) -> re.Pattern[bytes] | None:
    """The glob as a regular expression over bytes, or None where wildmatch gives up on it. `start`: where wildmatch's
    pattern begins (match_pathname compares the literal head before it and hands wildmatch the rest)."""
    out: list[bytes] = []
    i, end = 0, len(pattern)
    while i < end:
        char = pattern[i]
        if char == _BACKSLASH:
            if i + 1 == end:
                return None
            out.append(_byte(pattern[i + 1]))
            i += 2
        elif char == _STAR:
            stars = i
            while i < end and pattern[i] == _STAR:
                i += 1
            after_slash = stars == start or pattern[stars - 1] == _SLASH
            before_slash = i == end or pattern[i] == _SLASH or pattern[i : i + 2] == b"\\/"
            if i - stars < 2 or not (after_slash and before_slash):
                out.append(b"[^/]*")
            elif i < end and pattern[i] == _SLASH:
                out.append(b"(?:.*/)?")  # `**/`: no folder, or any number of them
                i += 1
            else:
                out.append(b".*")
        elif char == b"?"[0]:
            out.append(b"[^/]")
            i += 1
        elif char == _LBRACKET:
            found = _bracket(pattern, i + 1)
            if found is None:
                return None
            members, i = found
            out.append(b"[" + b"".join(_byte(c) for c in sorted(members - {_SLASH})) + b"]" if members - {_SLASH} else b"(?!)")
        else:
            out.append(_byte(char))
            i += 1
    return re.compile(b"".join(out) + b"\\Z", re.DOTALL)


def _byte(value: int) -> bytes:
    return b"\\x%02x" % value


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
    chosen = frozenset(range(256)) - members if negated else frozenset(members)
    return chosen, i + 1


def excluded(stack: list[list[Rule]], path: bytes, is_dir: bool) -> bool:
    """git's verdict for `path` under the rule files of its folders (top first): the deepest file with a
    matching line decides, by its last matching line."""
    for rules in reversed(stack):
        for rule in reversed(rules):
            if rule.matches(path, is_dir):
                return not rule.negative
    return False


def walk(folder: str) -> Iterator[str]:
    """Every path under `folder` (relative, `/`-separated) that neither kind of ignore file excludes and that
    is not a directory; symbolic links are listed, never followed, as git lists them."""
    yield from _walk(os.fsencode(folder), b"", [[] for _ in IGNORE_FILES])


def _walk(top: bytes, relative: bytes, stacks: list[list[list[Rule]]]) -> Iterator[str]:
    here = os.path.join(top, relative) if relative else top
    base = relative + b"/" if relative else b""
    stacks = [[*stack, _read_rules(os.path.join(here, os.fsencode(name)), base)] for stack, name in zip(stacks, IGNORE_FILES, strict=True)]
    try:
        entries = sorted(os.scandir(here), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        if entry.name == b".git":  # git never lists it, file or folder (dir.c: treat_path)
            continue
        path = base + entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if any(excluded(stack, path, is_dir) for stack in stacks):
            continue
        if is_dir:
            yield from _walk(top, path, stacks)
        else:
            yield os.fsdecode(path)


def _read_rules(path: bytes, base: bytes) -> list[Rule]:
    """An ignore file's rules; none when it is missing, unreadable, too big, or a symbolic link (git does not
    follow one in the tree: PATTERN_NOFOLLOW)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_RULES_BYTES:
            return []
        return parse(handle.read(_MAX_RULES_BYTES), base)

"""gitignore rules, read the way git reads them, for a folder git cannot list (not a checkout, or no git).

In a git checkout `selection.py` asks git itself. Elsewhere this module walks the folder and applies
every `.gitignore` and `.tpuctlignore` on the way down with git's semantics, as git's own code has them
(dir.c: add_patterns_from_buffer, trim_trailing_spaces, parse_path_pattern, match_basename,
match_pathname, last_matching_pattern_from_list; wildmatch.c for the globs), byte for byte:

- a line is a pattern unless empty or starting with `#`; unescaped trailing spaces go, a CR before
  the newline goes, a UTF-8 byte-order mark at the start of the file goes, a NUL ends the line (git
  reads each line as a C string);
- `!` negates, `\\` escapes (`\\#`, `\\!`, `\\ `), a trailing `/` matches directories only;
- a pattern without `/` (a trailing one aside) matches a name at any depth; with one it is anchored
  to the folder of the file it is in (a leading `/` only anchors);
- `*`, `?` and `[...]` never match `/`; `**` between slashes (or at either end) matches any depth; a
  pattern with a `/` is matched as its literal head, then the rest as a glob of its own (match_pathname), so
  `**` right after that head counts as at its start (`/a**/x` matches `ab/x` and `a/b/x`);
- the deepest file with a matching line decides, and within a file its last matching line;
- an excluded directory is not entered, so nothing under it can be re-included.

The two kinds of file are separate rule sets, as the two `git ls-files` calls of a checkout are:
a path is left out when either excludes it. tests/unit/test_ssh_sync_rules.py and
tests/unit/test_sync_ignore_hostile.py check this against real git.

Whatever the patterns and however many, nothing is retried (issue 46: the regular expressions this module used
to build backtracked: `**/**/**/**/x` took minutes, `*a*a*a*a*a*a*a*a*a*a*a*a*b` on a long name never ended,
10,000 rules over 10,000 files took 88-164 s where git takes 2 s). Each glob is matched as globs.py says, in
time proportional to the text and the glob; a file's rules are indexed by literal bytes a match must hold (its
whole text, its start, its end, or a run inside it), so that a name meets only the rules it could match, found
by slicing it; rules with no literal byte at all (`*`, `?*.[ch]`) run a few hundred at a time as one automaton;
a line written again is kept once.

The walk is a loop over a stack of folders (a folder thousands deep is no recursion), opens each folder
without following a link, and enters a folder once (a bind mount that loops back is seen by its device
and inode).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tpuctl.backends.ssh.globs import Automaton, Classes, Glob, literal_runs, read_glob

IGNORE_FILES = (".gitignore", ".tpuctlignore")
_MAX_RULES_BYTES = 100 << 20  # git refuses a larger pattern file (PATTERN_MAX_FILE_SIZE)
_HASH, _SPACE, _BACKSLASH = b"#"[0], b" "[0], b"\\"[0]
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_OPEN_RULES = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PACK_BITS = 4096  # globs with no literal byte run together, this many states to an automaton
_SHELF_KEY = 8  # bytes of a literal run inside a glob that file it: a few lengths to slide over a name, yet selective


class Rule(NamedTuple):
    """One pattern line that can match something (a glob git gives up on, such as an open `[`, is dropped)."""

    glob: Glob
    negative: bool
    directories_only: bool
    basename: bool  # no `/` in it: matched against the last path component at any depth


def parse(text: bytes) -> list[Rule]:
    """The rules of one ignore file, in file order."""
    text = text.removeprefix(b"\xef\xbb\xbf")
    rules = []
    classes: Classes = {}
    for line in text.split(b"\n"):
        if not line or line[0] == _HASH:
            continue
        line = line.removesuffix(b"\r")
        if b"\0" in line:
            line = line[: line.index(b"\0")]
        rule = _rule(_trim_spaces(line), classes)
        if rule is not None:
            rules.append(rule)
    return rules


def _trim_spaces(line: bytes) -> bytes:
    """Trailing spaces go unless escaped; a line ending in a lone backslash keeps its spaces (git does)."""
    if _BACKSLASH not in line:
        return line.rstrip(b" ")
    cut: int | None = None
    i = 0
    while i < len(line):
        if line[i] == _SPACE:
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


def _rule(line: bytes, classes: Classes) -> Rule | None:
    negative = line.startswith(b"!")
    pattern = line[1:] if negative else line
    directories_only = pattern.endswith(b"/")
    pattern = pattern[:-1] if directories_only else pattern
    basename = b"/" not in pattern
    glob = read_glob(pattern[1:] if pattern.startswith(b"/") else pattern, not basename, classes)
    return None if glob is None else Rule(glob, negative, directories_only, basename)


class _Index:
    """The rules of one file that may match one text (a name, or a path from the file's folder), found without
    trying each. A rule is filed under the most telling literal bytes a match must hold: the whole text (a plain
    name or path), its start, its end, or a run inside it (`runs/**/cfg-12.*` under `/cfg-12.`), reached by
    slicing the text at those lengths; a rule with no literal byte runs in one automaton with the others like it.
    Candidates are tried from the last, and only those after the best match so far."""

    def __init__(self, rules: Sequence[tuple[int, Rule]]) -> None:
        self._exact: tuple[dict[bytes, int], dict[bytes, int]] = ({}, {})  # a plain name or path: for all, for folders
        shelves: tuple[dict[int, dict[bytes, list[tuple[int, Rule]]]], ...] = ({}, {}, {})  # heads, tails, inside
        rest: list[tuple[int, Rule]] = []
        for index, rule in reversed(rules):
            glob = rule.glob
            if not glob.middle and not glob.tail:  # one at most for each text and kind: RuleFile keeps a line's last copy
                self._exact[rule.directories_only][glob.head] = index
                continue
            inside = max(literal_runs(glob.middle), key=len, default=b"")[:_SHELF_KEY]
            shelf, key = max(enumerate((glob.head, glob.tail, inside)), key=lambda item: (len(item[1]), -item[0]))
            if key:
                shelves[shelf].setdefault(len(key), {}).setdefault(key, []).append((index, rule))
            else:
                rest.append((index, rule))
        self._heads, self._tails, self._inside = (sorted(shelf.items()) for shelf in shelves)
        self._packs = [_Pack(pack[::-1]) for pack in _packed(rest)]  # the last rules first

    def last(self, text: bytes, is_dir: bool, best: int) -> int:
        """The index of the last rule matching `text`, or `best` where none after it does."""
        size = len(text)
        best = max(best, self._exact[False].get(text, -1), self._exact[True].get(text, -1) if is_dir else -1)
        for length, keyed in self._heads:
            if length > size:
                break
            best = _last_of(keyed.get(text[:length], ()), text, is_dir, best)
        for length, keyed in self._tails:
            if length > size:
                break
            best = _last_of(keyed.get(text[size - length :], ()), text, is_dir, best)
        for length, keyed in self._inside:
            if length > size:
                break
            if len(keyed) <= size - length:  # fewer keys than places: look for each key (in C)
                found = [candidates for key, candidates in keyed.items() if key in text]
            else:
                found = [keyed[piece] for piece in {text[at : at + length] for at in range(size - length + 1)} if piece in keyed]
            for candidates in found:
                best = _last_of(candidates, text, is_dir, best)
        for pack in self._packs:
            if pack.last <= best:
                break
            if size >= pack.shortest:
                best = max(best, pack.match(text, is_dir))
        return best


def _packed(rules: list[tuple[int, Rule]]) -> Iterator[list[tuple[int, Rule]]]:
    """The rules in runs of at most _PACK_BITS states (a glob longer than that alone): integers that stay small."""
    pack: list[tuple[int, Rule]] = []
    bits = 0
    for index, rule in rules:
        size = len(rule.glob.middle) * 2 + 1  # at most: a `**/` takes two states
        if pack and bits + size > _PACK_BITS:
            yield pack
            pack, bits = [], 0
        pack.append((index, rule))
        bits += size
    if pack:
        yield pack


class _Pack:
    """Rules with no literal byte to file them under (`*`, `?*.[ch]`, `**/[ab]*/`), run as one automaton: a text
    costs about the same for one of them or a few hundred (the bits of one integer); packs of them keep the integers
    small, stop as soon as none of a pack's globs can match, and let a match in a later pack skip the earlier."""

    def __init__(self, rules: Sequence[tuple[int, Rule]]) -> None:  # in file order
        self.machine = Automaton([rule.glob.middle for _, rule in rules])
        self.last = rules[-1][0]
        self.shortest = min(rule.glob.shortest for _, rule in rules)  # a shorter text matches none of them
        self._rules = {bit: index for bit, (index, _) in zip(self.machine.accepts, rules, strict=True)}
        self._files = sum(1 << bit for bit, (_, rule) in zip(self.machine.accepts, rules, strict=True) if not rule.directories_only)
        self._any = sum(1 << bit for bit in self.machine.accepts)

    def match(self, text: bytes, is_dir: bool) -> int:
        """The index of the last of the pack's rules that matches `text`, or -1."""
        matched = self.machine.run(text) & (self._any if is_dir else self._files)
        return self._rules[matched.bit_length() - 1] if matched else -1


def _last_of(candidates: Sequence[tuple[int, Rule]], text: bytes, is_dir: bool, best: int) -> int:
    for index, rule in candidates:  # the last first
        if index <= best:
            break
        if (is_dir or not rule.directories_only) and rule.glob.matches(text):
            return index
    return best


class RuleFile:
    """One ignore file's rules, by the folder it sits in (`base`: "" at the top, else ending in "/")."""

    def __init__(self, rules: list[Rule], base: bytes) -> None:
        self.base = base
        self._rules = rules
        # A line written again later always loses to its repeat (`!` or not), so only the last of each is kept.
        last = {(*rule.glob.key(), rule.directories_only, rule.basename): index for index, rule in enumerate(rules)}
        kept = [(index, rules[index]) for index in sorted(last.values())]
        self._names = _Index([(index, rule) for index, rule in kept if rule.basename])
        self._paths = _Index([(index, rule) for index, rule in kept if not rule.basename])

    def last_match(self, path: bytes, is_dir: bool) -> Rule | None:
        """The line of this file that decides for `path` (under `base`): its last matching one, if any."""
        relative = path[len(self.base) :]
        best = self._names.last(relative.rpartition(b"/")[2], is_dir, -1)
        best = self._paths.last(relative, is_dir, best)
        return self._rules[best] if best >= 0 else None


@dataclass(frozen=True)
class _Frame:
    """A folder's rule file of one kind, and the nearest folder above it that has one."""

    rules: RuleFile
    parent: _Frame | None


def excluded(frame: _Frame | None, path: bytes, is_dir: bool) -> bool:
    """git's verdict for `path` under the rule files of its folders (the deepest first): the deepest file with a
    matching line decides, by its last matching line."""
    while frame is not None:
        rule = frame.rules.last_match(path, is_dir)
        if rule is not None:
            return not rule.negative
        frame = frame.parent
    return False


def walk(folder: str) -> Iterator[str]:
    """Every path under `folder` (relative, `/`-separated) that neither kind of ignore file excludes and that
    is not a directory; symbolic links are listed, never followed, as git lists them."""
    top = os.fsencode(folder)
    pending: list[tuple[bytes, tuple[_Frame | None, ...]]] = [(b"", (None,) * len(IGNORE_FILES))]
    entered: set[tuple[int, int]] = set()
    while pending:
        relative, frames = pending.pop()
        listed = _list(top, relative, entered)
        if listed is None:
            continue
        base = relative + b"/" if relative else b""
        texts, entries = listed
        frames = tuple(_Frame(RuleFile(rules, base), frame) if rules else frame for frame, rules in zip(frames, map(parse, texts), strict=True))
        folders = []
        for name, is_dir in entries:
            path = base + name
            if any(excluded(frame, path, is_dir) for frame in frames):
                continue
            if is_dir:
                folders.append(path)
            else:
                yield os.fsdecode(path)
        pending.extend((path, frames) for path in reversed(folders))


def _list(top: bytes, relative: bytes, entered: set[tuple[int, int]]) -> tuple[list[bytes], list[tuple[bytes, bool]]] | None:
    """A folder's ignore files' text (empty where there is none) and its entries (name, is a directory), sorted, without `.git`
    (git never lists it, file or folder: dir.c's treat_path); None when it cannot be opened, is a link (below the
    top), or was entered before."""
    try:
        fd = os.open(os.path.join(top, relative) if relative else top, _OPEN_DIRECTORY | (os.O_NOFOLLOW if relative else 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) in entered:
            return None
        entered.add((info.st_dev, info.st_ino))
        texts = [_read_rules(name, fd) for name in IGNORE_FILES]
        with os.scandir(fd) as scan:
            entries = sorted((os.fsencode(entry.name), entry.is_dir(follow_symlinks=False)) for entry in scan if entry.name != ".git")
    except OSError:
        return None
    finally:
        os.close(fd)
    return texts, entries


def _read_rules(name: str, folder: int) -> bytes:
    """An ignore file's text; none when it is missing, unreadable, too big, or a symbolic link (git does not
    follow one in the tree: PATTERN_NOFOLLOW)."""
    try:
        fd = os.open(name, _OPEN_RULES, dir_fd=folder)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        try:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_RULES_BYTES:
                return b""
            return handle.read(_MAX_RULES_BYTES)
        except OSError:
            return b""

"""Issue 46: --sync's ignore rules outside a checkout, given what a hostile (or only large) folder holds.

Each kind here once hung or crashed the fallback: globs that made its regular expressions backtrack (`*a*a*...*b`
on a long name, `**/**/**/**/x` on a deep path, a line of a megabyte), rule files of thousands of lines over
thousands of files, a folder 1,200 deep (RecursionError). Each walk runs under a limit of CPU time (SIGVTALRM:
the machine's load does not count), far above what it takes now (a fraction of a second) and far below what it
took before (minutes to never), and must choose what git chooses: git itself on the same tree where git answers
quickly, else git on an equivalent, simpler rule file (git's own wildmatch takes minutes on some of these too).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.standins.processes import git_init, git_selection
from tpuctl.backends.ssh.ignore_rules import walk

LIMIT_CPU_S = 10.0


class Hang(Exception):
    """Raised in the walk by SIGVTALRM when it has used LIMIT_CPU_S of CPU time."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"still walking after {LIMIT_CPU_S:g} CPU-s")


@contextlib.contextmanager
def cpu_limit() -> Iterator[None]:
    previous = signal.signal(signal.SIGVTALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_VIRTUAL, LIMIT_CPU_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def chosen(root: Path) -> set[str]:
    with cpu_limit():
        return set(walk(str(root)))


def as_git_chooses(root: Path, gitignore: str | None = None) -> set[str]:
    """What git lists in `root`, with `gitignore` as the top .gitignore for the question (put back afterwards)."""
    top = root / ".gitignore"
    written = top.read_bytes()
    if gitignore is not None:
        top.write_text(gitignore)
    try:
        return git_selection(root)
    finally:
        top.write_bytes(written)


def plant(root: Path, paths: list[str]) -> None:
    """Empty files, each folder made once its parent is there (given in depth order): os.makedirs recurses once a
    missing level, and pathlib works through every part of a path 1,200 folders long on each join."""
    made = {""}
    for path in paths:
        folder = path.rpartition("/")[0]
        if folder not in made:
            os.makedirs(os.path.join(root, folder), exist_ok=True)
            made.add(folder)
        os.close(os.open(os.path.join(root, path), os.O_WRONLY | os.O_CREAT, 0o644))


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """A folder that is removed with `rm -rf`: shutil.rmtree, pytest's, recurses once a level."""
    root = tmp_path / "tree"
    root.mkdir()
    yield root
    subprocess.run(["rm", "-rf", "--", str(root)], check=True, timeout=60)


# Names 200-250 bytes long, 13 or more `a`s in each before its last byte: `a*a*a*a*a*a*a*a*a*a*a*a*a*c` says what `a*c` says.
LONG_NAMES = [f"f{i % 3}/{shape}" for i in range(40) for shape in ("a" * (250 - i), "b" + "a" * (200 + i), "ab" * (100 + i % 20), "a" * (210 + i) + "c")]
DEEP = [f"{'d/' * level}{name}" for level in range(0, 300, 3) for name in ("x", "y", "ya")]


@pytest.mark.parametrize(
    ("gitignore", "equivalent", "paths"),
    [
        ("*a*a*a*a*a*a*a*a*a*a*a*a*b\n", "*b\n", LONG_NAMES),  # the issue's: never finished on a long name (nor does git, on some)
        ("*a*a*a*a*a*a*a*a*a*a*a*a*[xyz]\n*?*?*?*?*?*?*?*?*?*?*?*?c\n", None, LONG_NAMES),
        ("a*a*a*a*a*a*a*a*a*a*a*a*a*c\n", "a*c\n", LONG_NAMES),  # git's wildmatch takes minutes on this one itself
        ("[a-z]*" * 12 + "[c]\n", "*c\n", LONG_NAMES),
        ("*a" * 500_000 + "\n!" + "a*" * 30 + "\n", "", LONG_NAMES),  # a line of a megabyte
        ("**/**/**/**/x\n", "**/x\n", DEEP),  # the issue's: minutes (git's wildmatch too, on a path this deep)
        ("/**/d/**/**/d/**/**/y*\n!**/d/**/**/**/ya\n", "/d/**/d/**/y*\n!ya\n", DEEP),
    ],
    ids=["stars", "stars-class", "stars-git-slow", "classes", "megabyte-line", "starstar", "starstar-negated"],
)
def test_globs_that_backtracked_are_matched_in_linear_time(tree: Path, gitignore: str, equivalent: str | None, paths: list[str]) -> None:
    plant(tree, paths)
    (tree / ".gitignore").write_text(gitignore)
    ours = chosen(tree)
    git_init(tree)
    assert ours == as_git_chooses(tree, equivalent)
    assert len(ours) not in (0, len(paths) + 1) or equivalent == ""  # the globs decided something


def test_a_folder_1200_deep_with_links_up_and_rules_on_the_way_is_walked_as_git_walks_it(tree: Path) -> None:
    """A RecursionError before. The deepest file with a matching line decides at any depth; a link to a folder
    above (or to /) is listed as a link, never entered."""
    plant(tree, [f"{'d/' * level}{name}" for level in range(1200) for name in ("x", f"y{level % 7}")])
    (tree / ".gitignore").write_text("**/x\n/d/**/y3\n")
    for level in range(100, 1200, 100):
        folder = os.path.join(tree, "d/" * level)
        with open(os.path.join(folder, ".gitignore"), "w") as rules:
            rules.write(f"!x\ny{level % 7}\n")
        os.symlink("../" * level, os.path.join(folder, "up"))
        os.symlink("/", os.path.join(folder, "root"))
    ours = chosen(tree)
    git_init(tree)
    assert ours == git_selection(tree)
    assert {f"{'d/' * 1199}x", f"{'d/' * 1100}up", f"{'d/' * 1100}root", f"{'d/' * 49}y0"} <= ours  # `!x` at 1,100 decides below it
    assert not {f"{'d/' * 50}x", f"{'d/' * 1101}y3", f"{'d/' * 1102}y4"} & ours
    assert not [path for path in ours if "/up/" in path or "/root/" in path]


def _rules(rng: random.Random, names: list[str], count: int) -> list[str]:
    """Every kind a rule file holds, most matching nothing here: names, anchored paths, `*.ext`, prefixes, folders,
    `**/`, classes, negations, globs with no literal byte, and lines written twice."""
    kinds = [
        lambda i: rng.choice(names).rsplit("/", 1)[-1] if i % 20 == 0 else f"gone-{i}.py",
        lambda i: "/" + rng.choice(names) if i % 20 == 0 else f"/src/p{i % 30}/gone-{i}",
        lambda i: f"*.e{i}",
        lambda i: f"m-{i}*",
        lambda i: f"p{i % 40}/" if i % 50 == 0 else f"q{i}/",
        lambda i: f"**/k-{i}.log",
        lambda i: f"src/**/m-{i}[0-9].*",
        lambda i: f"!{rng.choice(names).rsplit('/', 1)[-1]}",
        lambda i: rng.choice(["[mk]?*[13579]?[pl]*", "**/[!a-z]*", "[!s]*[02468]?[eb]*[7n]"]) + "*" * (i % 3),
    ]
    return [kinds[i % len(kinds)](i) for i in range(count)]


@pytest.mark.parametrize(("files", "rules"), [(5000, 10_000), (300, 200_000)], ids=["10k-rules-5k-files", "200k-rules"])
def test_a_rule_file_of_many_thousand_lines_over_thousands_of_files(tree: Path, files: int, rules: int) -> None:
    """The issue's: 10,000 rules over 10,000 files took 88-164 s (git 1.8 s), most files matching no line (each
    met every line); a rule file of 200,000 lines (3 MB)."""
    rng = random.Random(rules)
    names = [f"src/p{rng.randrange(40)}/{rng.choice('mkwwwwwwww')}-{i}.{rng.choice(('py', 'log', 'e7', 'bin'))}" for i in range(files)]
    plant(tree, [*names, *(f"src/p{i}/x.txt" for i in range(40))])
    (tree / ".gitignore").write_text("\n".join(_rules(rng, names, rules)) + "\n")
    ours = chosen(tree)
    git_init(tree)
    assert ours == git_selection(tree)
    assert 0 < len(ours) < files

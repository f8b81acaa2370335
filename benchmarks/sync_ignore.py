"""`launch --sync`'s ignore rules outside a git checkout, against git itself on the same tree.

Outside a checkout tpuctl walks the script's folder and applies every .gitignore and .tpuctlignore with
git's semantics (tpuctl/backends/ssh/ignore_rules.py). Three trees, each written once:

    rules     --files files (default 10,000) in nested folders, one .gitignore of --rules lines (default
              10,000): plain names, anchored paths, `*.ext`, `prefix*`, folders, `**/x`, `a/**/b`, classes,
              negations and a few globs with no literal part (issue 46: 88-164 s here, git 1.8 s)
    stars     --long files with names of 200-250 bytes under `*a*a*a*a*a*a*a*a*a*a*a*a*b` and its kin (issue 46:
              never finished)
    deep      a folder --depth levels deep (default 1,200; issue 46: RecursionError), `**/x` and a
              .gitignore every 100 levels

    subject  list(ignore_rules.walk(TREE)), in this process
    anchor   git --git-dir=OUTSIDE --work-tree=TREE ls-files -o --exclude-standard, a process of its own
             (the tree is no checkout, as for the fallback; git's start-up, about 2 ms, is in its time)

Each side runs once untimed and must list the same files; then they alternate, --runs rounds (the order
flipping every round), and the medians' ratio is printed. Target: tpuctl <= 2x git on every tree. A
measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/sync_ignore.py [--runs N] [--files N] [--rules N] [--long N] [--depth N]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tpuctl.backends.ssh.ignore_rules import walk  # noqa: E402

TARGET = 2.0
GIT_TIMEOUT_S = 600
# git as a fresh user runs it: no global or system excludes.
GIT_ENV = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": "/nonexistent", "LC_ALL": "C"}
EXTENSIONS = ("py", "txt", "json", "bin", "npy", "log", "ckpt", "pb", "md", "cfg")


def write(tree: Path, files: list[str], gitignores: dict[str, str]) -> None:
    for path in files:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(b"")
    for folder, text in gitignores.items():
        (tree / folder).mkdir(parents=True, exist_ok=True)
        (tree / folder / ".gitignore").write_text(text)


def rules_tree(tree: Path, files: int, rules: int) -> None:
    """A project of `files` files and one .gitignore of `rules` lines of every kind, some matching, most not."""
    rng = random.Random(46)
    folders = [f"src/pkg{i}" for i in range(40)] + [f"data/part-{i}" for i in range(30)] + [f"runs/run-{i}/logs" for i in range(20)] + ["", "notes"]
    names = [f"{rng.choice(folders)}/{rng.choice(('mod', 'shard', 'events', 'cfg', 'x'))}-{i}.{rng.choice(EXTENSIONS)}".lstrip("/") for i in range(files)]
    kinds: list[Callable[[int], str]] = [
        lambda i: Path(rng.choice(names)).name if i % 2 else f"missing-{i}.{rng.choice(EXTENSIONS)}",  # a plain name
        lambda i: "/" + rng.choice(names) if i % 2 else f"/src/pkg{i % 50}/gone-{i}.py",  # an anchored path
        lambda i: f"*.{rng.choice(EXTENSIONS)}{i}",  # `*.ext`, mostly of no file here
        lambda i: f"shard-{i}*",
        lambda i: f"part-{i}/",  # a folder, anywhere
        lambda i: f"**/events-{i}.log",
        lambda i: f"runs/**/cfg-{i}.*",
        lambda i: f"mod-{i}[0-9].p[yx]",
        lambda i: f"!{Path(rng.choice(names)).name}",  # a negation
    ]
    lines = [kinds[i % len(kinds)](i) for i in range(rules - 3)] + ["*-1?7*.json", "*[0-9]-[0-9]*.ckpt", "*.npy"]
    write(tree, names, {"": "\n".join(lines) + "\n"})


def stars_tree(tree: Path, count: int) -> None:
    """Long names under globs that backtrack: twelve stars, each before an `a`, a `?` or the end, then a literal or a class.
    (git's own wildmatch takes minutes or more on some such pairs, `a*a*a*a*a*a*a*a*a*a*a*a*a*c` on a name of
    250 `a`s among them: the tree holds only pairs git answers, so that it can be the anchor.)"""
    shapes = (lambda n: "a" * n, lambda n: "b" + "a" * (n - 1), lambda n: "ab" * (n // 2), lambda n: "a" * (n - 2) + "ba")
    files = [f"f{i}/{shapes[i % len(shapes)](250 - i % 50)}" for i in range(count)]
    globs = ["*a*a*a*a*a*a*a*a*a*a*a*a*b", "*a*a*a*a*a*a*a*a*a*a*a*a*[xyz]", "*?*?*?*?*?*?*?*?*?*?*?*?x", "/f1*/**/*a*a*a*a*a*a*a*a*a*a*a*a*[!a]"]
    write(tree, files, {"": "\n".join(globs) + "\n"})


def deep_tree(tree: Path, depth: int) -> None:
    """One chain `depth` folders deep, two files at each level, `**/x` at the top and a .gitignore every 100 levels.
    (Not `**/**/**/**/x`, although tpuctl takes it in its stride: git's wildmatch retries each `**/` at every slash,
    and took 107 s on a chain 150 deep here.)"""
    files = [f"{'d/' * level}{name}" for level in range(depth) for name in ("x", f"y{level % 7}")]
    gitignores = {"d/" * level: f"!x\n/**/y{level % 7}\nd/**/x\n" for level in range(100, depth, 100)}
    write(tree, files, {"": "**/x\n", **gitignores})


def git_listing(tree: Path, git_dir: Path) -> set[str]:
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", f"--work-tree={tree}", "-C", str(tree), "ls-files", "-z", "-o", "--exclude-standard"],
        capture_output=True, env=GIT_ENV, check=True, timeout=GIT_TIMEOUT_S,
    )  # fmt: skip
    return {os.fsdecode(path) for path in done.stdout.split(b"\0") if path}


def timed(run: Callable[[], set[str]]) -> tuple[float, set[str]]:
    start = time.perf_counter()
    listed = run()
    return time.perf_counter() - start, listed


def measure(name: str, tree: Path, git_dir: Path, runs: int, warm_up: bool) -> tuple[str, list[float], list[float]]:
    """Both sides on one tree: the same files, then interleaved timings."""
    sides: dict[str, Callable[[], set[str]]] = {"tpuctl": lambda: set(walk(str(tree))), "git": lambda: git_listing(tree, git_dir)}
    first = {side: timed(run) for side, run in sides.items()}
    if first["tpuctl"][1] != first["git"][1]:
        differ = sorted(first["tpuctl"][1] ^ first["git"][1])
        raise SystemExit(f"{name}: tpuctl and git list different files ({len(differ)}), e.g. {differ[:3]}")
    times: dict[str, list[float]] = {side: [] if warm_up else [first[side][0]] for side in sides}
    for round_no in range(runs - (0 if warm_up else 1)):
        for side in sorted(sides, reverse=round_no % 2 == 1):
            times[side].append(timed(sides[side])[0])
    return f"{name} ({len(first['git'][1]):,} files listed)", times["tpuctl"], times["git"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each side on each tree (default 5)")
    parser.add_argument("--files", type=int, default=10_000, help="files in the rules tree (default 10,000)")
    parser.add_argument("--rules", type=int, default=10_000, help="lines of its .gitignore (default 10,000)")
    parser.add_argument("--long", type=int, default=1_000, help="files with long names in the stars tree (default 1,000)")
    parser.add_argument("--depth", type=int, default=1_200, help="folders of the deep tree (default 1,200)")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false", help="the checking run counts as the first timed one")
    args = parse_args(parser, runs=1, files=300, rules=300, long=20, depth=150, warm_up=False)
    with tempfile.TemporaryDirectory() as tmp:
        git_dir = Path(tmp) / "outside.git"
        subprocess.run(["git", "init", "-q", "--bare", "--template=", str(git_dir)], env=GIT_ENV, check=True, timeout=GIT_TIMEOUT_S)
        trees = {
            f"rules: {args.rules:,} rules, {args.files:,} files": lambda tree: rules_tree(tree, args.files, args.rules),
            f"stars: {args.long:,} names of 200-250 bytes": lambda tree: stars_tree(tree, args.long),
            f"deep: {args.depth:,} folders deep": lambda tree: deep_tree(tree, args.depth),
        }
        results = []
        for number, (name, build) in enumerate(trees.items()):
            tree = Path(tmp) / f"tree{number}"
            build(tree)
            results.append(measure(name, tree, git_dir, args.runs, args.warm_up))
            subprocess.run(["rm", "-rf", "--", str(tree)], check=True, timeout=GIT_TIMEOUT_S)  # shutil.rmtree recurses once a level
    print(f"--sync's ignore rules outside a checkout: {args.runs} interleaved runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print()
    print(f"{'tree':<52} {'tpuctl s':>9} {'git s':>8} {'ratio':>7} {'target':>8}  result")
    for name, ours, gits in results:
        ratio = statistics.median(ours) / statistics.median(gits)
        verdict = "PASS" if ratio <= TARGET else "MISS"
        print(f"{name:<52} {statistics.median(ours):>9.3f} {statistics.median(gits):>8.3f} {ratio:>6.2f}x {f'<= {TARGET:g}x':>8}  {verdict}")
    print("(medians; tpuctl in this process, git a process of its own on the same tree)")


if __name__ == "__main__":
    main()

"""Issue 34: what --sync sends. The fallback's gitignore rules against real git on generated trees; the
selection in a checkout (git's own listing, .tpuctlignore on top); links, FIFOs; sizes, the limit, its sources."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.standins.cli_calls import launch_in_process
from tests.standins.processes import GIT_ENV, git, git_init, git_selection
from tpuctl.backends.ssh.ignore_rules import RuleFile, parse, walk
from tpuctl.backends.ssh.selection import select
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.parse import MAX_SIZE, parse_size

DIRS = ["a", "b", "d d", "é"]
FILES = ["x", "y.txt", "z.log", "A.TXT", "#h", "!n", "s p", "t ", "[q]", "k-1"]
FRAGMENTS = [
    "a/*", "*/x", "a*x", "/a", "b/**/x", "**/y.txt", "*", "**", "?", "/", "a", "b", "x", "y", ".txt", ".log",
    "[a-b]", "[!a]", "[[:upper:]]", "[]a]", "[x-]", "\\", "\\ ", " ", "!", "#", "é", "[", "-", "d d", "t",
]

# Every chosen name in every folder two deep (21 folders): each rule meets many paths it could wrongly match.
FOLDERS = [[], *([d] for d in DIRS), *([d, e] for d in DIRS for e in DIRS)]
paths = st.lists(st.sampled_from(FILES), min_size=2, max_size=4, unique=True).map(lambda names: [(list(f), n) for f in FOLDERS for n in names])
lines = st.tuples(st.booleans(), st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=4), st.sampled_from(["", "/", " ", "\r"]))
rule_files = st.lists(
    st.tuples(st.sampled_from(FOLDERS[:5]), st.sampled_from([".gitignore", ".tpuctlignore"]), st.lists(lines, min_size=1, max_size=4)),
    min_size=1,
    max_size=4,
)


def _write_tree(root: Path, files: list[tuple[list[str], str]], rules: list[tuple[list[str], str, list[tuple[bool, list[str], str]]]]) -> None:
    for folders, name in files:
        place = root.joinpath(*folders)
        place.mkdir(parents=True, exist_ok=True)
        (place / name).write_bytes(b"1")
    for folders, kind, written in rules:
        place = root.joinpath(*folders)
        place.mkdir(parents=True, exist_ok=True)
        text = "".join(("!" if negated else "") + "".join(parts) + end + "\n" for negated, parts, end in written)
        (place / kind).write_text(text, encoding="utf-8")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=paths, rules=rule_files)
def test_the_fallback_chooses_exactly_what_git_does(tmp_path_factory: pytest.TempPathFactory, files: list, rules: list) -> None:  # type: ignore[type-arg]
    """Nested files, negation, `**`, anchors, directory-only lines, escapes, classes, trailing spaces, CRs: the same files."""
    root = tmp_path_factory.mktemp("tree")
    _write_tree(root, files, rules)
    ours = set(walk(str(root)))
    git_init(root)
    assert ours == git_selection(root)


# The glob grammar in pieces (issue 46): every kind of `*` and `**` with and without slashes around it, escapes,
# classes (ranges, negation, a first `]`, POSIX names, unclosed), on names that hold glob characters themselves.
SEGMENTS = [
    b"a", b"b", b"ab", b"ba", b"*", b"**", b"***", b"?", b"a*", b"*a", b"a**", b"**b", b"*a*", b"?a", b"b?", b".", b"\\", b"\\*", b"\\ ", b" ",
    b"!", b"#", b"\xff", b"[ab]", b"[!a]", b"[^b]", b"[a-c]*", b"[]a]", b"[a-]", b"[[:alpha:]]", b"[[:punct:]b]", b"[[:nope:]]", b"[", b"[/]", b"[\\]]",
]
# A line: how it starts, its segments each with what joins it to the next (mostly a slash), how it ends.
glob_lines = st.tuples(
    st.sampled_from([b"", b"!", b"/", b"!/", b"**/"]),
    st.lists(st.tuples(st.sampled_from(SEGMENTS), st.sampled_from([b"/", b"/", b"/", b""])), min_size=1, max_size=5),
    st.sampled_from([b"", b"/", b"/**", b"  ", b"\r"]),
)
# Every name in every folder four deep: most globs match something, and a folder's verdict hides what is below it.
GLOB_TREE = [
    b"/".join([*folder, name])
    for folder in ([], *([a] for a in (b"a", b"ab")), *([a, b] for a in (b"a", b"ab") for b in (b"a", b"b")), [b"a", b"b", b"a"], [b"a", b"a", b"b", b"a"])
    for name in (b"bab", b"ba", b"aab", b".a", b"b.a", b"*", b"a b", b"[a]", b"\xff", b"!b", b"#b")
]


@pytest.fixture(scope="module")
def glob_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("globs")
    git_init(root)
    return root


def _check_ignore(root: Path, paths: list[bytes]) -> set[bytes]:
    """The paths git says are ignored: `git check-ignore -v --no-index`, a verdict for each (the deciding line, or none).
    A leading folder of a path counts as a folder (dir.c: prep_exclude), and a path that does not exist as a file."""
    done = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-z", "-v", "--no-index", "--non-matching", "--stdin"],
        input=b"".join(path + b"\0" for path in paths), env=GIT_ENV, capture_output=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    fields = done.stdout.split(b"\0")
    answers = [fields[i : i + 4] for i in range(0, len(fields) - 1, 4)]  # source, line, pattern, path
    assert sorted(path for *_, path in answers) == sorted(paths)
    return {path for _, _, pattern, path in answers if pattern and not pattern.startswith(b"!")}


def _ignored(rules: RuleFile, path: bytes) -> bool:
    """The fallback's verdict for a file: a folder above it excluded hides it (nothing below is read), else its own."""
    parts = path.split(b"/")
    folders = [(b"/".join(parts[:i]), True) for i in range(len(rules.base.split(b"/")), len(parts))]
    for name, is_dir in [*folders, (path, False)]:
        rule = rules.last_match(name, is_dir)
        if rule is not None and not rule.negative:
            return True
    return False


@settings(max_examples=150, deadline=None)
@given(rule_sets=st.lists(st.lists(glob_lines, min_size=1, max_size=2), min_size=1, max_size=12))
def test_every_glob_is_judged_as_git_check_ignore_judges_it(glob_repository: Path, rule_sets: list) -> None:  # type: ignore[type-arg]
    """Generated globs against a tree of names (glob characters in them too): each rule file of one or two lines in a
    folder of its own, one git call for them all. Every file git calls ignored (itself, or a folder above it), and
    only those, the fallback leaves out."""
    root = Path(tempfile.mkdtemp(dir=glob_repository))
    paths, ours = [], set()
    for number, lines in enumerate(rule_sets):
        text = b"".join(start + b"".join(a + b for a, b in parts)[: -len(parts[-1][1]) or None] + end + b"\n" for start, parts, end in lines)
        (root / str(number)).mkdir()
        (root / str(number) / ".gitignore").write_bytes(text)
        base = os.fsencode(root.relative_to(glob_repository)) + b"/%d/" % number
        rules = RuleFile(parse(text), base)
        paths += [base + path for path in GLOB_TREE]
        ours |= {path for path in paths[-len(GLOB_TREE) :] if _ignored(rules, path)}
    assert ours == _check_ignore(glob_repository, paths)


@pytest.mark.parametrize(
    "gitignore",
    [
        "/a*/x\n", "a/*\n!a/b\n", "**/y.txt\n", "a/**/x\n", "a/**\n!a/x\n", "*\n!*/\n!x\n", "b/\n!b/x\n", "[[:upper:]]*\n",
        "\\#h\n\\!n\n", "t\\ \n", "t \n", "s?p\n[!x]\n", "*.txt\r\n!a/*.txt\n", "d d/\n", "**/a/x\n", "/*/*/x\n", "x/\n",
        "/a**/y.txt\n", "b**/x\n",  # `**` right after a literal head: at the start of what wildmatch sees
        "**/**/x\n", "a/**/**/x\n", "a/**/b/x\n", "**/[ab]/**/?.txt\n", "a[!x]b/x\n", "a[/]b/x\n", "a?b/*\n", "*/**/*[!y].*\n",  # issue 46
        "x\0y\n!a/x\0\n",  # a NUL ends a line (git reads each as a C string)
    ],
)
def test_the_fallback_agrees_with_git_on_the_constructs_the_issue_names(tmp_path: Path, gitignore: str) -> None:
    _write_tree(tmp_path, [(list(f), n) for f in FOLDERS for n in FILES], [])
    (tmp_path / ".gitignore").write_text(gitignore)
    (tmp_path / "a" / ".tpuctlignore").write_text("b/*.log\n!b/z.log\n")
    ours = set(walk(str(tmp_path)))
    git_init(tmp_path)
    assert ours == git_selection(tmp_path)


def test_git_semantics_spelled_out(tmp_path: Path) -> None:
    """The cases the issue names, without git in the loop: a re-include inside an excluded folder is impossible."""
    _write_tree(tmp_path, [([], "train.py"), (["data"], "big.bin"), (["data"], "keep.txt"), (["logs", "deep"], "x.log"), ([], "x.log"), (["src"], "m.py")], [])
    (tmp_path / ".gitignore").write_text("data/\n!data/keep.txt\n/x.log\n")
    (tmp_path / "logs" / ".tpuctlignore").write_text("**/*.log\n")
    assert set(walk(str(tmp_path))) == {".gitignore", "train.py", "src/m.py", "logs/.tpuctlignore"}


def _checkout(root: Path) -> Path:
    project = root / "project"
    _write_tree(project, [([], "train.py"), ([], "weights.bin"), (["data"], "shard-0"), (["pkg"], "helper.py"), (["__pycache__"], "c.pyc")], [])
    (project / ".gitignore").write_text("data/\n")
    (project / ".tpuctlignore").write_text("*.bin\n")
    git(project, "init", "-q")
    git(project, "add", "-f", "train.py", "weights.bin", "data/shard-0", ".gitignore")
    return project


def test_in_a_checkout_git_chooses_and_tpuctlignore_leaves_out_tracked_files_too(tmp_path: Path) -> None:
    project = _checkout(tmp_path)
    chosen = select(str(project))
    # data/shard-0 is tracked, so git lists it although .gitignore matches; weights.bin is tracked and .tpuctlignore'd.
    assert chosen.chooser == "git"
    assert [path for path, _ in chosen.files] == [".gitignore", ".tpuctlignore", "data/shard-0", "pkg/helper.py", "train.py"]
    assert {path for path, _ in chosen.files} == git_selection(project) - {"__pycache__/c.pyc"}


def test_links_stay_links_inside_and_nothing_outside_is_followed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _write_tree(project, [([], "train.py"), (["conf"], "base.yaml")], [])
    (tmp_path / "secret").write_text("outside")
    os.symlink("conf/base.yaml", project / "config.yaml")
    os.symlink("../secret", project / "escape")
    os.symlink(str(tmp_path / "secret"), project / "absolute")
    os.symlink("conf", project / "conf-link")
    os.mkfifo(project / "pipe")
    chosen = select(str(project))
    assert chosen.chooser == "ignore files"
    assert [path for path, _ in chosen.files] == ["conf-link", "conf/base.yaml", "config.yaml", "train.py"]
    assert chosen.links == {"config.yaml", "conf-link"}
    assert dict(chosen.left_out) == {
        "absolute": f"a symbolic link to {tmp_path / 'secret'}: absolute links are not sent",
        "escape": "a symbolic link out of the folder, to ../secret",
        "pipe": "a FIFO, socket or device",
    }


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file: nothing is unreadable to it")
def test_an_unreadable_file_stops_the_sync_before_anything_is_sent(tmp_path: Path) -> None:
    _write_tree(tmp_path, [([], "train.py"), ([], "locked")], [])
    (tmp_path / "locked").chmod(0)
    with pytest.raises(TpuctlError, match="cannot read 1 file"):
        select(str(tmp_path))


def _big_project(root: Path) -> Path:
    project = root / "p"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    (project / "data.npy").write_bytes(b"\0" * 3_000_000)
    (project / "vocab.txt").write_bytes(b"w\n" * 100_000)
    (project / "notes.md").write_text("n" * 5000)
    return project


def test_over_the_limit_the_launch_refuses_naming_the_largest_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _big_project(tmp_path)
    monkeypatch.chdir(project)
    monkeypatch.delenv("TPUCTL_SYNC_LIMIT", raising=False)
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "none.toml"))
    args = ("train.py", "--hosts", "h1,h2,h3", "--sync", "--python", "python3", "--dry-run")
    code, out, err = launch_in_process(*args, "--sync-limit", "2M")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "Error: --sync would send 3.1 MiB to each host, over the 2.0 MiB limit; largest: data.npy (2.9 MiB), vocab.txt (195.3 KiB), "
        "notes.md (4.9 KiB); nothing was sent (add them to .tpuctlignore or .gitignore, raise --sync-limit SIZE, or pass --sync-large)"
    ]
    code, out, err = launch_in_process(*args, "--sync-limit", "2M", "--sync-large")
    assert code == 0, err
    assert "sync: 4 file(s), 3.1 MiB to each of 3 hosts (9.2 MiB in all)" in out.splitlines()
    assert "sync: largest: data.npy (2.9 MiB), vocab.txt (195.3 KiB), notes.md (4.9 KiB), train.py (12 bytes)" in out
    (project / ".tpuctlignore").write_text("*.npy\n")
    code, out, err = launch_in_process(*args, "--sync-limit", "2M")
    assert code == 0 and "sync: 4 file(s), 200.2 KiB to each of 3 hosts (600.6 KiB in all)" in out, err


def test_the_limit_comes_from_the_flag_then_the_environment_then_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _big_project(tmp_path)
    monkeypatch.chdir(project)
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "user.toml"))
    (tmp_path / "user.toml").write_text('[launch]\nsync-limit = "1M"\n')
    args = ("train.py", "--hosts", "h1", "--sync", "--python", "python3", "--dry-run", "--json")
    assert "over the 1.0 MiB limit" in launch_in_process(*args)[2]  # the user file
    (project / "tpuctl.toml").write_text('[launch]\nsync-limit = "5M"\n')
    assert launch_in_process(*args)[0] == 0  # ./tpuctl.toml beats it
    monkeypatch.setenv("TPUCTL_SYNC_LIMIT", "2M")
    assert "over the 2.0 MiB limit" in launch_in_process(*args)[2]  # the environment beats the files
    assert launch_in_process(*args, "--sync-limit", "4M")[0] == 0  # the flag beats all
    (project / "tpuctl.toml").write_text('[launch]\nsync-limit = "lots"\n')
    code, _, err = launch_in_process(*args)
    assert code == 2 and "tpuctl.toml: launch.sync-limit" in err and "'lots' is not a size" in err
    (project / "tpuctl.toml").unlink()
    monkeypatch.setenv("TPUCTL_SYNC_LIMIT", "-3G")
    code, _, err = launch_in_process(*args)
    expected = "Error: TPUCTL_SYNC_LIMIT '-3G' is not a size (e.g. 1GiB, 500M, 2GB (K, M, G, T are powers of 1024; KB, MB, GB, TB of 1000))"
    assert (code, err.strip()) == (2, expected)


def test_a_script_the_ignore_files_exclude_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _big_project(tmp_path)
    (project / ".tpuctlignore").write_text("train.py\n")
    monkeypatch.chdir(project)
    code, _, err = launch_in_process("train.py", "--hosts", "h1", "--sync", "--python", "python3", "--dry-run")
    assert code == 2 and err.startswith("Error: --sync would not send train.py: .gitignore or .tpuctlignore excludes it")


@pytest.mark.parametrize(
    ("text", "expected"), [("1GiB", 1 << 30), ("500M", 500 << 20), ("1.5G", 3 << 29), ("2GB", 2 * 10**9), ("4096", 4096), ("1 kib", 1024), ("0.5K", 512)]
)
def test_sizes_read_as_rsync_reads_them(text: str, expected: int) -> None:
    assert parse_size(text, "--sync-limit") == expected


@given(st.text(max_size=60) | st.from_regex(r"-?[0-9]{0,45}(\.[0-9]{0,5})?\s?[kmgtpeKMGTPE]?i?[bB]?", fullmatch=True))
@settings(max_examples=400, deadline=None)
def test_any_text_is_a_size_in_range_or_one_line(text: str) -> None:
    try:
        value = parse_size(text, "--sync-limit")
    except TpuctlError as err:
        assert "\n" not in str(err) and err.exit_code == 2
    else:
        assert 0 < value <= MAX_SIZE

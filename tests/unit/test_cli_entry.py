"""A newcomer's first touch (issue 28, item 4): bare `tpuctl`, `tpuctl help`, mistyped names.

Run as the user runs it: the installed `tpuctl` console script in its own process, so the
exit status and which stream the text reaches are the real ones.

Exit statuses chosen: bare `tpuctl` prints the help on stderr and exits 2, as click >= 8.2
and `gcloud` (no command is a usage error; a script that calls `tpuctl` alone must not pass);
`tpuctl help` and `tpuctl --help` asked for help: stdout, exit 0, as `git help` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TPUCTL = str(Path(sys.executable).with_name("tpuctl"))


def tpuctl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run([TPUCTL, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


def test_bare_tpuctl_prints_the_help_as_help_and_exits_2() -> None:
    done = tpuctl()
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "Usage: tpuctl [OPTIONS] COMMAND [ARGS]..."
    assert not any(line.startswith("Error") for line in lines)
    assert "Commands:" in lines
    assert any(line.split()[:1] == ["launch"] for line in lines)
    assert done.stderr == tpuctl("--help").stdout  # the same text as --help, one command per line


def test_debug_alone_is_still_no_command() -> None:
    done = tpuctl("--debug")
    assert (done.returncode, done.stderr.splitlines()[0]) == (2, "Usage: tpuctl [OPTIONS] COMMAND [ARGS]...")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("typed", "line"),
    [
        ("lanch", "Error: no command 'lanch' (did you mean 'launch'?)"),
        ("lis", "Error: no command 'lis' (did you mean 'list'?)"),
        ("tfconfig", "Error: no command 'tfconfig' (did you mean 'tf-config' or 'config'?)"),
        ("xyzzy", "Error: no command 'xyzzy' (tpuctl --help lists them)"),
    ],
)
def test_a_mistyped_command_suggests_the_closest_in_one_line(typed: str, line: str) -> None:
    done = tpuctl(typed)
    assert (done.returncode, done.stderr.splitlines(), done.stdout) == (2, [line], "")


def test_help_as_a_command_is_the_help() -> None:
    top = tpuctl("help")
    assert (top.returncode, top.stdout, top.stderr) == (0, tpuctl("--help").stdout, "")
    one = tpuctl("help", "tf-config")
    assert (one.returncode, one.stdout, one.stderr) == (0, tpuctl("tf-config", "--help").stdout, "")
    wrong = tpuctl("help", "lnch")
    assert (wrong.returncode, wrong.stderr.splitlines()) == (2, ["Error: no command 'lnch' (did you mean 'launch'?)"])


def test_help_is_not_listed_among_the_commands() -> None:
    """It is a habit answered, not a command to document: the listing stays the real commands."""
    assert not any(line.split()[:1] == ["help"] for line in tpuctl("--help").stdout.splitlines())


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # click suggests for commands whose unknown options are errors ...
        (["tf-config", "--worker", "2"], "Error: No such option '--worker'. Did you mean '--workers'?"),
        # ... launch passes unknown options to the script, so a typo before SCRIPT was a "missing script"
        (["launch", "--worker", "2", "train.py"], "Error: No such option '--worker'. Did you mean '--workers'?"),
        (["launch", "--dry-rn", "train.py"], "Error: No such option '--dry-rn'. Did you mean '--dry-run'?"),
        (["launch", "--workres=2", "train.py"], "Error: No such option '--workres'. Did you mean '--workers'?"),
    ],
)
def test_a_mistyped_option_suggests_the_closest(args: list[str], line: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('trained')\n")
    done = tpuctl(*args, cwd=tmp_path)
    assert (done.returncode, done.stderr.splitlines()) == (2, [line])


def test_a_script_whose_name_starts_with_a_dash_still_launches(tmp_path: Path) -> None:
    (tmp_path / "-odd.py").write_text("print('ran')\n")
    done = tpuctl("launch", "--dry-run", "--strategy", "none", "--", "-odd.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = tpuctl("launch", "--dry-run", "--strategy", "none", "-odd.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("words", "cword", "expected"), [("tpuctl la", 1, "plain,launch"), ("tpuctl launch --work", 2, "plain,--workers")])
def test_shell_completion_completes_commands_and_options(words: str, cword: int, expected: str) -> None:
    """docs/index.md's completion (click's): completing the first word parses no arguments, which is not a bare `tpuctl`."""
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_TPUCTL_COMPLETE": "bash_complete"}
    done = subprocess.run([TPUCTL], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == [expected], done.stdout + done.stderr
    source = subprocess.run([TPUCTL], env={**os.environ, "_TPUCTL_COMPLETE": "bash_source"}, capture_output=True, text=True, timeout=60)
    assert "_tpuctl_completion" in source.stdout


def test_the_documented_completion_lines_work_in_bash_and_print_zsh_and_fish_scripts() -> None:
    """docs/index.md's lines, run as a user's shell runs them: bash evals the script, then its function answers a
    TAB after `tpuctl tf-config --format `; zsh and fish get their own scripts from the same console script."""
    env = {**os.environ, "PATH": f"{Path(TPUCTL).parent}{os.pathsep}{os.environ['PATH']}"}
    shell = (
        'eval "$(_TPUCTL_COMPLETE=bash_source tpuctl)" && complete -p tpuctl && '
        'COMP_WORDS=(tpuctl tf-config --format ""); COMP_CWORD=3; _tpuctl_completion tpuctl; echo "${COMPREPLY[*]}"'
    )
    done = subprocess.run(["bash", "--norc", "-c", shell], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["complete -o nosort -F _tpuctl_completion tpuctl", "json env dir"]
    index = (Path(__file__).parents[2] / "docs" / "index.md").read_text(encoding="utf-8")
    for shell_name, first in (("zsh", "#compdef tpuctl"), ("fish", "function _tpuctl_completion")):
        assert f"_TPUCTL_COMPLETE={shell_name}_source tpuctl" in index
        script = subprocess.run([TPUCTL], env={**env, "_TPUCTL_COMPLETE": f"{shell_name}_source"}, capture_output=True, text=True, timeout=60)
        assert script.returncode == 0 and script.stdout.startswith(first), script.stdout[:200] + script.stderr


def test_an_unset_variable_given_as_a_value_is_named_as_the_likely_cause() -> None:
    """`tpuctl tf-config --check "$TF_CONFIG"` where the shell has no TF_CONFIG (issue 30)."""
    done = tpuctl("tf-config", "--check", "")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: Invalid value for '--check': an empty value is not allowed "
        "(is TF_CONFIG unset in this shell? `tpuctl tf-config --check` alone reads the variable)"
    )
    other = tpuctl("tf-config", "--workers", "2", "--hosts", "")
    assert other.returncode == 2
    assert other.stderr.strip() == "Error: Invalid value for '--hosts': an empty value is not allowed (an unset shell variable?)"

"""Words after SCRIPT (issue 30): tpuctl's options the script defines too are taken and said; near-misses of
tpuctl's options are refused before any worker starts; the script's own flags, absl's `--model_dir` style included, pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tpuctl.launch import script_flags

ARGPARSE = '''
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--verbose", action="store_true")
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("-e", "--epochs", type=int, default=1)
args = parser.parse_args()
'''
ABSL = '''
from absl import app, flags
FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "where checkpoints go")
flags.DEFINE_integer("train_steps", 100, "steps")
def main(argv):
    pass
if __name__ == "__main__":
    app.run(main)
'''


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


def _argv(result: object) -> list[str]:
    plan = json.loads(result.stdout)  # type: ignore[attr-defined]
    return list(plan["workers"][0]["argv"])


def test_a_tpuctl_option_the_script_defines_too_is_taken_and_said(tmp_path: Path) -> None:
    script = _script(tmp_path, ARGPARSE)
    result = run_tpuctl("launch", str(script), "--verbose", "--strategy", "none", "--lr", "0.01", "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tpuctl took --verbose (its own option, which the script defines too); to give it to the script, put it after `--`" in result.stderr
    assert _argv(result)[-2:] == ["--lr", "0.01"]
    given = run_tpuctl("launch", str(script), "--strategy", "none", "--dry-run", "--json", "--", "--verbose", cwd=tmp_path)
    assert given.returncode == 0 and _argv(given)[-1] == "--verbose" and "took" not in given.stderr
    # `--` before SCRIPT: every word after SCRIPT is the script's, near-misses included; nothing is said to be taken
    before = run_tpuctl("launch", "--strategy", "none", "--dry-run", "--json", "--", str(script), "--verbose", "--worker", "2", cwd=tmp_path)
    assert before.returncode == 0, before.stderr
    assert _argv(before)[-3:] == ["--verbose", "--worker", "2"] and before.stderr == ""


@pytest.mark.parametrize("typo", ["--worker", "--stratgy", "--model-dri"])
def test_a_near_miss_of_tpuctl_s_options_is_refused_before_anything_starts(tmp_path: Path, typo: str) -> None:
    script = _script(tmp_path, ARGPARSE)
    result = run_tpuctl("launch", str(script), "--workers", "2", typo, "2", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: {typo} (after SCRIPT) is not a tpuctl option") and "did you mean" in line and "after `--`" in line


def test_the_script_s_own_flags_pass_absl_style_included(tmp_path: Path) -> None:
    script = _script(tmp_path, ABSL)
    result = run_tpuctl(
        "launch", str(script), "--workers", "2", "--model_dir", "/tmp/m", "--train_steps=5", "--dry-run", "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert _argv(result)[-3:] == ["--model_dir", "/tmp/m", "--train_steps=5"] and result.stderr == ""


@pytest.mark.parametrize("text", ["def (:", "\x00" * 10, "x = '" + "a" * 100, "(" * 5000], ids=["syntax", "nul", "unclosed", "deep"])
def test_a_script_whose_flags_cannot_be_read_defines_none(tmp_path: Path, text: str) -> None:
    assert script_flags.defined_by(_script(tmp_path, text)) == set()
    assert script_flags.defined_by(tmp_path / "missing.py") == set()


CLICK = '''
import click


@click.command()
@click.option("--worker", type=int, default=0, help="this host's index")
@click.option("--noise/--no-noise", default=False)
def main(worker: int, noise: bool) -> None:
    print(worker, noise)


if __name__ == "__main__":
    main()
'''
ABSL_BOOL = '''
from absl import app, flags
flags.DEFINE_bool("scope", True, "wrap the model in a scope")
flags.DEFINE_multi_integer("stratgy", [], "not a typo here: the script's own flag")
app.run(lambda argv: None)
'''


@pytest.mark.parametrize(
    ("text", "words"),
    [(CLICK, ["--worker", "1", "--no-noise"]), (ABSL_BOOL, ["--noscope", "--stratgy=1"])],
    ids=["click", "absl-bool-and-multi"],
)
def test_flags_defined_with_click_or_any_absl_define_are_the_script_s(tmp_path: Path, text: str, words: list[str]) -> None:
    """A near-miss of tpuctl's options that the script defines (click's option, absl's `--noNAME` of a boolean,
    any flags.DEFINE_*) is the script's, not a typo to refuse."""
    script = _script(tmp_path, text)
    result = run_tpuctl("launch", str(script), *words, "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _argv(result)[-len(words):] == words


def test_tpuctl_s_own_off_switches_after_script_are_tpuctl_s(tmp_path: Path) -> None:
    """`--no-scope` is the second spelling of `--scope/--no-scope`: tpuctl's, not a near-miss of `--scope`."""
    script = _script(tmp_path, ARGPARSE)
    result = run_tpuctl("launch", str(script), "--no-scope", "--lr", "0.1", "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["workers"][0]["env"]["TPUCTL_SCOPE"] == "0" and _argv(result)[-2:] == ["--lr", "0.1"]

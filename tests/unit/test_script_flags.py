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

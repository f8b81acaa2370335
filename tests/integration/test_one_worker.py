"""One worker is plain python (issue 34): a one-worker launch ends as `python SCRIPT` does and writes the same files.

Each script is in the style of one of TensorFlow's own guides and builds
MultiWorkerMirroredStrategy() after other TensorFlow work, as the guides' cells
do. With a one-task TF_CONFIG that strategy takes its multi-worker path and
fails ("Collective ops must be configured at program startup"); without one it
runs locally. Real TensorFlow, real processes; each script runs once under
plain python (shared by its launches) and once per launch variant.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf

GUIDES = SCRIPTS / "one_worker"
# TensorBoard names event files events.out.tfevents.TIME.HOST.PID.N.v2: the same file, whoever writes it.
_EVENT_FILE = re.compile(r"(events\.out\.tfevents)\.[^/]*$")


def _files(folder: Path) -> list[str]:
    return sorted(_EVENT_FILE.sub(r"\1.*", str(path.relative_to(folder))) for path in folder.rglob("*") if path.is_file())


def _clean_env() -> dict[str, str]:
    """The shell both runs start from: no TF_CONFIG, no tpuctl variables (as a user's shell)."""
    return {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("TPUCTL_")}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, list[str]]]:
    """`python SCRIPT` in a folder of its own, run once per script on first use: (exit status, files written)."""

    class Runs(dict[str, tuple[int, list[str]]]):
        def __missing__(self, name: str) -> tuple[int, list[str]]:
            work = tmp_path_factory.mktemp(f"plain-{Path(name).stem}")
            result = subprocess.run(
                [sys.executable, str(GUIDES / name)], cwd=work, env=_clean_env(), capture_output=True, text=True, timeout=600
            )
            assert result.returncode == 0, result.stdout + result.stderr  # the guides' own cells run as written
            self[name] = (result.returncode, _files(work))
            return self[name]

    return Runs()


@pytest.mark.parametrize(
    ("script", "options"),
    [
        ("guide_cells.py", []),
        ("guide_cells.py", ["--simulate-devices", "2"]),
        ("guide_cells.py", ["--strategy", "none"]),
        ("keras_tutorial_tf_keras.py", []),
    ],
    ids=["guide-default", "guide-simulate-devices", "guide-strategy-none", "tf-keras-tutorial-default"],
)
def test_a_one_worker_launch_ends_and_writes_as_plain_python(
    script: str, options: list[str], plain: dict[str, tuple[int, list[str]]], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = run_tpuctl(
        "launch", str(GUIDES / script), *options, "--log-dir", str(tmp_path / "logs"), cwd=work, env=_clean_env(), timeout=600
    )
    assert (result.returncode, _files(work)) == plain[script], result.stdout + result.stderr
    assert "Collective ops must be configured" not in result.stdout


def test_one_worker_never_inherits_a_tf_config_from_the_launchers_shell(tmp_path: Path) -> None:
    """A shell that ran `eval "$(tpuctl tf-config --workers 2 --format env)"` still launches one plain worker."""
    stale = '{"cluster":{"worker":["localhost:2222","localhost:2223"]},"task":{"type":"worker","index":1}}'
    dry = run_tpuctl("launch", str(SCRIPTS / "argv_dump.py"), "--dry-run", env={**_clean_env(), "TF_CONFIG": stale})
    assert dry.returncode == 0, dry.stderr
    assert "TF_CONFIG=" not in dry.stdout
    assert "no TF_CONFIG: one worker runs as `python SCRIPT` does" in dry.stdout
    result = run_tpuctl(
        "launch", str(SCRIPTS / "argv_dump.py"), "--strategy", "none", "--log-dir", str(tmp_path / "logs"),
        env={**_clean_env(), "TF_CONFIG": stale, "ARGV_OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads((tmp_path / "0.json").read_text())["env"]
    assert "TF_CONFIG" not in seen and seen["TPUCTL_NUM_WORKERS"] == "1"


def test_a_script_that_reads_tf_config_fails_as_plain_python_and_is_told_how_to_get_one(tmp_path: Path) -> None:
    script = str(GUIDES / "reads_tf_config.py")
    plain = subprocess.run([sys.executable, script], env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and "KeyError: 'TF_CONFIG'" in plain.stderr
    alone = run_tpuctl("launch", script, "--strategy", "none", "--log-dir", str(tmp_path / "alone"), env=_clean_env())
    assert alone.returncode == plain.returncode, alone.stdout + alone.stderr
    assert "KeyError: 'TF_CONFIG'" in alone.stdout
    assert "one worker runs without TF_CONFIG, as `python SCRIPT` does; for a script that reads it, pass --strategy multi-worker-mirrored" in alone.stdout
    named = run_tpuctl("launch", script, "--strategy", "multi-worker-mirrored", "--dry-run", "--json", env=_clean_env())
    assert named.returncode == 0, named.stderr
    plan = json.loads(named.stdout)
    assert plan["tf_config"] is True and "TF_CONFIG" in plan["workers"][0]["env"]

"""The rehearsal's environments built for real (tpuctl/launch/tfpair/envs.py): `python -m venv` and pip, from a folder
of real wheels with no index (PIP_NO_INDEX, PIP_FIND_LINKS: pip's own configuration, as a user's pip.conf would
give it), so no TensorFlow is downloaded: the builder is the same one that installs tensorflow-cpu.

The wheels are built in the test from tiny source packages with this environment's own pip (--no-build-isolation:
setuptools is installed here), so they are what a real build makes; for a launch, tiny packages of the names a
TensorFlow 2.15 environment pins stand in for tensorflow-cpu and its company.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.tfpair.envs import BUILDING, READY, Env, ensure

PACKAGE = "tpuctl-probe"
# Stand-ins for what an environment of TensorFlow 2.15 pins (envs.pins): the same names, tiny; their `tensorflow` says
# where it was imported from and stops the worker there, so a launch shows which interpreter its worker ran.
FAKE_TF = "import sys\nsys.exit('the fake tensorflow 2.15.99 of ' + __file__)\n"
SOURCES = (
    (PACKAGE, "1.0", "tpuctl_probe", "VERSION = '1.0'\n"),
    ("tensorflow-cpu", "2.15.99", "tensorflow", FAKE_TF),
    ("tensorflow-estimator", "2.15.99", "tensorflow_estimator", ""),
    ("numpy", "1.0.0", "numpy", ""),
)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheels")
    folders = []
    for name, version, module, init in SOURCES:
        source = root / "src" / module
        (source / module).mkdir(parents=True)
        (source / module / "__init__.py").write_text(init)
        (source / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\n[tool.setuptools]\npackages = ["{module}"]\n'
        )
        folders.append(str(source))
    out = root / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-w", str(out), *folders],
        check=True, capture_output=True, timeout=300, env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )  # fmt: skip
    return out


@pytest.fixture
def offline(wheels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip finds packages in the wheel folder alone, as a pip.conf with no-index and find-links would make it."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))


def leftovers(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir() if path.name.startswith(BUILDING))


def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.mark.usefixtures("offline")
def test_a_build_that_fails_leaves_nothing_in_use_and_says_pips_words(tmp_path: Path) -> None:
    env = Env(tmp_path / "tf9.9-py3.11-fedcba987654", sys.executable, (f"{PACKAGE}==9.9",))
    with pytest.raises(TpuctlError) as failed:
        ensure(env, lambda line: None)
    assert failed.value.message.startswith(f"could not build the rehearsal's environment ({PACKAGE}==9.9): ERROR: ")
    assert f"{PACKAGE}==9.9" in failed.value.message.split("ERROR: ", 1)[1] and failed.value.hint == f"pip's output: {env.log}"
    assert not env.folder.exists() and leftovers(tmp_path) == [] and env.log.is_file()


def test_a_rehearsal_under_another_tensorflow_builds_its_environment_once_before_the_run_and_its_worker_runs_there(
    wheels: Path, tmp_path: Path
) -> None:
    """The launch's own path: `--rehearse --runtime` plans the environment, builds it into place before the preflight
    and the worker (the stand-in TensorFlow says whose it is; a killed build's leftover goes), and the next launch
    finds it built and says nothing of building."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    script = tmp_path / "train.py"
    script.write_text("print('never reached: the runtime imports TensorFlow first')\n")
    args = ["launch", str(script), "--rehearse", "v2-8", "--runtime", "tpu-vm-tf-2.15.1-pjrt"]
    dry = json.loads(run_tpuctl(*args, "--dry-run", "--json", env=env, timeout=120).stdout)["rehearsal_runtime"]["environment"]
    folder = Path(dry["folder"])
    assert folder.parent == tmp_path / "cache" / "tpuctl" / "rehearse" and not dry["ready"]
    folder.parent.mkdir(parents=True)
    (folder.parent / f"{BUILDING}{folder.name}-{dead_pid()}-0000").mkdir()  # a build whose tpuctl was killed
    first = run_tpuctl(*args, "--log-dir", str(tmp_path / "one"), env=env, timeout=240)
    planned = f"rehearsing under tpu-vm-tf-2.15.1-pjrt's TensorFlow 2.15 (--runtime) in its environment {folder} (built before the run starts, once: about 1.6"
    assert planned in first.stderr, first.stderr
    assert f"tpuctl: building the rehearsal's environment once: tensorflow-cpu==2.15.* tensorflow-estimator==2.15.* numpy<2 into {folder}" in first.stderr
    assert f"the fake tensorflow 2.15.99 of {folder}/lib/" in first.stdout + first.stderr, first.stdout + first.stderr
    assert first.returncode != 0 and leftovers(folder.parent) == []
    marker = json.loads((folder / READY).read_text())
    assert marker["pins"] == dry["pins"] == ["tensorflow-cpu==2.15.*", "tensorflow-estimator==2.15.*", "numpy<2"] and marker["python"] == sys.executable
    again = run_tpuctl(*args, "--log-dir", str(tmp_path / "two"), env=env, timeout=240)
    assert f"in its environment {folder} (built)" in again.stderr and "building the rehearsal's environment" not in again.stderr
    assert f"the fake tensorflow 2.15.99 of {folder}/lib/" in again.stdout + again.stderr

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
import time
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
    out = root / "wheels"
    for name, version, module, init in SOURCES:
        source = root / "src" / module
        (source / module).mkdir(parents=True)
        (source / module / "__init__.py").write_text(init)
        (source / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\n[tool.setuptools]\npackages = ["{module}"]\n'
        )
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-w", str(out), str(source)],
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
def test_an_environment_is_built_once_into_place_and_reused(tmp_path: Path) -> None:
    env = Env(tmp_path / "tf9.9-py3.11-0123456789ab", sys.executable, (f"{PACKAGE}==1.0",))
    stale = tmp_path / f"{BUILDING}{env.folder.name}-{dead_pid()}-0000"  # a build whose tpuctl was killed
    stale.mkdir()
    said: list[str] = []
    ensure(env, said.append)
    assert env.ready and leftovers(tmp_path) == []  # the killed build's folder went too
    assert len(said) == 1 and said[0].startswith(f"building the rehearsal's environment once: {PACKAGE}==1.0 into {env.folder}")
    probe = "import tpuctl_probe, sys; print(tpuctl_probe.VERSION, sys.prefix)"
    ran = subprocess.run([str(env.python), "-c", probe], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["1.0", str(env.folder)]  # renamed into place, it runs from there
    marker = json.loads((env.folder / READY).read_text())
    assert marker["pins"] == [f"{PACKAGE}==1.0"] and marker["python"] == sys.executable
    began = time.monotonic()
    ensure(env, said.append)
    assert len(said) == 1 and time.monotonic() - began < 0.5  # built: nothing said, nothing run


@pytest.mark.usefixtures("offline")
def test_a_build_that_fails_leaves_nothing_in_use_and_says_pips_words(tmp_path: Path) -> None:
    env = Env(tmp_path / "tf9.9-py3.11-fedcba987654", sys.executable, (f"{PACKAGE}==9.9",))
    with pytest.raises(TpuctlError) as failed:
        ensure(env, lambda line: None)
    assert failed.value.message.startswith(f"could not build the rehearsal's environment ({PACKAGE}==9.9): ERROR: ")
    assert f"{PACKAGE}==9.9" in failed.value.message.split("ERROR: ", 1)[1] and failed.value.hint == f"pip's output: {env.log}"
    assert not env.folder.exists() and leftovers(tmp_path) == [] and env.log.is_file()


@pytest.mark.usefixtures("offline")
def test_a_build_that_another_launch_finished_first_uses_that_one(tmp_path: Path) -> None:
    env = Env(tmp_path / "tf9.9-py3.11-aaaaaaaaaaaa", sys.executable, (f"{PACKAGE}==1.0",))

    def theirs_lands(line: str) -> None:  # said as this build begins: another launch's build of the same is in place
        (env.folder / "bin").mkdir(parents=True)
        os.symlink(sys.executable, env.folder / "bin" / "python")
        (env.folder / READY).write_text("{}\n")

    ensure(env, theirs_lands)
    assert (env.folder / READY).read_text() == "{}\n" and leftovers(tmp_path) == []  # theirs kept, ours gone


def test_a_rehearsal_under_another_tensorflow_builds_its_environment_before_the_run_and_its_worker_runs_there(
    wheels: Path, tmp_path: Path
) -> None:
    """The launch's own path: `--rehearse --runtime` plans the environment, builds it before the preflight and the
    worker (the stand-in TensorFlow says whose it is), and a second launch finds it built."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    script = tmp_path / "train.py"
    script.write_text("print('never reached: the runtime imports TensorFlow first')\n")
    args = ["launch", str(script), "--rehearse", "v2-8", "--runtime", "tpu-vm-tf-2.15.1-pjrt"]
    first = run_tpuctl(*args, "--log-dir", str(tmp_path / "one"), env=env, timeout=240)
    (folder,) = [path for path in (tmp_path / "cache" / "tpuctl" / "rehearse").glob("tf2.15-*") if path.is_dir()]  # not its .log
    planned = f"rehearsing under tpu-vm-tf-2.15.1-pjrt's TensorFlow 2.15 (--runtime) in its environment {folder} (built before the run starts, once)"
    assert planned in first.stderr, first.stderr
    assert "tpuctl: building the rehearsal's environment once: tensorflow-cpu==2.15.* tensorflow-estimator==2.15.* numpy<2 into" in first.stderr
    assert f"the fake tensorflow 2.15.99 of {folder}/lib/" in first.stdout + first.stderr, first.stdout + first.stderr
    assert first.returncode != 0 and (folder / READY).is_file()
    again = run_tpuctl(*args, "--log-dir", str(tmp_path / "two"), env=env, timeout=240)
    assert f"in its environment {folder} (built)" in again.stderr and "building the rehearsal's environment" not in again.stderr
    assert f"the fake tensorflow 2.15.99 of {folder}/lib/" in again.stdout + again.stderr

"""What a `--rehearse` runs on (tpuctl/launch/tfpair/rehearsal.py, envs.py): this machine's TensorFlow, or a TPU image's
in an environment of its own under tpuctl's cache, or an interpreter named for that TensorFlow line; refusals in one line.

Where a test needs a TensorFlow this machine does not have, the rehearsing interpreter is a small executable that answers
tpuctl's two questions as an interpreter with that TensorFlow would (its metadata as JSON, its Python version); tpuctl's
own code is the real one throughout. The real build of an environment (venv + pip) is tests/integration/test_rehearse_envs.py.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.standins.cli_calls import in_process
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import Job
from tpuctl.launch.tfpair import envs, rehearsal


def interpreter(folder: Path, versions: dict[str, str], python: str = "3.11") -> str:
    """An executable answering as a Python `python` with `versions` installed: the metadata query, the version query."""
    path = folder / f"python-{len(list(folder.glob('python-*')))}"
    path.write_text(f"#!/bin/sh\ncase \"$2\" in\n  *version_info*) echo {python} ;;\n  *) echo '{json.dumps(versions)}' ;;\nesac\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def rehearsing(python: str, runtime: str | None = None, accelerator: str = "v2-8") -> rehearsal.Runtime:
    found = rehearsal.resolve(Job(script="train.py", rehearse=accelerator, python=python, runtime=runtime))
    assert found is not None
    return found


def test_no_image_named_rehearses_here_and_says_which_image_new_tpu_would_run(home: Path, tmp_path: Path) -> None:
    newer = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0", "keras": "3.15.1"})
    runtime = rehearsing(newer)
    assert (runtime.python, runtime.image, runtime.env) == (newer, None, None)
    (line,) = runtime.lines
    assert line == (
        f"rehearsing on TensorFlow 2.21.0 with Keras 3.15.1 ({newer}), which no TPU image has: `--new-tpu v2-8` would run "
        "tpu-vm-tf-2.17.0-pjrt (TensorFlow 2.17); --runtime tpu-vm-tf-2.17.0-pjrt rehearses under 2.17 (its environment is built once: about 1.6 GB)"
    )
    same = rehearsing(interpreter(tmp_path, {"tensorflow": "2.17.0"}))
    assert same.lines[0].endswith("`--new-tpu v2-8` would run tpu-vm-tf-2.17.0-pjrt, the same TensorFlow 2.17")


def test_an_image_of_the_same_tensorflow_line_rehearses_here(home: Path, tmp_path: Path) -> None:
    older = interpreter(tmp_path, {"tensorflow-cpu": "2.15.1", "keras": "2.15.0"})
    runtime = rehearsing(older, "tpu-vm-tf-2.15.0-pjrt")
    assert (runtime.python, runtime.image, runtime.env) == (older, "tpu-vm-tf-2.15.0-pjrt", None)
    assert runtime.lines == (f"rehearsing under tpu-vm-tf-2.15.0-pjrt (--runtime) on TensorFlow 2.15.1 with Keras 2.15.0 ({older}): the same TensorFlow 2.15",)


def test_another_tensorflow_line_runs_in_its_environment_under_the_cache(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    newer = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0"})
    runtime = rehearsing(newer, "tpu-vm-tf-2.15.1-pjrt")
    assert runtime.env is not None and runtime.python == str(runtime.env.python) and not runtime.env.ready
    assert runtime.env.folder.parent == tmp_path / "cache" / "tpuctl" / "rehearse" and runtime.env.folder.name.startswith("tf2.15-py3.11-")
    assert runtime.env.base_python == newer and runtime.env.pins == envs.pins((2, 15))
    said = f"rehearsing under tpu-vm-tf-2.15.1-pjrt's TensorFlow 2.15 (--runtime) in its environment {runtime.env.folder} (built before the run starts, once)"
    assert runtime.lines == (said,)
    assert runtime.to_json()["environment"] == {"folder": str(runtime.env.folder), "pins": list(runtime.env.pins), "ready": False}
    monkeypatch.setenv("TPUCTL_RUNTIME_VERSION", "tpu-vm-tf-2.15.1-pod-pjrt")  # the image --new-tpu and create use
    from_setting = rehearsing(newer)
    assert from_setting.env == runtime.env and "(runtime-version from TPUCTL_RUNTIME_VERSION)" in from_setting.lines[0]


def test_an_interpreter_named_for_a_tensorflow_line_is_used_and_checked(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    newer = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0"})
    monkeypatch.setenv("TPUCTL_REHEARSE_PYTHON_2_15", interpreter(tmp_path, {"tensorflow-cpu": "2.15.1"}))
    runtime = rehearsing(newer, "tpu-vm-tf-2.15.1-pjrt")
    assert (runtime.python, runtime.env) == (os.environ["TPUCTL_REHEARSE_PYTHON_2_15"], None)
    wrong = interpreter(tmp_path, {"tensorflow": "2.16.1"})
    monkeypatch.setenv("TPUCTL_REHEARSE_PYTHON_2_15", wrong)
    with pytest.raises(TpuctlError, match=f"TPUCTL_REHEARSE_PYTHON_2_15={wrong} has TensorFlow 2.16.1, not 2.15"):
        rehearsing(newer, "tpu-vm-tf-2.15.1-pjrt")


def test_a_python_that_tensorflow_has_no_wheels_for_is_refused_before_any_build(home: Path, tmp_path: Path) -> None:
    newest = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0"}, python="3.12")
    refused = r"TensorFlow 2\.15 has wheels for Python 3\.9 to 3\.11, and the rehearsal's environment would be built from Python 3\.12"
    with pytest.raises(TpuctlError, match=refused):
        rehearsing(newest, "tpu-vm-tf-2.15.1-pjrt")


def test_the_pins_of_2_15_are_the_compatibility_tests_own() -> None:
    listed = (ROOT / "tests" / "integration" / "scripts" / "compat" / "requirements-tf215.txt").read_text().splitlines()
    assert envs.pins((2, 15, 1)) == tuple(line for line in listed if line and not line.startswith("#"))
    assert envs.pins((2, 21, 0)) == ("tensorflow-cpu==2.21.*",)  # Keras 3 comes with it


def test_extra_pins_are_another_environment(tmp_path: Path) -> None:
    plain = envs.planned((2, 16, 1), sys.executable, root=tmp_path)
    more = envs.planned((2, 16, 1), sys.executable, ("tensorflow-datasets==4.9.7",), root=tmp_path)
    assert plain.folder != more.folder and more.pins == (*plain.pins, "tensorflow-datasets==4.9.7")
    assert plain == envs.planned((2, 16, 0), sys.executable, root=tmp_path)  # one per TensorFlow line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--runtime", "tpu-vm-tf-2.15.1-pjrt"], "Error: --runtime is for --rehearse: the TensorFlow image a rehearsal runs under"),
        (["--rehearse", "v2-8", "--runtime", "v2-alpha-tpuv6e"], "Error: --runtime v2-alpha-tpuv6e: not a TPU VM image with TensorFlow"),
        (["--rehearse", "v2-8", "--runtime", "tpu-vm-tf-2.15"], "Error: --runtime tpu-vm-tf-2.15: not a TPU VM image with TensorFlow"),
    ],
)
def test_a_runtime_that_cannot_be_rehearsed_is_one_line(home: Path, args: list[str], said: str) -> None:
    result = in_process("launch", "train.py", *args, "--dry-run")
    assert result.code == 2 and result.one_line_error and result.err.startswith(said), result.err


def test_a_rehearsals_dry_run_says_what_it_runs_on(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = in_process("launch", "train.py", "--rehearse", "v2-8", "--runtime", "tpu-vm-tf-2.15.1-pjrt", "--dry-run", "--json")
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    planned = shown["rehearsal_runtime"]
    assert planned["image"] == "tpu-vm-tf-2.15.1-pjrt" and planned["environment"]["ready"] is False
    assert shown["workers"][0]["argv"][0] == planned["python"] == str(Path(planned["environment"]["folder"]) / "bin" / "python")
    assert not (tmp_path / "cache" / "tpuctl" / "rehearse").exists()  # a dry run builds nothing


def finished(folder: Path, marker: str) -> Path:
    """A folder as a finished build leaves it: an interpreter in bin/, the .ready marker."""
    (folder / "bin").mkdir(parents=True)
    os.symlink(sys.executable, folder / "bin" / "python")
    (folder / envs.READY).write_text(marker)
    return folder


def test_a_build_another_launch_finished_first_is_the_one_used_and_a_stranger_in_the_way_is_refused(tmp_path: Path) -> None:
    env = envs.Env(tmp_path / "tf2.15-py3.11-aaaaaaaaaaaa", sys.executable, envs.pins((2, 15)))
    finished(env.folder, "theirs")
    ours = finished(tmp_path / f"{envs.BUILDING}{env.folder.name}-1-0000", "ours")
    envs._into_place(ours, env)
    assert (env.folder / envs.READY).read_text() == "theirs"  # theirs stays in place; ensure() removes ours
    stranger = envs.Env(tmp_path / "tf2.16-py3.11-bbbbbbbbbbbb", sys.executable, envs.pins((2, 16)))
    stranger.folder.mkdir()
    with pytest.raises(TpuctlError, match="is in the way of the rehearsal's environment: it is not one tpuctl built"):
        envs._into_place(finished(tmp_path / "ours-2", "ours"), stranger)
    alone = envs.Env(tmp_path / "tf2.17-py3.11-cccccccccccc", sys.executable, envs.pins((2, 17)))
    envs._into_place(finished(tmp_path / "ours-3", "ours"), alone)
    assert alone.ready and not (tmp_path / "ours-3").exists()

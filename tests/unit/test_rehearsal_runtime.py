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
from tpuctl.launch.tfpair import choice, envs, rehearsal
from tpuctl.launch.tfpair.here import of_interpreter


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


@pytest.fixture
def cache(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tpuctl's cache in the test's folder: an environment of the machine's own is never found built."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tpuctl" / "rehearse"


# The default image over the catalog (tpuctl/tpu/software.py's TENSORFLOW_IMAGES): an interpreter's TensorFlow, the type
# rehearsed, the image `--new-tpu TYPE` picks, and whether that image's TensorFlow line must be built (not this one's).
DEFAULTS = [
    ({"tensorflow-cpu": "2.15.1", "keras": "2.15.0"}, "v2-8", "tpu-vm-tf-2.15.1-pjrt", None),
    ({"tensorflow": "2.18.0", "keras": "3.8.0"}, "v5litepod-8", "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", None),
    ({"tensorflow": "2.18.0", "keras": "3.8.0"}, "v4-8", "tpu-vm-tf-2.16.1-pjrt", "2.16"),
    ({"tensorflow-cpu": "2.21.0", "keras": "3.15.1"}, "v2-8", "tpu-vm-tf-2.17.0-pjrt", "2.17"),
    ({"tensorflow-cpu": "2.21.0", "keras": "3.15.1"}, "v4-32", "tpu-vm-tf-2.16.1-pod-pjrt", "2.16"),
]


@pytest.mark.parametrize(("versions", "accelerator", "image", "built"), DEFAULTS)
def test_with_no_image_named_a_rehearsal_stands_for_the_image_new_tpu_would_pick(
    cache: Path, tmp_path: Path, versions: dict[str, str], accelerator: str, image: str, built: str | None
) -> None:
    python = interpreter(tmp_path, versions)
    runtime = rehearsing(python, accelerator=accelerator)
    here = of_interpreter(python)
    picked = choice.image_for(accelerator, here)
    assert picked is not None and picked.name == image and runtime.image == image
    why = f"the image `--new-tpu {accelerator}` would run: {picked.why.removeprefix('picked: ')}"
    if built is None:  # the same X.Y: no build, the interpreter as it is
        assert (runtime.python, runtime.env) == (python, None)
        line = ".".join(versions.get("tensorflow", versions.get("tensorflow-cpu", "")).split(".")[:2])
        assert runtime.lines == (f"rehearsing under {image} ({why}) on {here.describe()} ({python}): the same TensorFlow {line}",)
        return
    assert runtime.env is not None and runtime.python == str(runtime.env.python) and runtime.env.folder.parent == cache
    assert runtime.env.pins == envs.pins(tuple(map(int, built.split(".")))) and runtime.env.base_python == python
    assert runtime.lines == (
        f"rehearsing under {image}'s TensorFlow {built} ({why}) in its environment {runtime.env.folder} (built before the run starts, once: about 1.6 GB); "
        f"--runtime local rehearses on {here.describe()} ({python}) instead",
    )


def test_runtime_local_and_an_image_without_tensorflow_rehearse_on_the_interpreter_as_it_is(cache: Path, tmp_path: Path) -> None:
    newer = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0", "keras": "3.15.1"})
    local = rehearsing(newer, "local")
    assert (local.python, local.image, local.env) == (newer, None, None)
    assert local.lines == (f"rehearsing on TensorFlow 2.21.0 with Keras 3.15.1 ({newer}): --runtime local: its TensorFlow as it is, no TPU image's",)
    v6e = rehearsing(newer, accelerator="v6e-8")  # its generation has no TensorFlow image: its base image
    assert (v6e.python, v6e.image, v6e.env) == (newer, None, None)
    assert v6e.lines[0].startswith(f"rehearsing on TensorFlow 2.21.0 with Keras 3.15.1 ({newer}): v2-alpha-tpuv6e (the image `--new-tpu v6e-8` would run: ")
    assert v6e.lines[0].endswith(") has no TensorFlow to stand for")


def test_a_dry_run_says_the_default_build_and_its_cost_and_builds_nothing(cache: Path, tmp_path: Path) -> None:
    newer = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0", "keras": "3.15.1"})
    args = ("launch", "train.py", "--rehearse", "v5litepod-8", "--python", newer, "--dry-run")
    result = in_process(*args)
    assert result.code == 0, result.err
    (line,) = [line for line in result.out.splitlines() if line.startswith("rehearsing ")]
    assert line.startswith("rehearsing under tpu-vm-tf-2.18.0-pjrt-v5e-and-v6's TensorFlow 2.18 (the image `--new-tpu v5litepod-8` would run: no TPU image has")
    assert "(built before the run starts, once: about 1.6 GB)" in line
    assert line.endswith(f"--runtime local rehearses on TensorFlow 2.21.0 with Keras 3.15.1 ({newer}) instead")
    planned = json.loads(in_process(*args, "--json").out)["rehearsal_runtime"]
    assert planned["image"] == "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6" and planned["said"] == [line] and planned["environment"]["ready"] is False
    assert not cache.exists()


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
    where = f"in its environment {runtime.env.folder} (built before the run starts, once: about 1.6 GB)"
    said = f"rehearsing under tpu-vm-tf-2.15.1-pjrt's TensorFlow 2.15 (--runtime) {where}"
    assert runtime.lines == (said,)
    folder, pins = str(runtime.env.folder), list(runtime.env.pins)
    assert runtime.to_json()["environment"] == {"folder": folder, "pins": pins, "constraints": [], "over": None, "index_url": None, "ready": False}
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


# -- the run's requirements in the rehearsal's environment ------------------------------------------------------------


def requirements_file(folder: Path, text: str) -> str:
    path = folder / "requirements.txt"
    path.write_text(text)
    return str(path)


def with_requirements(python: str, requirements: str, runtime: str | None = None, index_url: str | None = None) -> rehearsal.Runtime:
    job = Job(script="train.py", rehearse="v2-8", python=python, runtime=runtime, requirements=requirements, index_url=index_url)
    found = rehearsal.resolve(job)
    assert found is not None
    return found


def test_requirements_go_into_the_image_environment_with_tensorflows_pins_as_constraints(cache: Path, tmp_path: Path) -> None:
    newer = interpreter(tmp_path, {"tensorflow-cpu": "2.21.0"})
    given = requirements_file(tmp_path, "# what train.py imports\ntensorflow-datasets>=4.9  # datasets\nkeras-hub>=0.18 ; python_version >= '3.9'\n")
    runtime = with_requirements(newer, given, "tpu-vm-tf-2.15.1-pjrt", index_url="https://me:s3cret@pypi.example/simple")
    env = runtime.env
    assert env is not None and not env.over_base and env.base_python == newer
    assert env.pins == (*envs.pins((2, 15)), "tensorflow-datasets>=4.9", "keras-hub>=0.18 ; python_version >= '3.9'")
    assert env.constraints == ("tensorflow==2.15.*", "tensorflow-cpu==2.15.*")  # whichever build a requirement pulls in
    plain = rehearsing(newer, "tpu-vm-tf-2.15.1-pjrt").env
    assert plain is not None and env.folder.parent == plain.folder.parent and env.folder != plain.folder
    hidden = "https://<hidden: 9 characters>@pypi.example/simple"
    into = f"into that environment: {env.folder} (built before the run starts, once)"
    assert runtime.lines[1] == f"the run's requirements ({given}) are installed from {hidden} {into}"
    assert "s3cret" not in json.dumps(runtime.to_json()) and runtime.to_json()["environment"]["index_url"] == hidden  # type: ignore[index]
    Path(given).write_text("tensorflow-datasets>=4.9\nkeras-hub>=0.19\n")  # a changed file is another environment
    changed = with_requirements(newer, given, "tpu-vm-tf-2.15.1-pjrt", index_url="https://me:s3cret@pypi.example/simple").env
    assert changed is not None and changed.folder not in (env.folder, plain.folder)
    Path(given).write_text("# the same requests, other words\ntensorflow-datasets>=4.9\nkeras-hub>=0.19   # newer\n")
    assert with_requirements(newer, given, "tpu-vm-tf-2.15.1-pjrt", index_url="https://me:s3cret@pypi.example/simple").env == changed


def test_requirements_over_an_interpreter_that_has_the_images_tensorflow_go_into_a_venv_over_it(cache: Path, tmp_path: Path) -> None:
    older = interpreter(tmp_path, {"tensorflow-cpu": "2.15.1", "keras": "2.15.0", "tf-keras": "2.15.0"})
    given = requirements_file(tmp_path, "tensorflow-datasets>=4.9\n")
    runtime = with_requirements(older, given)  # the default image: tpu-vm-tf-2.15.1-pjrt, this TensorFlow's
    env = runtime.env
    assert env is not None and env.over_base and runtime.python == str(env.python) and runtime.image == "tpu-vm-tf-2.15.1-pjrt"
    assert (env.base_python, env.pins, env.constraints, env.folder.parent) == (older, ("tensorflow-datasets>=4.9",), ("tensorflow-cpu==2.15.1",), cache)
    assert runtime.lines[0].startswith("rehearsing under tpu-vm-tf-2.15.1-pjrt (the image `--new-tpu v2-8` would run: ")
    assert runtime.lines[0].endswith("the same TensorFlow 2.15")
    over = f"a venv over {older} that keeps its TensorFlow"
    assert runtime.lines[1] == f"the run's requirements ({given}) are installed into {over}: {env.folder} (built before the run starts, once)"
    other = with_requirements(interpreter(tmp_path, {"tensorflow-cpu": "2.15.1"}), given).env
    assert other is not None and other.folder != env.folder  # one per interpreter: the venv runs it
    local = with_requirements(interpreter(tmp_path, {"tensorflow": "2.21.0"}), given, "local")
    assert local.env is not None and local.env.over_base and local.image is None and local.env.constraints == ("tensorflow==2.21.0",)


def test_hashes_are_left_to_the_hosts_and_said_as_pip_would_want_one_for_tensorflow_too(cache: Path, tmp_path: Path) -> None:
    older = interpreter(tmp_path, {"tensorflow-cpu": "2.15.1"})
    given = requirements_file(tmp_path, f"tensorflow-datasets==4.9.3 --hash=sha256:{'a' * 64}\n")
    runtime = with_requirements(older, given)
    assert runtime.env is not None and runtime.env.pins == ("tensorflow-datasets==4.9.3",)
    assert runtime.lines[1].endswith("; their --hash options are checked on the hosts, not here (pip would want one for TensorFlow too)")


def test_a_requirement_that_would_replace_the_images_tensorflow_is_refused_as_on_a_tpu_vm(cache: Path, tmp_path: Path) -> None:
    requirements_file(tmp_path / "work", "tensorflow-datasets>=4.9\ntensorflow==2.21.0\n")
    result = in_process("launch", "train.py", "--rehearse", "v2-8", "--runtime", "tpu-vm-tf-2.15.1-pjrt", "--requirements", "requirements.txt", "--dry-run")
    assert result.code == 2 and result.one_line_error, result.err
    assert "requirements.txt:2: 'tensorflow==2.21.0' would install a TensorFlow without TPU support" in result.err
    assert "on a TPU VM of image tpu-vm-tf-2.15.1-pjrt" in result.err and not cache.exists()


def test_of_local_launches_a_rehearsal_alone_takes_requirements_and_an_index(cache: Path, tmp_path: Path) -> None:
    given = requirements_file(tmp_path / "work", "tensorflow-datasets>=4.9\n")
    args = ("--rehearse", "v2-8", "--runtime", "local", "--requirements", "requirements.txt", "--index-url", "https://pypi.example/simple")
    rehearsed = in_process("launch", "train.py", *args, "--dry-run")
    assert rehearsed.code == 0, rehearsed.err
    assert f"the run's requirements (requirements.txt) are installed from https://pypi.example/simple into a venv over {sys.executable}" in rehearsed.out
    assert "[launch] requirements and setup are for hosts" not in rehearsed.out and Path(given).is_file() and not cache.exists()
    (tmp_path / "work" / "tpuctl.toml").write_text('[launch]\nrequirements = "requirements.txt"\nsetup = "true"\n')  # a table's: installed / said
    tabled = in_process("launch", "train.py", "--rehearse", "v2-8", "--runtime", "local", "--dry-run", "--json")
    assert tabled.code == 0, tabled.err
    planned = json.loads(tabled.out)
    assert planned["notes"] == ["[launch] setup is for hosts (--hosts, --tpu, --new-tpu): a rehearsal installs the requirements alone"]
    assert planned["rehearsal_runtime"]["environment"]["pins"] == ["tensorflow-datasets>=4.9"]
    (tmp_path / "work" / "tpuctl.toml").unlink()
    for args, says in (
        (("--requirements", "requirements.txt"), "Error: --requirements is for hosts (--hosts, --tpu, --new-tpu)"),
        (("--index-url", "https://pypi.example/simple"), "Error: --index-url is for hosts (--hosts, --tpu, --new-tpu)"),
        (("--rehearse", "v2-8", "--runtime", "local", "--setup", "true"), "Error: --setup is for hosts"),
    ):
        result = in_process("launch", "train.py", *args, "--dry-run")
        assert result.code == 2 and result.one_line_error and result.err.startswith(says), result.err


TPU_ENV: dict[str, str | None] = {"TPUCTL_PROJECT": "my-project", "TPUCTL_ZONE": "us-central1-a", "TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--new-tpu", "v4-8", "--keep"], "(the image `--new-tpu v4-8` would run: "),
        (["--tpu", "my-tpu", "--sync"], "rehearsing under tpu-vm-tf-2.15.1-pod-pjrt's TensorFlow 2.15 (node my-tpu's image, from its saved spec)"),
        (["--tpu", "someones-tpu", "--runtime", "tpu-vm-tf-2.16.1-pjrt"], "rehearsing under tpu-vm-tf-2.16.1-pjrt's TensorFlow 2.16 (--runtime)"),
    ],
    ids=["new-tpu", "saved-spec", "runtime-given"],
)
def test_a_rehearsal_added_to_a_tpu_launch_stands_in_for_it_under_that_tpu_s_image_with_no_cloud_call(home: Path, args: list[str], says: str) -> None:
    """The launch a user means to run on a TPU, with --rehearse added: rehearsed here under the image that TPU runs
    (--new-tpu's pick, a node's saved spec, or --runtime), the TPU's own flags said as left out; the TPU API (a port
    nobody listens on) is never asked."""
    from tpuctl.cloud.nodes import nodespec

    nodespec.save(nodespec.NodeSpec("my-tpu", "my-project", "us-central2-b", "tpu-vm-tf-2.15.1-pod-pjrt", "v4-32"))
    accelerator = "v4-32" if "my-tpu" in args else "v4-8"
    result = in_process("launch", "train.py", "--rehearse", accelerator, *args, "--dry-run", env=TPU_ENV)
    assert result.code == 0, result.err
    assert says in result.out, result.out
    ignored = {flag for flag in args if flag.startswith("--") and flag != "--runtime"}
    [line] = [line for line in result.out.splitlines() if line.startswith("rehearsing here what the launch would run on a TPU: ")]
    assert set(line.split(": ", 1)[1].split(" left out")[0].split(", ")) == ignored, line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--rehearse", "v4-8", "--new-tpu", "v5litepod-8"],
            "Error: --rehearse v4-8 with --new-tpu v5litepod-8: a rehearsal stands in for the TPU the launch makes (--rehearse v5litepod-8)",
        ),
        (
            ["--rehearse", "v4-8", "--tpu", "someones-tpu"],
            "tpuctl has no saved spec of node someones-tpu (one `tpuctl create` made), so its image is not known here (`--rehearse v4-8 --runtime IMAGE`",
        ),
        (["--rehearse", "v4-8", "--tpu", "my-tpu"], "Error: --rehearse v4-8 with --tpu my-tpu, a v4-32 (--rehearse v4-32)"),
    ],
    ids=["another-type", "no-saved-spec", "not-the-node-s-type"],
)
def test_a_rehearsal_of_a_tpu_launch_it_cannot_stand_in_for_is_one_line_before_any_cloud_call(home: Path, args: list[str], says: str) -> None:
    from tpuctl.cloud.nodes import nodespec

    nodespec.save(nodespec.NodeSpec("my-tpu", "my-project", "us-central2-b", "tpu-vm-tf-2.15.1-pod-pjrt", "v4-32"))
    result = in_process("launch", "train.py", *args, "--dry-run", env=TPU_ENV)
    assert result.code == 2 and result.one_line_error and says in result.err, result.err

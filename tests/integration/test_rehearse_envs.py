"""The rehearsal's environments built for real (tpuctl/launch/tfpair/envs.py): `python -m venv` and pip, from a folder
of real wheels with no index (PIP_NO_INDEX, PIP_FIND_LINKS: pip's own configuration, as a user's pip.conf would
give it), so no TensorFlow is downloaded: the builder is the same one that installs tensorflow-cpu. The run's
requirements come from the tests' PEP 503 index of real wheels (tests/standins/package_index.py) as --index-url,
into a venv over an interpreter whose TensorFlow is kept; one rehearsal with real TensorFlow (the compatibility tests'
2.15) imports such a requirement.

The wheels are made in the test (tests/standins/tiny_wheels.py); for a launch, tiny packages of the names a
TensorFlow 2.15 environment pins stand in for tensorflow-cpu and its company.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuctl
from tests.standins.package_index import PackageIndex, Wheels
from tests.standins.tiny_wheels import make_wheel
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.tfpair.envs import BASE_PTH, BUILDING, READY, Env, ensure, over

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
    out = tmp_path_factory.mktemp("wheels")
    for name, version, module, init in SOURCES:
        make_wheel(out, name, version, {f"{module}/__init__.py": init})
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


# -- the run's requirements ----------------------------------------------------------------------------------------

USER, SECRET = "reader", "s3cret-token-1234"


@pytest.fixture(scope="module")
def index(package_wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    """The tests' packages, and one that needs a TensorFlow no rehearsal here has, behind HTTP Basic auth."""
    folder = package_wheels.folder(tmp_path_factory.mktemp("index"))
    make_wheel(folder, "tpuctl-test-needs-tf", "1.0", {"tpuctl_test_needs_tf.py": ""}, requires=("tensorflow-cpu>=2.16",))
    with PackageIndex(folder, credentials=(USER, SECRET)) as served:
        yield served


def with_tensorflow(tmp_path: Path) -> str:
    """An interpreter that is itself a venv holding a TensorFlow (a tiny tensorflow-cpu 2.15.99, installed as pip installs
    a wheel of pure Python: unpacked into its site-packages): what a user's project venv is."""
    base = tmp_path / "project-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True, capture_output=True, timeout=120)
    python = str(base / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True, check=True).stdout.strip()
    wheel = make_wheel(tmp_path, "tensorflow-cpu", "2.15.99", {"tensorflow/__init__.py": "__version__ = '2.15.99'\n"})
    with zipfile.ZipFile(wheel) as unpacked:
        unpacked.extractall(site)
    return python


def seen(python: str, code: str) -> Any:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=60, check=True)
    return json.loads(done.stdout)


WHERE = "import json, importlib.util as u; print(json.dumps({n: (u.find_spec(n) or None) and u.find_spec(n).origin for n in NAMES}))"


def test_requirements_go_into_a_venv_over_the_interpreter_which_keeps_its_tensorflow_and_is_left_alone(index: PackageIndex, tmp_path: Path) -> None:
    base = with_tensorflow(tmp_path)
    env = over(base, ["tensorflow-cpu==2.15.99"], ["tpuctl-test-beta"], root=tmp_path / "cache", index_url=index.url)
    said: list[str] = []
    ensure(env, said.append)
    assert env.ready and env.folder.name.startswith("over-py") and leftovers(tmp_path / "cache") == []
    (line,) = said
    kept = "(its site-packages visible; kept: tensorflow-cpu==2.15.99)"
    assert line.startswith(f"building the rehearsal's environment once: tpuctl-test-beta over {base} {kept}")
    assert SECRET not in line
    names = ["tensorflow", "tpuctl_test_beta", "tpuctl_test_alpha"]
    where = seen(str(env.python), WHERE.replace("NAMES", repr(names)))
    assert where["tensorflow"].startswith(str(tmp_path / "project-venv"))  # the interpreter's own, through the .pth
    assert where["tpuctl_test_beta"].startswith(str(env.folder)) and where["tpuctl_test_alpha"].startswith(str(env.folder))  # beta's dependency too
    assert (env.folder / "lib").is_dir() and list(env.folder.glob(f"lib/python*/site-packages/{BASE_PTH}"))
    assert seen(base, WHERE.replace("NAMES", repr(names[1:]))) == {"tpuctl_test_beta": None, "tpuctl_test_alpha": None}  # never touched
    assert index.asked["tpuctl-test-beta"] >= 1


def test_a_requirement_that_cannot_be_installed_is_one_line_exit_2_and_leaves_nothing_built(index: PackageIndex, tmp_path: Path) -> None:
    """A requirement that needs another TensorFlow than the one kept: TensorFlow's pin wins, in pip's words. (An
    unresolvable one fails the same way: test_a_build_that_fails_leaves_nothing_in_use_and_says_pips_words.)"""
    base = with_tensorflow(tmp_path)
    (tmp_path / "requirements.txt").write_text("tpuctl-test-needs-tf\n")
    script = tmp_path / "train.py"
    script.write_text("print('never reached: the environment is built first')\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull}
    args = ["--rehearse", "v2-8", "--runtime", "local", "--python", base, "--requirements", str(tmp_path / "requirements.txt")]
    args += ["--index-url", index.url]
    result = run_tpuctl("launch", str(script), *args, "--log-dir", str(tmp_path / "logs"), env=env, timeout=240)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    said = "Error: could not build the rehearsal's environment (tpuctl-test-needs-tf): ERROR: Cannot install tpuctl-test-needs-tf==1.0: "
    assert len(errors) == 1 and errors[0].startswith(said), result.stderr
    assert "tpuctl-test-needs-tf 1.0 depends on tensorflow-cpu>=2.16; The user requested (constraint) tensorflow-cpu==2.15.99" in errors[0]
    assert "Traceback" not in result.stderr and SECRET not in result.stdout + result.stderr and "never reached" not in result.stdout
    root = tmp_path / "cache" / "tpuctl" / "rehearse"
    assert [path.name for path in root.iterdir() if not path.name.endswith(".log")] == []  # no environment, no leftover


@pytest.mark.tf
def test_a_rehearsal_under_the_default_image_imports_the_runs_requirement_with_real_tensorflow(index: PackageIndex, tmp_path: Path) -> None:
    """TensorFlow 2.15 (the compatibility tests' environment, as --python) has a TPU image of its own line, so the default
    rehearses on it as it is, and the requirement goes into a venv over it: the script imports it beside 2.15."""
    from tests.integration.compat_env import tf215_env

    worker = tf215_env()
    (tmp_path / "requirements.txt").write_text("tpuctl-test-beta\n")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_TPU_ADDR", "TPU_NAME", "TPUCTL_RUNTIME_VERSION")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PIP_CONFIG_FILE=os.devnull, TPUCTL_CONFIG=str(tmp_path / "none.toml"))
    args = ["--rehearse", "v2-8", "--python", str(worker.python), "--requirements", str(tmp_path / "requirements.txt"), "--index-url", index.url]
    result = run_tpuctl("launch", str(script), *args, "--log-dir", str(tmp_path / "logs"), env=env, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    image = "tpu-vm-tf-2.15.1-pjrt"
    assert f"tpuctl: rehearsing under {image} (the image `--new-tpu v2-8` would run: this machine's TensorFlow {worker.tf_version})" in result.stderr
    assert f"the run's requirements ({tmp_path / 'requirements.txt'}) are installed from http://<hidden" in result.stderr and SECRET not in output
    (folder,) = [path for path in (tmp_path / "cache" / "tpuctl" / "rehearse").glob("over-py*") if path.is_dir()]
    imported = json.loads(next(line for line in result.stdout.splitlines() if '"requirement"' in line).split(" ", 1)[1])
    assert imported["requirement"].startswith(str(folder)) and imported["tensorflow"] == worker.tf_version
    assert f"tpuctl: rehearsal of v2-8: 8 replicas on TensorFlow {worker.tf_version}" in result.stderr and f"as on {image}" in result.stderr
    assert seen(str(worker.python), WHERE.replace("NAMES", repr(["tpuctl_test_beta"]))) == {"tpuctl_test_beta": None}


# A TPU script of the Colab tutorials' kind (its own resolver, TPUStrategy, a Keras fit) that imports a requirement.
SCRIPT = """\
import json
import tensorflow as tf
import tpuctl_test_beta
print(json.dumps({"requirement": tpuctl_test_beta.__file__, "tensorflow": tf.__version__}), flush=True)
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
data = tf.data.Dataset.from_tensor_slices((tf.zeros([64, 4]), tf.zeros([64, 1]))).batch(16, drop_remainder=True)
model.fit(data, epochs=1, verbose=0)
"""

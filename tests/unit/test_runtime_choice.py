"""What each worker will build, decided without TensorFlow; strategy-only options; the plan for parameter servers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tpuctl.cluster.tf_config import Task, make_cluster
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import Job, check_strategy_options, parse_devices
from tpuctl.launch.process.plan import build_plan
from tpuctl.runtime import bootstrap, tf_version
from tpuctl.runtime.script_scan import keras2_only, scan_file
from tpuctl.runtime.worker_env import WorkerEnv, tpu_present

TWO = make_cluster(2, ["127.0.0.1:1", "127.0.0.1:2"])
ONE = make_cluster(1, ["127.0.0.1:1"])


def env(strategy: str = "auto", cluster: object = None, simulate: int = 0) -> WorkerEnv:
    return WorkerEnv(cluster=cluster, task=Task("worker", 0), strategy=strategy, scope=True, keras="auto", simulate_devices=simulate)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shape", "tpu", "expected"),
    [
        (env(), True, "tpu"),  # a TPU VM wins over everything
        (env(cluster=TWO), True, "tpu"),
        (env(cluster=TWO), False, "multi-worker-mirrored"),
        (env(cluster=ONE), False, "auto"),  # decided in TF: Mirrored with several GPUs, else the default
        (env(), False, "auto"),
        (env(simulate=8), False, "mirrored"),
        (env("one-device", TWO), True, "one-device"),  # an explicit choice is never overridden
    ],
)
def test_auto_picks_by_environment_shape(shape: WorkerEnv, tpu: bool, expected: str) -> None:
    assert shape.strategy_kind(tpu_here=tpu) == expected


def test_tpu_presence_from_device_files(tmp_path: Path) -> None:
    assert not tpu_present(tmp_path)
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # the control node every Linux with vfio has: not a TPU
    assert not tpu_present(tmp_path)
    (tmp_path / "vfio" / "0").touch()  # v5e and later
    assert tpu_present(tmp_path)
    other = tmp_path / "v4"
    other.mkdir()
    (other / "accel0").touch()  # v2-v4
    assert tpu_present(other)


def test_devices_parse() -> None:
    assert parse_devices("GPU:0,/gpu:1, /job:localhost/replica:0/task:0/device:CPU:0") == (
        "GPU:0", "/gpu:1", "/job:localhost/replica:0/task:0/device:CPU:0",
    )
    for bad in ("GPU", "GPU:0,GPU:0", "XPU:0", "GPU:0;rm -rf", ""):
        with pytest.raises(TpuctlError):
            parse_devices(bad)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("parameter-server", 2, 0, "auto", (), 0, None), "needs --ps"),
        (("multi-worker-mirrored", 2, 1, "auto", (), 0, None), "--ps is for"),
        (("mirrored", 1, 0, "nccl", (), 0, None), "--communication is for"),
        (("auto", 1, 0, "auto", ("GPU:0",), 0, None), "--devices is for"),
        (("auto", 2, 0, "auto", (), 8, None), "one device per worker"),
        (("one-device", 1, 0, "auto", (), 0, 30.0), "--tpu-timeout is for"),
    ],
)
def test_options_of_another_strategy_are_refused(args: tuple, words: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(TpuctlError) as caught:
        check_strategy_options(*args)
    assert words in str(caught.value)


def test_parameter_server_plan() -> None:
    job = Job(script="train.py", workers=2, strategy="parameter-server", ps=1, communication="auto")
    assert job.processes == 4
    plan = build_plan(job, [f"127.0.0.1:{p}" for p in range(1, 5)], run_id="r", attempt=1)
    roles = [(w.name, w.chief, w.server) for w in plan.workers]
    assert roles == [("chief:0", True, False), ("worker:0", False, True), ("worker:1", False, True), ("ps:0", False, True)]
    assert all(w.env["TPUCTL_STRATEGY"] == "parameter-server" for w in plan.workers)


def test_strategy_options_reach_every_worker_and_defaults_stay_out() -> None:
    job = Job(script="t.py", workers=2, strategy="multi-worker-mirrored", communication="ring", tpu_timeout=30)
    plan = build_plan(job, ["127.0.0.1:1", "127.0.0.1:2"], run_id="r", attempt=1)
    assert {w.env["TPUCTL_COMMUNICATION"] for w in plan.workers} == {"ring"}
    assert {w.env["TPUCTL_TPU_TIMEOUT"] for w in plan.workers} == {"30"}
    plain = build_plan(Job(script="t.py"), ["127.0.0.1:1"], run_id="r", attempt=1).workers[0].env
    assert not {"TPUCTL_COMMUNICATION", "TPUCTL_DEVICES", "TPUCTL_SIMULATE_DEVICES", "TPUCTL_TPU_TIMEOUT"} & set(plain)


# --- which Keras tf.keras is, for the script and the run it is (runtime/bootstrap.choose_keras) -------------------

SCRIPTS = Path(__file__).resolve().parents[1] / "integration" / "scripts"


def _keras2_only(tmp_path: Path, source: str) -> tuple[str, int] | None:
    script = tmp_path / "train.py"
    script.write_text(source)
    return keras2_only(str(script))


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import tensorflow as tf\n\nopt = tf.keras.optimizers.legacy.SGD()\n", ("uses tf.keras.optimizers.legacy", 3)),
        ("from tensorflow.keras.optimizers.legacy import Adam\n", ("uses tf.keras.optimizers.legacy", 1)),
        # TensorFlow's own TPU guide and custom-training tutorial, at each epoch's end:
        ("m = tf.keras.metrics.Mean()\nfor e in range(2):\n    m.reset_states()\n", ("calls reset_states()", 3)),
        ("m = tf.keras.metrics.Mean()\nm.reset_state()\n", None),  # Keras 3's name
        ("# reset_states() was Keras 2's; tf.keras.optimizers.legacy too\nm.reset_state()\n", None),  # a comment
        ("lstm = tf.keras.layers.LSTM(4, stateful=True)\nlstm.reset_states()\n", None),  # a stateful RNN's: Keras 3 too
        ('"""Not tf.keras.optimizers.legacy: m.reset_states() is gone."""\nprint(1)\n', None),  # a docstring
        ("print('no keras at all')\n", None),
        ("def broken(:\n    opt = tf.keras.optimizers.legacy.Adam()\n", ("uses tf.keras.optimizers.legacy", 2)),  # no syntax tree: the text
        # TF's hub tutorials: hub.KerasLayer in a tf.keras model (a tf-keras layer wherever tf.keras is Keras 3)
        ("import tensorflow_hub as hub\n\nlayer = hub.KerasLayer(url, trainable=False)\n", ("uses tensorflow_hub's KerasLayer", 3)),
        ("import tensorflow_hub\nm = tf.keras.Sequential([tensorflow_hub.KerasLayer(u)])\n", ("uses tensorflow_hub's KerasLayer", 2)),
        ("from tensorflow_hub import KerasLayer as HubLayer\n\n\nx = HubLayer(u)(x)\n", ("uses tensorflow_hub's KerasLayer", 4)),
        ("import tensorflow_hub as hub\nembed = hub.load(url)\n", None),  # a SavedModel: either Keras calls it
        ("import tensorflow_hub as hub\nclass KerasLayer:\n    pass\nKerasLayer()\n", None),  # the script's own class
        ("import tensorflow_hub as hub\n# hub.KerasLayer needs tf-keras\n", None),  # a comment
        ("import tensorflow_hub as hub\ndef broken(:\n    hub.KerasLayer(u)\n", ("uses tensorflow_hub's KerasLayer", 3)),  # the text
    ],
)
def test_scripts_written_for_tf_keras_are_recognised(tmp_path: Path, source: str, found: tuple[str, int] | None) -> None:
    seen = _keras2_only(tmp_path, source)
    assert (seen if seen is None else (seen[0].split(",")[0], seen[1])) == found


def test_the_test_scripts_are_read_as_what_they_are() -> None:
    assert keras2_only(str(SCRIPTS / "ps_in_process_keras.py")) == ("uses tf.keras.optimizers.legacy, which Keras 3 refuses", 50)
    assert keras2_only(str(SCRIPTS / "custom_loop_lazy.py")) is None  # Keras 3's reset_state()
    assert keras2_only(str(SCRIPTS / "rehearse" / "tpu_guide_custom_loop.py")) is None
    assert keras2_only(str(SCRIPTS / "no-such-script.py")) is None


@pytest.fixture
def tensorflow_2_21(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """The workers' TensorFlow is 2.21 (tf.keras is Keras 3), with or without tf-keras beside it."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    monkeypatch.setattr(tf_version, "find", lambda: ("/site/tensorflow", (2, 21)))
    real = bootstrap.importlib.util.find_spec

    def pretend(tf_keras: bool) -> None:
        monkeypatch.setattr(
            bootstrap.importlib.util, "find_spec", lambda name, *a: (object() if tf_keras else None) if name == "tf_keras" else real(name, *a)
        )

    return pretend


def _legacy_keras() -> str | None:
    return os.environ.pop("TF_USE_LEGACY_KERAS", None)


def test_a_scripts_own_parameter_server_strategy_on_one_worker_gets_tf_keras(
    tensorflow_2_21: Callable[[bool], None], capsys: pytest.CaptureFixture[str]
) -> None:
    tensorflow_2_21(True)
    script = str(SCRIPTS / "ps_in_process_keras.py")
    bootstrap.choose_keras(env(), "auto", scan_file(script), script)
    assert _legacy_keras() == "1"
    said = capsys.readouterr().err
    assert "the script builds a ParameterServerStrategy, whose model.fit and legacy optimizers Keras 3 does not support" in said
    assert "(the script constructs ParameterServerStrategy(...) on line 42)" in said
    # --strategy none builds nothing, and chooses all the same (tpuctl's note for in-process clusters suggests it)
    bootstrap._choose_keras_alone(script)
    assert _legacy_keras() == "1"
    # without tf-keras it stops before training, as tpuctl's own parameter-server runs do
    tensorflow_2_21(False)
    with pytest.raises(TpuctlError, match=r"tf-keras is not installed, and Keras 3 .* does not work under ParameterServerStrategy"):
        bootstrap.choose_keras(env(), "auto", scan_file(script), script)


def test_a_script_written_for_tf_keras_gets_it_on_every_kind_of_run(
    tmp_path: Path, tensorflow_2_21: Callable[[bool], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """Alike on a TPU, in its rehearsal, on one device: a rehearsal decides as the TPU run will."""
    script = tmp_path / "tpu_guide.py"
    script.write_text("import tensorflow as tf\nloss = tf.keras.metrics.Mean()\n\nloss.reset_states()\n")
    tensorflow_2_21(True)
    for kind in ("tpu", "rehearse", "mirrored", "auto"):
        bootstrap.choose_keras(env(), kind, None, str(script))
        assert _legacy_keras() == "1", kind
    said = capsys.readouterr().err
    assert (
        "tpuctl: tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1): "
        "the script calls reset_states(), which Keras 3 metrics do not have (reset_state() there) (line 4)"
    ) in said
    # --keras keras3 keeps Keras 3; without tf-keras Keras 3 stays too, and the chief says what the script needs
    bootstrap.choose_keras(WorkerEnv(cluster=None, task=Task("worker", 0), strategy="auto", scope=True, keras="keras3"), "auto", None, str(script))
    assert _legacy_keras() is None
    tensorflow_2_21(False)
    bootstrap.choose_keras(env(), "rehearse", None, str(script))
    assert _legacy_keras() is None
    assert "(line 4): it needs tf-keras; pip install tf-keras==2.21.* into the workers' environment" in capsys.readouterr().err


def test_a_keras3_script_on_one_process_keeps_keras_3(tmp_path: Path, tensorflow_2_21: Callable[[bool], None], capsys: pytest.CaptureFixture[str]) -> None:
    tensorflow_2_21(True)
    for name in ("custom_loop_lazy.py", "rehearse/tpu_guide_custom_loop.py"):
        script = str(SCRIPTS / name)
        bootstrap.choose_keras(env(simulate=2), "rehearse", scan_file(script), script)
        assert _legacy_keras() is None
    assert capsys.readouterr().err == ""

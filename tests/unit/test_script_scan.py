"""Who builds the strategy, read from the script's source without running it (tpuctl/runtime/script_scan.py);
the workers' TensorFlow version without importing it (tf_version.py); the Keras choice that follows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpuctl.cluster.tf_config import Task, make_cluster
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import bootstrap, script_scan, tf_version
from tpuctl.runtime.script_scan import scan
from tpuctl.runtime.worker_env import WorkerEnv


def shape(source: str) -> script_scan.Shape:
    return scan(source.encode())


@pytest.mark.parametrize(
    ("source", "strategy", "line"),
    [
        ("import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n", "MultiWorkerMirroredStrategy", 2),
        ("import tensorflow as tf\ns = tf.distribute.experimental.MultiWorkerMirroredStrategy(communication_options=o)\n", "MultiWorkerMirroredStrategy", 2),
        ("from tensorflow.distribute import MultiWorkerMirroredStrategy as S\n\n\ns = S()\n", "MultiWorkerMirroredStrategy", 4),
        ("import tensorflow as tf\nMWMS = tf.distribute.MultiWorkerMirroredStrategy\nst = MWMS()\n", "MultiWorkerMirroredStrategy", 3),
        ("s = tf.distribute.experimental.ParameterServerStrategy(r, variable_partitioner=p)\n", "ParameterServerStrategy", 1),
        ("s = tf.compat.v1.distribute.experimental.CentralStorageStrategy()\n", "CentralStorageStrategy", 1),
        ("from tensorflow.python.distribute.collective_all_reduce_strategy import CollectiveAllReduceStrategy\n"
         "s = CollectiveAllReduceStrategy()\n", "MultiWorkerMirroredStrategy", 2),
        ("s = TPUStrategyV2(resolver)\n", "TPUStrategy", 1),
        # nested: inside a function, a branch, a call's argument, a comprehension
        ("def main():\n    if tpu:\n        return run(tf.distribute.TPUStrategy(resolver))\n"
         "    return [tf.distribute.OneDeviceStrategy(d) for d in ds]\n", "TPUStrategy", 3),
        ("x = 1\nclass A:\n    def f(self):\n        lambda: tf.distribute.MirroredStrategy(devices=['/gpu:0'])\n", "MirroredStrategy", 4),
    ],
)
def test_strategy_constructions_are_found(source: str, strategy: str, line: int) -> None:
    found = shape(source)
    assert (found.strategy, found.strategy_line) == (strategy, line)
    assert found.own and found.builds_strategy


@pytest.mark.parametrize(
    "source",
    [
        "import tensorflow as tf\nmodel = tf.keras.Sequential([])\nmodel.fit(x, y)\n",  # the unmodified Keras script
        "# strategy = tf.distribute.MultiWorkerMirroredStrategy()\nprint('hi')\n",  # a comment
        "doc = 'tf.distribute.MirroredStrategy() and disable_eager_execution()'\n",  # a string
        "import tensorflow as tf\nif isinstance(s, tf.distribute.TPUStrategy):\n    pass\n",  # named, not built
        "from tpuctl import runtime\nstrategy = runtime.strategy()\n",  # asks tpuctl for its strategy
        "search = GridSearch()\nbest = search.estimator\n",  # an attribute named estimator, not TensorFlow's
        "",
    ],
)
def test_scripts_that_build_nothing_keep_tpuctls_strategy(source: str) -> None:
    assert not shape(source).own


@pytest.mark.parametrize(
    ("source", "graph", "estimator"),
    [
        ("import tensorflow as tf\ntf.compat.v1.disable_eager_execution()\n", "disable_eager_execution", False),
        ("import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n", "disable_v2_behavior", False),
        ("from tensorflow.compat.v1 import disable_eager_execution as off\noff()\n", "disable_eager_execution", False),
        ("import tensorflow as tf\nest = tf.estimator.Estimator(model_fn)\n", None, True),
        ("import tensorflow as tf\nc = tf.compat.v1.estimator.tpu.RunConfig()\n", None, True),
        ("import tensorflow_estimator as tfe\n", None, True),
        ("from tensorflow import estimator\n", None, True),
        ("from tensorflow.estimator import RunConfig\n", None, True),
    ],
)
def test_graph_mode_and_estimator_are_found(source: str, graph: str | None, estimator: bool) -> None:
    found = shape(source)
    assert found.graph_mode == graph and found.estimator is estimator
    assert found.own and not found.builds_strategy


def test_the_multi_worker_estimator_tutorial_shape() -> None:
    source = (
        "import tensorflow as tf\n"
        "tf.compat.v1.disable_eager_execution()\n"
        "strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()\n"
        "config = tf.estimator.RunConfig(train_distribute=strategy)\n"
    )
    found = shape(source)
    assert (found.strategy_line, found.graph_line, found.estimator_line) == (3, 2, 4)
    assert found.describe() == (
        "constructs MultiWorkerMirroredStrategy(...) on line 3, calls disable_eager_execution() on line 2, uses tf.estimator on line 4"
    )


def test_hostile_sources_are_tolerated() -> None:
    # A syntax error (or Python 2): the text is searched instead, without a line number.
    broken = shape("print 'old'\nstrategy = tf.distribute.MultiWorkerMirroredStrategy(\n")
    assert broken.strategy == "MultiWorkerMirroredStrategy" and broken.strategy_line == 0
    assert not shape("def f(:\n    return Strategy\n").own
    # Binary (a .pyc, random bytes): names inside are no calls.
    assert not scan(b"\x00\x01MultiWorkerMirroredStrategy(\xff\xfe" * 100).own
    # A declared encoding is honoured; an undecodable file is searched as text.
    latin = "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\ns = tf.distribute.MirroredStrategy()\n".encode("latin-1")
    assert scan(latin).strategy_line == 3
    assert scan(b"s = '\xff\xfe'\ns = tf.distribute.MirroredStrategy()\n").strategy == "MirroredStrategy"
    # Deeply nested expressions: the parser's recursion limit, not a crash.
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000 + "\ntf.compat.v1.disable_eager_execution()\n"
    assert shape(deep).graph_mode == "disable_eager_execution"


def test_huge_files_are_searched_not_parsed(tmp_path: Path) -> None:
    huge = tmp_path / "huge.py"
    filler = b"x = 1  # Strategy\n" * (script_scan.MAX_PARSED_BYTES // 18 + 10)
    huge.write_bytes(filler + b"s = tf.distribute.MultiWorkerMirroredStrategy()\n")
    started = time.monotonic()
    found = script_scan.scan_file(str(huge))
    assert found.strategy == "MultiWorkerMirroredStrategy" and found.strategy_line == 0
    assert time.monotonic() - started < 2.0
    assert not script_scan.scan_file(str(tmp_path / "missing.py")).own  # unreadable: tpuctl's usual behaviour


def test_a_plain_script_is_answered_without_importing_ast() -> None:
    probe = (
        "import sys\n"
        "from tpuctl.runtime import script_scan\n"
        "assert not script_scan.scan(b'import tensorflow as tf\\nmodel.fit(x)\\n').own\n"
        "print('ast' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


# --- the workers' TensorFlow version -------------------------------------------------------------


def fake_site(root: Path, *dists: str) -> Path:
    site = root / "site-packages"
    (site / "tensorflow").mkdir(parents=True)
    (site / "tensorflow" / "__init__.py").write_text("raise ImportError('a stand-in')\n")
    for dist in dists:
        (site / dist).mkdir()
    return site


@pytest.mark.parametrize(
    ("dists", "version"),
    [
        (("tensorflow-2.21.0.dist-info",), (2, 21)),
        (("tensorflow_cpu-2.15.1.dist-info",), (2, 15)),
        (("tensorflow_tpu-2.20.0.dist-info",), (2, 20)),
        (("tf_nightly-2.22.0.dev20261101.dist-info",), (2, 22)),
        (("tensorflow_macos-2.15.0.dist-info",), (2, 15)),
        (("tensorflow-2.9.3.egg-info",), (2, 9)),
        (("tensorflow_cpu-2.15.1.dist-info", "tensorflow-2.21.0.dist-info"), (2, 21)),  # two beside one package: the newest
        (("tensorflow_estimator-2.15.0.dist-info", "tensorflow_io-0.37.0.dist-info"), None),  # not TensorFlow itself
        ((), None),
    ],
)
def test_tensorflow_version_from_its_metadata(tmp_path: Path, dists: tuple[str, ...], version: tuple[int, int] | None) -> None:
    site = fake_site(tmp_path, *dists)
    assert tf_version.find([str(site)]) == (str(site / "tensorflow"), version)


def test_no_tensorflow_at_all(tmp_path: Path) -> None:
    assert tf_version.find([str(tmp_path)]) == (None, None)
    assert tf_version.keras_3(None) and tf_version.keras_3((2, 16)) and not tf_version.keras_3((2, 15))


# --- the Keras choice ------------------------------------------------------------------------------


def worker(keras: str = "auto", index: int = 0) -> WorkerEnv:
    cluster = make_cluster(2, ["127.0.0.1:1", "127.0.0.1:2"])
    return WorkerEnv(cluster=cluster, task=Task("worker", index), strategy="auto", scope=True, keras=keras)


@pytest.fixture
def tensorflow_at(monkeypatch: pytest.MonkeyPatch) -> object:
    """Pretend the workers' TensorFlow is this version, with or without tf-keras beside it."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)

    def pretend(version: tuple[int, int] | None, tf_keras: bool, package: str | None = "/site/tensorflow") -> None:
        monkeypatch.setattr(tf_version, "find", lambda: (package, version))
        real = bootstrap.importlib.util.find_spec
        monkeypatch.setattr(
            bootstrap.importlib.util, "find_spec", lambda name, *a: (object() if tf_keras else None) if name == "tf_keras" else real(name, *a)
        )

    return pretend


@pytest.mark.parametrize("keras", ["auto", "tf-keras", "keras3"])
@pytest.mark.parametrize("kind", ["multi-worker-mirrored", "parameter-server"])
def test_tensorflow_2_15_never_needs_tf_keras(tensorflow_at: object, keras: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    tensorflow_at((2, 15), False)  # type: ignore[operator]
    bootstrap.choose_keras(worker(keras), kind)
    assert "TF_USE_LEGACY_KERAS" not in os.environ
    said = capsys.readouterr().err
    assert "keras3 if" not in said and "tf-keras is not installed" not in said
    if keras != "auto":
        assert f"--keras {keras} changes nothing here: tf.keras in TensorFlow 2.15 is Keras 2" in said


@pytest.mark.parametrize(
    ("kind", "where"), [("multi-worker-mirrored", "MultiWorkerMirroredStrategy"), ("parameter-server", "ParameterServerStrategy")]
)
def test_tensorflow_2_16_and_later_need_tf_keras_for_fit(tensorflow_at: object, kind: str, where: str) -> None:
    tensorflow_at((2, 21), False)  # type: ignore[operator]
    with pytest.raises(TpuctlError) as caught:
        bootstrap.choose_keras(worker(), kind)
    assert str(caught.value) == (
        f"tf-keras is not installed, and Keras 3 (tf.keras in TensorFlow 2.21) model.fit does not work under {where} "
        "(pip install tf-keras==2.21.* into the workers' environment, or pass --keras keras3 if the script uses a custom training loop)"
    )


def test_the_parameter_server_chief_hears_about_its_own_strategy(tensorflow_at: object, capsys: pytest.CaptureFixture[str]) -> None:
    tensorflow_at((2, 21), True)  # type: ignore[operator]
    bootstrap.choose_keras(worker(), "parameter-server")
    assert os.environ.pop("TF_USE_LEGACY_KERAS") == "1"
    said = capsys.readouterr().err
    assert "ParameterServerStrategy" in said and "MultiWorkerMirroredStrategy" not in said
    bootstrap.choose_keras(worker(), "multi-worker-mirrored")
    assert os.environ.pop("TF_USE_LEGACY_KERAS") == "1"
    assert "MultiWorkerMirroredStrategy" in capsys.readouterr().err


def test_no_tensorflow_in_the_workers_interpreter_is_said_so(tensorflow_at: object) -> None:
    tensorflow_at(None, False, None)  # type: ignore[operator]
    with pytest.raises(TpuctlError, match="TensorFlow is not installed for"):
        bootstrap.choose_keras(worker(), "multi-worker-mirrored")


COLAB_FALLBACK = """
import tensorflow as tf
try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    strategy = tf.distribute.TPUStrategy(resolver)
except ValueError:
    strategy = tf.distribute.get_strategy()
"""


@pytest.mark.parametrize(("kind", "deferred"), [("tpu", True), ("multi-worker-mirrored", False), ("mirrored", False), ("auto", True)])
def test_a_tpu_or_fallback_script_keeps_tpuctls_strategy_off_a_tpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, deferred: bool) -> None:
    """Off a TPU its TPUStrategy is never built and it falls back to get_strategy(): that must be tpuctl's, or N workers train alone."""
    from tpuctl.runtime import bootstrap

    script = tmp_path / "colab.py"
    script.write_text(COLAB_FALLBACK)
    monkeypatch.delenv("TPUCTL_STRATEGY_BUILDER", raising=False)
    assert (bootstrap.script_builds_strategy(worker(), kind, str(script)) is not None) is deferred
    monkeypatch.setenv("TPUCTL_STRATEGY_BUILDER", "script")
    assert bootstrap.script_builds_strategy(worker(), kind, str(script)) is not None  # asked for: the script decides

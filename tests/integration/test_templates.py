"""Every `tpuctl new` template, as generated, runs the way its README says, on TensorFlow 2.21 and 2.15.

Each template is written once (`tpuctl new NAME DIR`) and launched from its folder with the command of its
template.toml (which its README shows), with a temporary model dir and small sizes after `--`. TF 2.15 runs
through `--python .venv-tf215/bin/python` (skipped, saying why, where that environment is missing). The TF 2.21
custom-loop run also reads TFRecord files the test writes and fails once, to show a restart resuming.

The sizes are each template's smallest that still write what `check` reads (one epoch: its checkpoint and
summaries); the claim is one launch per template per TensorFlow version, not the epochs. The TFRecord files are
framed and encoded here without TensorFlow (its import alone costs this process seconds of CPU); the
custom-loop run parsing them with `tf.io.parse_single_example` is what shows they are what TensorFlow writes.
"""

from __future__ import annotations

import json
import os
import shlex
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_tpuctl
from tests.integration.compat_env import WorkerEnv, outcome, tf215_env
from tpuctl import scaffold
from tpuctl.watch.records import frame

pytestmark = pytest.mark.tf

SIZES = {
    "keras-fit": ["--epochs", "1", "--examples", "256"],
    "custom-loop": ["--steps", "6", "--checkpoint-every", "3", "--examples", "256"],
    "tpu-strategy": ["--epochs", "1", "--examples", "256"],
    "parameter-server": ["--epochs", "1", "--steps-per-epoch", "4", "--examples", "256"],
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every template written by `tpuctl new`, once for both TensorFlow versions."""
    root = tmp_path_factory.mktemp("templates")
    for name in SIZES:
        result = run_tpuctl("new", name, str(root / name), timeout=30)
        assert result.returncode == 0, result.stderr
    return root


def launch(folder: Path, tmp_path: Path, *, python: Path | None = None, options: tuple[str, ...] = (), script_args: list[str] | None = None):  # type: ignore[no-untyped-def]
    """The README's command, run in the template's folder: its --model-dir moved to tmp_path, a log dir, small sizes."""
    words = shlex.split(scaffold.find(folder.name).run)
    assert words[:2] == ["tpuctl", "launch"]
    words[words.index("--model-dir") + 1] = str(tmp_path / "model")
    words += ["--log-dir", str(tmp_path / "logs"), "--start-timeout", "120", *options, *(["--python", str(python)] if python else [])]
    return run_tpuctl(*words[1:], "--", *SIZES[folder.name], *(script_args or []), cwd=folder, timeout=240, env=dict(os.environ))


def check(name: str, result, model: Path) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, outcome(result)
    if name == "custom-loop":
        assert (model / "checkpoints" / "checkpoint").is_file()
        assert list((model / "logs").glob("events.out.tfevents.*"))
        return
    assert list((model / "logs").rglob("events.out.tfevents.*")), sorted(model.rglob("*"))
    assert list((model / "checkpoints").glob("epoch-01*")), sorted(model.rglob("*"))
    if name == "tpu-strategy":
        rehearsal = json.loads((model.parent / "logs" / "rehearsal.json").read_text())
        verdicts = {c["check"]: c["verdict"] for c in rehearsal["checks"]}
        assert set(verdicts.values()) == {"ok"}, rehearsal["checks"]
        assert {"batch split", "static shapes", "XLA ops", "float64"} <= set(verdicts)
        assert (rehearsal["replicas"], rehearsal["global_batch"], rehearsal["per_replica_batch"]) == (8, 128, 16)


@pytest.mark.parametrize("name", ["keras-fit", "tpu-strategy", "parameter-server"])
def test_each_template_runs_as_its_readme_says_on_tf_221(generated: Path, tmp_path: Path, name: str) -> None:
    check(name, launch(generated / name, tmp_path), tmp_path / "model")


@pytest.fixture(scope="module")
def tf215() -> WorkerEnv:
    """The TF 2.15 worker environment, looked up once for the module (or each test's skip saying why)."""
    return tf215_env()


@pytest.mark.parametrize("name", list(SIZES))
def test_each_template_runs_as_its_readme_says_on_tf_215(generated: Path, tmp_path: Path, tf215: WorkerEnv, name: str) -> None:
    check(name, launch(generated / name, tmp_path, python=tf215.python), tmp_path / "model")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | 0x80 if value else low)
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def tf_example(x: list[float], y: int) -> bytes:
    """tf.train.Example(features={"x": FloatList(x), "y": Int64List([y])}) serialized as protobuf encodes it
    (tensorflow/core/example/{example,feature}.proto: Example.features=1, Features.feature=1 a map of
    key=1/value=2, Feature.float_list=2 and int64_list=3, each list's packed value=1). Checked against
    tf.train.Example once: the same message parsed back; only the map's entry order may differ."""
    floats = _field(2, _field(1, struct.pack(f"<{len(x)}f", *x)))
    ints = _field(3, _field(1, _varint(y)))
    return _field(1, _field(1, _field(1, b"x") + _field(2, floats)) + _field(1, _field(1, b"y") + _field(2, ints)))


def test_the_custom_loop_reads_tfrecords_and_resumes_after_a_failure_on_tf_221(generated: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(3)
    for shard in range(2):  # one file per worker's input pipeline
        records = (frame(tf_example(rng.normal(size=16).tolist(), int(rng.integers(0, 4)))) for _ in range(128))
        (data / f"train-{shard}.tfrecord").write_bytes(b"".join(records))
    result = launch(
        generated / "custom-loop", tmp_path, options=("--max-restarts", "1"),
        script_args=["--tfrecords", str(data / "train-*.tfrecord"), "--fail-once-at", "4"],
    )
    check("custom-loop", result, tmp_path / "model")
    assert "restarting all workers (attempt 2/2)" in result.stdout + result.stderr, outcome(result)
    assert "[worker:0] worker 0: resuming at step 4/6" in result.stdout, outcome(result)  # the checkpoint of step 3
    assert "[worker:0] trained 6 steps" in result.stdout

"""`launch --rehearse`: unmodified TPU scripts on CPU with real TensorFlow, and what the rehearsal flags.

Each script here is written as the Cloud TPU tutorials write theirs; none knows about tpuctl.
A TPU address that nobody answers would hang TensorFlow forever (FIELD-NOTES), so the
address forms given below also prove that a rehearsal reaches for nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_tpuctl
from tests.integration.rehearsal import DEAD_ADDRESS, REHEARSE, printed, rehearse, verdicts
from tpuctl.launch.tfpair.here import this_interpreter

pytestmark = pytest.mark.tf


def test_a_colab_script_rehearses_as_v2_8_without_colab_tpu_addr(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_TPU_ADDR", "TPU_NAME")}
    result = run_tpuctl(
        "launch", str(REHEARSE / "colab_fit.py"), "--rehearse", "v2-8", "--runtime", "local", "--log-dir", str(tmp_path / "logs"), env=env, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads(re.findall(r"^\[worker:0\] (\{.*\})$", result.stdout, re.M)[-1])
    assert seen == {
        "replicas": 8, "is_tpu_strategy": True, "tpu_devices": 8, "master": "grpc://rehearsal:8470",
        "epochs": 2, "validated": 2, "variables_mirrored": True,
    }
    assert "the script's TPUStrategy(...) is tpuctl's rehearsal of v2-8" in result.stdout
    report = (tmp_path / "logs" / "rehearsal.json").read_text()
    rehearsal = json.loads(report)
    assert (rehearsal["replicas"], rehearsal["global_batch"], rehearsal["per_replica_batch"]) == (8, 64, 8)
    assert rehearsal["steps"] == 2 * (256 // 64)  # every train step of both epochs, counted inside the step; not validation's
    assert rehearsal["seconds_per_step"] > 0
    assert {c["check"]: c["verdict"] for c in rehearsal["checks"]} == {
        "batch split": "ok", "static shapes": "ok", "XLA ops": "ok", "float64": "ok", "steps_per_execution": "ok",
    }
    # The report as a person reads it, at the end of the run: on this machine's TensorFlow and Keras 3, named, as
    # --runtime local asks; the line before the run says so.
    here = this_interpreter()
    assert (rehearsal["tensorflow"], rehearsal["keras"], rehearsal.get("runtime")) == (here.tensorflow, here.keras, None)
    assert here.keras is not None and here.keras.startswith("3.")
    said = f"tpuctl: rehearsal of v2-8: 8 replicas on TensorFlow {here.tensorflow} (Keras {here.keras}); rehearsed as one process, one virtual CPU per replica"
    assert said in result.stderr
    assert f"tpuctl: rehearsing on {here.describe()} (" in result.stderr and "): --runtime local: its TensorFlow as it is, no TPU image's" in result.stderr
    assert "tpuctl:   batch: 64 global, 8 per replica" in result.stderr
    assert re.search(r"tpuctl:   steps: 8, [0-9.]+s per step on this CPU", result.stderr)

def test_the_bundled_example_rehearses_a_multi_host_slice_and_says_what_it_stands_in_for(tmp_path: Path) -> None:
    outcome, _ = rehearse(
        # v4-16, the smallest multi-host v4: each replica is traced on its own (8, not v4-32's 16: half the CPU).
        ROOT / "examples" / "train_tpu.py", "v4-16", tmp_path, "--model-dir", str(tmp_path / "model"),
        "--", "--epochs", "1", "--examples", "256", env={"COLAB_TPU_ADDR": DEAD_ADDRESS},
    )
    assert outcome["exit_code"] == 0, outcome
    rehearsal = outcome["rehearsal"]
    assert (rehearsal["replicas"], rehearsal["hosts"]) == (8, 2)  # v4 is megacore: one replica per chip, not per core
    assert "standing in for all 2 hosts" in rehearsal["rehearsed_as"]
    assert rehearsal["global_batch"] == 8 * 16 and rehearsal["steps"] == 256 // 128
    assert verdicts(outcome)["checkpoints"] == "warning"  # a local model dir on a 2-host slice
    assert (tmp_path / "model" / "checkpoints" / "epoch-1.weights.h5").is_file()

@pytest.fixture(scope="module")
def custom_loop_by_name(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """One rehearsal of the custom loop, reaching its TPU by name, that the tests below only read."""
    tmp_path = tmp_path_factory.mktemp("custom_loop")
    outcome, _ = rehearse(
        REHEARSE / "custom_loop.py", "v3-8", tmp_path, "--model-dir", str(tmp_path / "model"), "--", "--print-feeds",
        env={"TPU_NAME": "my-tpu"},
    )
    return outcome, tmp_path


def test_a_custom_loop_reaches_its_tpu_by_name_and_checkpoints(custom_loop_by_name: tuple[Any, Path]) -> None:
    outcome, tmp_path = custom_loop_by_name
    assert outcome["exit_code"] == 0, outcome
    assert outcome["rehearsal"]["steps"] == 6
    assert (outcome["rehearsal"]["global_batch"], outcome["rehearsal"]["per_replica_batch"]) == (128, 16)
    assert verdicts(outcome) == {"batch split": "ok", "static shapes": "ok", "XLA ops": "ok", "float64": "ok"}
    assert list((tmp_path / "model").glob("ckpt-1.index"))


def test_each_replicas_feed_runs_untuned_and_the_scripts_own_pipeline_stays_autotuned(custom_loop_by_name: tuple[Any, Path]) -> None:
    # The feed per replica has nothing to tune, and its autotune thread held up each iterator's teardown by its
    # sleep (tpuctl/runtime/strategies.py); the script's pipeline is tuned as on a TPU host.
    outcome, _ = custom_loop_by_name
    assert printed(outcome, "custom_loop") == {"script": "custom_loop", "pipeline_autotuned": True, "feeds_autotuned": [False] * 8}


def test_a_script_that_skips_the_report_is_told_nothing_was_checked(tmp_path: Path) -> None:
    outcome, stderr = rehearse(REHEARSE / "custom_loop.py", "v2-8", tmp_path, "--", "--steps", "1", "--hard-exit")
    assert (outcome["exit_code"], outcome["rehearsal"]) == (0, None)
    assert "the rehearsal wrote no report" in stderr and "nothing was checked" in stderr and "os._exit()" in stderr

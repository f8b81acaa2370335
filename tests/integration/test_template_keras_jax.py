"""Issue 49: `tpuctl new keras-jax`, as generated, runs the way its README says: 2 processes, Keras 3 on JAX, one cluster.

One launch for the module (two real JAX processes on this CPU, JAX's cross-process CPU collectives): written by
`tpuctl new`, started from its folder with its template.toml's command (the one its README shows), a temporary model
dir and small sizes after `--`. The tests read that one run: what the plan says, and the checkpoints every process
saved, whose weights must be the same array for array (processes that each trained alone would differ).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import run_tpuctl
from tests.integration.compat_env import outcome
from tpuctl import scaffold

EPOCHS = 2
SIZES = ["--epochs", str(EPOCHS), "--examples", "256", "--per-device-batch", "16"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The README's command in the generated folder, its --model-dir moved under tmp; (the launch, the tmp root)."""
    root = tmp_path_factory.mktemp("keras-jax")
    written = run_tpuctl("new", "keras-jax", str(root / "project"), timeout=30)
    assert written.returncode == 0, written.stderr
    words = shlex.split(scaffold.find("keras-jax").run)
    assert words[:3] == ["tpuctl", "launch", "train.py"] and "--workers" in words
    words[words.index("--model-dir") + 1] = str(root / "model")
    words += ["--log-dir", str(root / "logs"), "--start-timeout", "120"]
    return run_tpuctl(*words[1:], "--", *SIZES, cwd=root / "project", timeout=240, env=dict(os.environ)), root


def weights(path: Path) -> list[np.ndarray]:
    """Every array of a Keras .weights.h5 file, in the file's order."""
    arrays: list[np.ndarray] = []
    with h5py.File(path, "r") as file:
        file.visititems(lambda _, item: arrays.append(item[()]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def test_the_template_runs_as_a_jax_run_of_two_processes(run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, root = run
    assert result.returncode == 0, outcome(result)
    plan = json.loads((root / "logs" / "attempt-1" / "plan.json").read_text(encoding="utf-8"))
    assert plan["framework"] == "jax" and "sets KERAS_BACKEND=jax" in plan["framework_found"], plan
    assert [w["env"].get("KERAS_DISTRIBUTION_PROCESS_ID") for w in plan["workers"]] == ["0", "1"]
    assert all("TF_CONFIG" not in w["env"] and w["env"]["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "2" for w in plan["workers"])
    assert "[worker:0] trained epochs 1-2 of 2 on 2 device(s) in 2 process(es), global batch 32" in result.stdout, outcome(result)


def test_both_processes_end_with_the_same_weights(run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, root = run
    assert result.returncode == 0, outcome(result)
    checkpoints = root / "model" / "checkpoints"
    for epoch in range(1, EPOCHS + 1):
        first, second = weights(checkpoints / f"epoch-{epoch:02d}.weights.h5"), weights(checkpoints / "process-1" / f"epoch-{epoch:02d}.weights.h5")
        assert len(first) == len(second) >= 4  # two Dense layers' kernels and biases (and the optimizer's state)
        assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True)), f"epoch {epoch}: the processes' weights differ"
    assert not all(  # and they trained: epoch 1's weights are not epoch 2's
        np.array_equal(a, b) for a, b in zip(weights(checkpoints / "epoch-01.weights.h5"), weights(checkpoints / "epoch-02.weights.h5"), strict=True)
    )

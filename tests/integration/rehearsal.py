"""What the `launch --rehearse` test modules share: where the scripts are, and one rehearsal run read back.

The rehearsal tests are split over three modules (test_rehearse*.py) so that parallel test workers can run them
side by side: each test launches its own TensorFlow process, and one module runs on one worker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.conftest import SCRIPTS, run_tpuctl

REHEARSE = SCRIPTS / "rehearse"
DEAD_ADDRESS = "127.0.0.1:9"  # discard port: nothing listens, a real connect would wait forever


def rehearse(script: Path, accelerator: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    result = run_tpuctl(
        "launch", str(script), "--rehearse", accelerator, "--runtime", "local", "--json", "--log-dir", str(tmp_path / "logs"), *args,
        env={**os.environ, **(env or {})}, timeout=240,
    )
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def verdicts(outcome: Any) -> dict[str, str]:
    return {c["check"]: c["verdict"] for c in outcome["rehearsal"]["checks"]}


TF215_IMAGE = "tpu-vm-tf-2.15.1-pjrt"


def rehearse_tf215(script: Path, accelerator: str, tmp_path: Path, *args: str) -> tuple[Any, str]:
    """A rehearsal under a TPU image of TensorFlow 2.15 (`--runtime`), its environment the compatibility tests'
    (TPUCTL_REHEARSE_PYTHON_2_15, docs/rehearse.md); its report names the TensorFlow it ran on and the image."""
    from tests.integration.compat_env import tf215_env

    worker = tf215_env()  # a skip saying how to build it, or a failure where CI requires it
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_TPU_ADDR", "TPU_NAME")}
    env["TPUCTL_REHEARSE_PYTHON_2_15"] = str(worker.python)
    result = run_tpuctl(
        "launch", str(script), "--rehearse", accelerator, "--runtime", TF215_IMAGE, "--json",
        "--log-dir", str(tmp_path / "logs"), *args, env=env, timeout=240,
    )
    assert result.stdout.strip(), result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    assert f"tpuctl: rehearsing under {TF215_IMAGE}'s TensorFlow 2.15 (--runtime) with {worker.python} (TPUCTL_REHEARSE_PYTHON_2_15)" in result.stderr
    if outcome.get("rehearsal") is not None:
        assert (outcome["rehearsal"]["tensorflow"], outcome["rehearsal"]["runtime"]) == (worker.tf_version, TF215_IMAGE)
    return outcome, result.stderr


def printed(outcome: Any, script: str) -> dict[str, Any]:
    """The JSON line the script printed, read back from the worker's log."""
    log = Path(outcome["log_dir"]) / "attempt-1" / "worker-0.log"
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"script": "' + script)]
    assert lines, log.read_text()[-3000:]
    return lines[-1]


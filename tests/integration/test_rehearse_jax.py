"""`launch --rehearse` of JAX scripts: the TPU's devices as JAX sees them on this CPU (one process per host of a
multi-host slice), and what a TPU would refuse or pay for, judged by real JAX runs.

One run per script: a keras-io style Keras DataParallel fit and a plain-JAX shard_map loop, both clean, and a plain
JAX loop with each fault, which every check must name. None of the scripts knows about tpuctl.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.conftest import run_tpuctl
from tests.integration.rehearsal import REHEARSE, printed, verdicts


def rehearse_jax(script: str, accelerator: str, tmp_path: Path) -> tuple[Any, str]:
    result = run_tpuctl(
        "launch", str(REHEARSE / script), "--rehearse", accelerator, "--json", "--log-dir", str(tmp_path / "logs"),
        env=dict(os.environ), timeout=240,
    )  # fmt: skip
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def test_a_keras_data_parallel_fit_rehearses_v4_16_as_two_hosts_of_four_devices_and_is_clean(tmp_path: Path) -> None:
    outcome, stderr = rehearse_jax("jax_data_parallel.py", "v4-16", tmp_path)
    assert outcome["exit_code"] == 0, stderr
    # v4: megacore, one JAX device per chip; v4-16 is 8 chips on 2 hosts of 4: two processes of 4 devices, one cluster.
    for index in (0, 1):
        log = Path(outcome["log_dir"]) / "attempt-1" / f"worker-{index}.log"
        seen = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"script"')]
        assert seen == [{"script": "jax_data_parallel", "processes": 2, "devices": 8, "local": 4, "tf_rehearsal": False}], log.read_text()[-2000:]
    report = outcome["rehearsal"]
    assert (report["framework"], report["devices"], report["hosts"], report["processes"]) == ("jax", 8, 2, 2)
    assert (report["jax"], report["keras"], report["runtime"]) == (metadata.version("jax"), metadata.version("keras"), None)
    # Each process feeds 16 rows: the global batch is both processes' 32, split over the 8 devices of the mesh.
    assert (report["global_batch"], report["per_replica_batch"]) == (32, 4)
    assert verdicts(outcome) == {"batch split": "ok", "float64": "ok", "recompiles": "ok", "host callbacks": "ok"}
    assert "tpuctl: rehearsing on this machine's JAX" in stderr and "no TPU image's TensorFlow applies; 2 processes, one per host, 4 CPU devices each" in stderr


def test_a_plain_jax_shard_map_loop_rehearses_a_tpu7x_host_as_eight_devices_and_is_clean(tmp_path: Path) -> None:
    outcome, stderr = rehearse_jax("jax_shard_map.py", "tpu7x-8", tmp_path)
    assert outcome["exit_code"] == 0, stderr
    # TPU7x: one JAX device per TensorCore, 2 per chip, 4 chips a host; nothing of TensorFlow loaded for a plain JAX script.
    assert printed(outcome, "jax_shard_map") == {"script": "jax_shard_map", "devices": 8, "tensorflow": False}
    assert (outcome["rehearsal"]["processes"], outcome["rehearsal"]["global_batch"]) == (1, 32)
    assert verdicts(outcome) == {"batch split": "ok", "float64": "ok", "recompiles": "ok", "host callbacks": "ok"}


def test_each_fault_a_tpu_refuses_or_pays_for_is_named_and_fails_the_rehearsal(tmp_path: Path) -> None:
    outcome, _ = rehearse_jax("jax_faults.py", "v5litepod-8", tmp_path)
    assert outcome["exit_code"] != 0
    assert verdicts(outcome) == {"batch split": "failed", "float64": "warning", "recompiles": "warning", "host callbacks": "warning"}
    details = {c["check"]: c["detail"] for c in outcome["rehearsal"]["checks"]}
    assert details["batch split"].startswith("an array of 10 rows split 8 ways over mesh axis data (8 devices on a v5litepod-8)")
    assert "jit_step" in details["float64"] and "compiled jit_step 5 times" in details["recompiles"] and "jit_step" in details["host callbacks"]
    assert outcome["failure"]["cause"]["summary"].startswith("the rehearsal's batch split check failed (an array of 10 rows")

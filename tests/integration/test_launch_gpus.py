"""Issue 34 on real worker processes: each local worker's environment holds its own CUDA_VISIBLE_DEVICES.

GPU discovery meets a stand-in nvidia-smi on PATH (tests/unit/test_gpu_split.py's, printing what the real one
prints); the workers run tests/integration/scripts/gpu_env.py under --strategy none, so no TensorFlow is needed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import SCRIPTS, run_tpuctl
from tests.standins.nvidia_smi import launch_env


def test_each_local_worker_sees_only_its_own_gpus(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    out.mkdir()
    env = {**launch_env(tmp_path, 4), "GPU_ENV_OUT": str(out)}
    done = run_tpuctl("launch", "--workers", "2", "--strategy", "none", "--log-dir", str(tmp_path / "logs"), str(SCRIPTS / "gpu_env.py"), env=env)
    assert done.returncode == 0, done.stderr
    assert "GPUs: 4 GPU(s) (nvidia-smi); 2 per worker" in done.stderr
    seen = {index: json.loads((out / f"{index}.json").read_text(encoding="utf-8")) for index in ("0", "1")}
    assert [seen[i]["CUDA_VISIBLE_DEVICES"] for i in ("0", "1")] == ["0,1", "2,3"]
    assert all(seen[i]["TF_FORCE_GPU_ALLOW_GROWTH"] is None for i in ("0", "1"))
    plan = json.loads((tmp_path / "logs" / "attempt-1" / "plan.json").read_text(encoding="utf-8"))
    assert plan["gpus"]["tasks"] == [["0", "1"], ["2", "3"]]


def test_workers_beyond_the_gpus_share_them_with_memory_growth(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    out.mkdir()
    env = {**launch_env(tmp_path, 1), "GPU_ENV_OUT": str(out), "CUDA_VISIBLE_DEVICES": "GPU-5c3e1f0a"}
    done = run_tpuctl("launch", "--workers", "2", "--strategy", "none", "--log-dir", str(tmp_path / "logs"), str(SCRIPTS / "gpu_env.py"), env=env)
    assert done.returncode == 0, done.stderr
    assert "2 workers share 1 GPU(s), up to 2 per card; TF_FORCE_GPU_ALLOW_GROWTH=true" in done.stderr
    for index in ("0", "1"):
        seen = json.loads((out / f"{index}.json").read_text(encoding="utf-8"))
        assert (seen["CUDA_VISIBLE_DEVICES"], seen["TF_FORCE_GPU_ALLOW_GROWTH"]) == ("GPU-5c3e1f0a", "true")

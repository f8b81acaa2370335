"""What each worker will build, decided without TensorFlow; strategy-only options; the plan for parameter servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpuctl.cluster import make_cluster
from tpuctl.errors import TpuctlError
from tpuctl.launch.options import check_strategy_options, parse_devices
from tpuctl.launch.plan import Job, build_plan
from tpuctl.runtime.worker_env import WorkerEnv, tpu_present

TWO = make_cluster(2, ["127.0.0.1:1", "127.0.0.1:2"])
ONE = make_cluster(1, ["127.0.0.1:1"])


def env(strategy: str = "auto", cluster: object = None, simulate: int = 0) -> WorkerEnv:
    from tpuctl.cluster import Task

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

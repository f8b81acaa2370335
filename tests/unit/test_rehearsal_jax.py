"""`launch --rehearse` of a JAX script before and after it runs: the processes and devices each TPU type is
rehearsed as, the options such a rehearsal refuses, the rules that judge what JAX compiled and sharded, and the
report as a person reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.standins.cli_calls import in_process
from tpuctl.launch import rehearsal_report
from tpuctl.launch.job import Job
from tpuctl.launch.tfpair.rehearsal import MAX_HOST_PROCESSES, jax_processes
from tpuctl.runtime.jax_rehearsal import rules
from tpuctl.runtime.jax_rehearsal.rules import Compiled, Seen, Split

JAX_SCRIPT = 'import os\nos.environ["KERAS_BACKEND"] = "jax"\nimport keras\n'


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(JAX_SCRIPT)
    return path


@pytest.mark.parametrize(
    ("accelerator", "processes", "devices_each"),
    [
        ("v2-8", 1, 8), ("v3-32", 4, 8),  # one JAX device per TensorCore: 2 per chip, 4 chips a host
        ("v4-8", 1, 4), ("v4-16", 2, 4), ("v5p-32", 4, 4),  # megacore: one device per chip
        ("v5litepod-8", 1, 8), ("v5e-16", 4, 4), ("v6e-32", 8, 4),  # one core per chip; 4-chip hosts when multi-host
        ("v6e-64", 1, 64),  # 16 hosts: past MAX_HOST_PROCESSES, one process with the whole slice
        ("tpu7x-8", 1, 8), ("tpu7x-2", 1, 2), ("tpu7x-32", 4, 8),  # TPU7x: two devices a chip, four chips a host
    ],
)
def test_each_host_is_one_process_with_the_devices_jax_sees_on_it(accelerator: str, processes: int, devices_each: int) -> None:
    job = jax_processes(Job(script="train.py", framework="jax", rehearse=accelerator))
    assert (job.workers, job.simulate_devices) == (processes, devices_each)
    assert MAX_HOST_PROCESSES == 8


def test_the_dry_run_of_a_multi_host_jax_rehearsal_plans_one_process_per_host(script: Path) -> None:
    result = run_tpuctl("launch", str(script), "--rehearse", "v4-16", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    envs = [worker["env"] for worker in plan["workers"]]
    assert [(env["TPUCTL_REHEARSE"], env["TPUCTL_SIMULATE_DEVICES"], env["KERAS_DISTRIBUTION_PROCESS_ID"]) for env in envs] == [
        ("v4-16", "4", "0"), ("v4-16", "4", "1"),
    ]  # fmt: skip
    assert "TF_CONFIG" not in envs[0] and envs[0]["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "2"
    runtime = plan["rehearsal_runtime"]
    assert (runtime["image"], runtime["environment"]) == (None, None)
    assert runtime["said"][0].startswith("rehearsing on this machine's JAX")
    assert runtime["said"][0].endswith("a JAX run, so no TPU image's TensorFlow applies; 2 processes, one per host, 4 CPU devices each")


@pytest.mark.parametrize("name", ["tpu7x-0", "tpu7x-3", "tpu7x-12", "tpu7x-x"])
def test_a_tpu7x_name_that_is_no_whole_chips_or_hosts_is_one_line_and_exit_2(script: Path, name: str) -> None:
    result = run_tpuctl("launch", str(script), "--rehearse", name, "--dry-run")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "TPU7x" in result.stderr, result.stderr


def test_a_tensorflow_script_cannot_rehearse_tpu7x_which_runs_no_tensorflow(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    result = run_tpuctl("launch", str(tmp_path / "train.py"), "--rehearse", "tpu7x-8", "--dry-run")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "TPU7x (Ironwood)" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runtime", "tpu-vm-tf-2.15.1-pjrt"], "--runtime names a TPU image's TensorFlow; a JAX script rehearses on this machine's JAX"),
        (["--runtime", "local"], "--runtime names a TPU image's TensorFlow"),
        (["--requirements", "requirements.txt"], "--requirements with a JAX rehearsal: it runs on this machine's JAX as it is"),
        (["--workers", "2"], "--rehearse runs one local process per host of the TPU, each with its devices on virtual CPUs; it does not combine with"),
        (["--simulate-devices", "4"], "it does not combine with --simulate-devices"),
    ],
)
def test_what_a_jax_rehearsal_cannot_honour_is_one_line_and_exit_2(script: Path, args: list[str], message: str) -> None:
    (script.parent / "requirements.txt").write_text("numpy\n")
    result = run_tpuctl("launch", str(script), "--rehearse", "v2-8", *args, "--dry-run", cwd=script.parent)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2 and "Traceback" not in result.stderr


def test_a_jax_rehearsal_of_a_tpu_launch_looks_up_no_image_of_the_node(home: Path) -> None:
    """`--rehearse` added to a launch on a TPU tpuctl did not make: a TensorFlow script needs that node's image (and is
    refused without it); a JAX script runs on this machine's JAX, so it is rehearsed with no image and no cloud call."""
    from tpuctl.cloud.nodes import nodespec

    (home / "work" / "train.py").write_text(JAX_SCRIPT)
    env: dict[str, str | None] = {"TPUCTL_PROJECT": "my-project", "TPUCTL_ZONE": "us-central1-a", "TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"}
    result = in_process("launch", "train.py", "--rehearse", "v4-8", "--tpu", "someones-tpu", "--dry-run", env=env)
    assert result.code == 0, result.err
    assert "rehearsing here what the launch would run on a TPU: --tpu left out (the TPU's, not a rehearsal's)" in result.out
    assert "a JAX run, so no TPU image's TensorFlow applies; one process, 4 CPU devices" in result.out
    # A node tpuctl made is still held to its type; its TensorFlow image is not the JAX run's.
    nodespec.save(nodespec.NodeSpec("my-tpu", "my-project", "us-central2-b", "tpu-vm-tf-2.15.1-pod-pjrt", "v4-32"))
    other = in_process("launch", "train.py", "--rehearse", "v4-8", "--tpu", "my-tpu", "--dry-run", env=env)
    assert other.code == 2 and other.err.startswith("Error: --rehearse v4-8 with --tpu my-tpu, a v4-32 (--rehearse v4-32)"), other.err
    same = in_process("launch", "train.py", "--rehearse", "v4-32", "--tpu", "my-tpu", "--dry-run", env=env)
    assert same.code == 0 and "tpu-vm-tf" not in same.out and "4 processes, one per host, 4 CPU devices each" in same.out, same.err


STEP = Compiled("jit_step", step=True)


def test_float64_is_a_cost_and_complex128_a_refusal_each_named_with_its_source() -> None:
    assert rules.float64(Seen([STEP, Compiled("jit_broadcast_in_dim", eager=True)]))["verdict"] == "ok"
    f64 = rules.float64(Seen([Compiled("jit_step", step=True, float64=True)]))
    assert f64["verdict"] == "warning" and f64["detail"].startswith("jit_step compute in float64 (jax_enable_x64): a TPU has no float64 unit")
    assert "jax-ml/jax#19769" in f64["detail"] and "jax-ml/jax#21108" in f64["detail"]
    c128 = rules.float64(Seen([Compiled("jit_fft", float64=True, complex128=True)]))
    assert c128["verdict"] == "failed" and "jit_fft compute in complex128, which a TPU refuses" in c128["detail"]


def test_a_step_compiled_again_and_again_is_a_recompile_warning_and_eager_ops_or_helpers_are_not() -> None:
    fine = [STEP] * (rules.RECOMPILE_AT - 1)  # full batches, the last partial batch, an evaluation batch
    assert rules.recompiles(Seen(fine))["verdict"] == "ok"
    again = rules.recompiles(Seen([STEP] * rules.RECOMPILE_AT))
    assert again["verdict"] == "warning" and again["detail"].startswith(f"compiled jit_step {rules.RECOMPILE_AT} times")
    # Weight initialisers (jit__uniform) and eager operations compile once per shape: many shapes, no step.
    helpers = [Compiled("jit__uniform")] * 20 + [Compiled("jit_broadcast_in_dim", eager=True, step=True)] * 20
    assert rules.recompiles(Seen(helpers))["verdict"] == "not checked"
    assert rules.recompiles(Seen([*helpers, STEP]))["detail"] == "jit_step compiled 1 time(s)"


def test_host_callbacks_in_a_jitted_program_are_a_round_trip_warning() -> None:
    assert rules.host_callbacks(Seen([STEP, Compiled("jit_print", eager=True, callbacks=1)]))["verdict"] == "ok"
    found = rules.host_callbacks(Seen([Compiled("jit_step", callbacks=1)]))
    assert found["verdict"] == "warning" and found["detail"].startswith("jit_step call back to the host")


def test_a_batch_that_jax_refused_to_split_fails_and_one_that_split_is_ok() -> None:
    assert rules.batch_split(Seen(), "v2-8", 8)["verdict"] == "not checked"
    ok = rules.batch_split(Seen(splits=[Split(32, 8, "batch")]), "v2-8", 8)
    assert ok == {"check": "batch split", "verdict": "ok", "detail": "32 rows over 8 devices (mesh axis batch): 4 per device"}
    refused = rules.batch_split(Seen(splits=[Split(32, 8, "batch"), Split(12, 8, "batch", refused=True)]), "v2-8", 8)
    assert refused["verdict"] == "failed"
    assert refused["detail"].startswith("an array of 12 rows split 8 ways over mesh axis batch (8 devices on a v2-8) does not divide: JAX refuses it")


JAX_REPORT = {
    "framework": "jax", "accelerator": "v4-16", "jax": "0.10.2", "keras": "3.15.1", "runtime": None,
    "devices": 8, "hosts": 2, "processes": 2, "replicas": 8, "steps": 0, "compiles": 21,
    "rehearsed_as": "2 processes, one per host, 4 CPU devices each, joined as JAX's cluster over loopback",
    "global_batch": 32, "per_replica_batch": 4,
    "checks": rules.verdicts(Seen([STEP], [Split(32, 8, "batch")]), "v4-16", 8),
}  # fmt: skip


def test_a_jax_report_reads_back_and_says_what_it_ran_on_in_devices(tmp_path: Path) -> None:
    path = tmp_path / "rehearsal.json"
    path.write_text(json.dumps(JAX_REPORT))
    report = rehearsal_report.read(path)
    assert report == JAX_REPORT
    assert rehearsal_report.render(report) == [
        "rehearsal of v4-16: 8 JAX devices of 2 hosts on this machine's JAX 0.10.2 (Keras 3.15.1); "
        "rehearsed as 2 processes, one per host, 4 CPU devices each, joined as JAX's cluster over loopback",
        "  batch: 32 global, 4 per device",
        "  programs compiled: 21",
        "    ok  batch split     32 rows over 8 devices (mesh axis batch): 4 per device",
        "    ok  float64         no float64 in the 1 program(s) compiled",
        "    ok  recompiles      jit_step compiled 1 time(s)",
        "    ok  host callbacks  none in the 1 jitted program(s)",
    ]
    path.write_text(json.dumps({**JAX_REPORT, "compiles": "x" * 1000}))
    assert rehearsal_report.read(path) is None

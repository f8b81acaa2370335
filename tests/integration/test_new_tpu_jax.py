"""A Keras 3 on JAX run on its own TPU VM (`--new-tpu`), made in the TPU stand-in, its host a real sshd server
(tests/standins/new_tpu_cloud.py): preempted mid-run, the VM recreated, the run resumed from its last backup."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_tpuctl, wait_for
from tests.standins.new_tpu_cloud import ZONES, Cloud, Launch, just_after_a_backup, preempt_the_run_s_vm


def test_a_preempted_jax_run_is_resumed_on_its_recreated_vm_from_its_last_backup(cloud: Cloud, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One host (v4-8), so JAX needs no cluster. The backups go to Cloud Storage (the GCS emulator), as they must: the
    recreated VM has a new disk. Keras 3 writes a gs:// path through tf.io.gfile where TensorFlow is installed, whose
    GCS filesystem calls https://www.googleapis.com, so the worker reaches the emulator through
    tests/standins/gcs_proxy.py (as test_new_tpu.py's TensorFlow run does). Keras 3's BackupAndRestore restores the
    weights and the optimizer's step count, and begins the epoch again (keras/src/callbacks/backup_and_restore.py)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.standins.gcs_proxy import keep_gcs_upload_contract, start_gcs_proxy

    keep_gcs_upload_contract()
    proxy = start_gcs_proxy(cloud.tmp, gcs_emulator)
    env = {**cloud.env, "STORAGE_EMULATOR_HOST": gcs_emulator, "TPUCTL_STORAGE_ENDPOINT": gcs_emulator}
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    storage.Client(project="tpuctl-test", credentials=AnonymousCredentials()).create_bucket("jax-models")
    to_workers = [arg for name, value in proxy.env.items() for arg in ("--env", f"{name}={value}")]
    script = ROOT / "tests" / "integration" / "scripts" / "jax" / "fit_with_backups.py"
    args = [str(script), "--new-tpu", "v4-8", "--zone", ZONES[0], "--ssh-config", str(cloud.config), "--model-dir", "gs://jax-models/run",
            "--python", str(cloud.host_python), "--log-dir", str(cloud.tmp / "logs"), *to_workers,
            "--", "--steps", "60", "--step-time", "0.2"]  # fmt: skip
    launch = Launch.start(args, env, cloud.tmp)
    timeline = cloud.tmp / "logs" / "timeline.jsonl"
    just_after_a_backup(launch, timeline)
    name = preempt_the_run_s_vm(cloud)
    assert launch.finish(timeout=240) == 0, launch.stderr
    assert any(f"TPU VM {name} is PREEMPTED; recreating it" in line for line in launch.lines), launch.stderr
    assert launch.said("trained on jax", on_stdout=True)
    logs = cloud.tmp / "logs"
    outcome = json.loads((logs / "outcome.json").read_text())
    assert (outcome["exit_code"], outcome["attempts"], outcome["preemptions"]) == (0, 2, 1)
    events = [json.loads(line) for line in timeline.read_text().splitlines()]
    firsts = {e["attempt"]: e.get("step") for e in events if e["event"] == "first_step"}
    assert firsts[1] <= 2 and firsts[2] > 4, firsts  # attempt 2 began past a backup, not from the start
    assert json.loads((logs / "attempt-2" / "plan.json").read_text())["framework"] == "jax"
    wait_for(lambda: not cloud.ours(), timeout=30)
    cloud.assert_bystanders_survive()
    assert "Traceback" not in launch.stderr


def test_a_jax_run_on_a_slice_leaves_the_hosts_to_jax(cloud: Cloud) -> None:
    """A v4-16 has two hosts, which JAX reads from the metadata server itself (cloud_tpu_cluster.py): the plan writes no
    cluster variables there, and says so."""
    script = ROOT / "tests" / "integration" / "scripts" / "jax" / "data_parallel_fit.py"
    args = ["--new-tpu", "v4-16", "--zone", ZONES[0], "--ssh-config", str(cloud.config), "--dry-run", "--json"]
    dry = run_tpuctl("launch", str(script), *args, env=cloud.env, cwd=cloud.tmp)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["framework"] == "jax" and len(plan["workers"]) == 2
    assert not [name for worker in plan["workers"] for name in worker["env"] if name.startswith(("KERAS_DISTRIBUTION_", "JAX_COORDINATOR"))]
    assert not cloud.ours()  # a dry run makes nothing

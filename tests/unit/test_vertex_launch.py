"""`launch --backend vertex` before anything is sent: the CustomJob body of each kind of launch
(`--dry-run --json` prints exactly it, with no credentials and no request), and every refusal.

Each command runs in this process through the real entry point (test_hostile_cli.invoke: main() with its output
captured, the exit status it would end with, any exception it let escape): what is checked is the body and the words;
a real process's exit and streams are test_hostile_cli's and test_cli_launch's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.standins.cli_calls import OFFLINE, in_process

EXAMPLE = str(ROOT / "examples" / "train_tpu.py")
IMAGE = "us-docker.pkg.dev/my-project/train/tf:2.21"


def _body(*args: str) -> Any:
    result = in_process("launch", EXAMPLE, "--backend", "vertex", "--image", IMAGE, "--dry-run", "--json", *args, env=OFFLINE)
    assert result.code == 0, result.err
    return json.loads(result.out)  # stdout holds the body and nothing else


def _pools(body: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(p["replicaCount"], p["machineSpec"]) for p in body["jobSpec"]["workerPoolSpecs"]]


@pytest.mark.parametrize(
    ("accelerator", "machine"),
    [
        ("v2-8", {"machineType": "cloud-tpu", "acceleratorType": "TPU_V2", "acceleratorCount": 8}),
        ("v3-8", {"machineType": "cloud-tpu", "acceleratorType": "TPU_V3", "acceleratorCount": 8}),
        ("v3-32", {"machineType": "cloud-tpu", "acceleratorType": "TPU_V3", "acceleratorCount": 32}),
        ("v4-8", {"machineType": "cloud-tpu", "acceleratorType": "TPU_V4_POD", "acceleratorCount": 8}),
        ("v5litepod-8", {"machineType": "ct5lp-hightpu-8t", "acceleratorType": "TPU_V5_LITEPOD", "tpuTopology": "2x4"}),
        ("v5litepod-4", {"machineType": "ct5lp-hightpu-4t", "acceleratorType": "TPU_V5_LITEPOD", "tpuTopology": "2x2"}),
    ],
)
def test_a_tpu_type_becomes_vertex_s_machine_spec(accelerator: str, machine: dict[str, Any]) -> None:
    body = _body("--accelerator", accelerator)
    assert _pools(body) == [("1", machine)]
    env = {e["name"]: e["value"] for e in body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]}
    assert env["TPUCTL_STRATEGY"] == "tpu"  # a TPU replica builds TPUStrategy even where it sees no /dev/accel*


def test_the_image_holds_the_script_without_a_staging_bucket() -> None:
    body = _body("--accelerator", "v2-8", "--job-name", "my job", "--", "--epochs", "3")
    (pool,) = body["jobSpec"]["workerPoolSpecs"]
    assert pool["containerSpec"]["imageUri"] == IMAGE
    assert pool["containerSpec"]["command"] == ["python", "-m", "tpuctl.runtime"]
    assert pool["containerSpec"]["args"] == [EXAMPLE, "--epochs", "3"]
    assert body["displayName"] == "my job"
    assert set(body) == {"displayName", "labels", "jobSpec"}


def test_a_staging_bucket_ships_the_folder_and_runs_it_from_the_bundle() -> None:
    body = _body("--staging-bucket", "gs://my-bucket/stage", "--model-dir", "gs://my-bucket/run", "--service-account", "trainer@my-project.iam.gserviceaccount.com")
    (pool,) = body["jobSpec"]["workerPoolSpecs"]
    spec = pool["pythonPackageSpec"]
    assert spec["executorImageUri"] == IMAGE
    assert spec["pythonModule"] == "tpuctl.runtime.bundle"
    assert spec["args"] == ["train_tpu.py"]
    (uri,) = spec["packageUris"]
    assert uri.startswith("gs://my-bucket/stage/tpuctl-staging/") and uri.endswith("/tpuctl-job-0.0.0.tar.gz")
    assert body["jobSpec"]["serviceAccount"] == "trainer@my-project.iam.gserviceaccount.com"
    assert body["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://my-bucket/run"}
    env = {e["name"]: e["value"] for e in spec["env"]}
    assert env["TPUCTL_MODEL_DIR"] == "gs://my-bucket/run" and env["TPUCTL_STRATEGY"] == "auto"


def test_workers_and_parameter_servers_become_worker_pools() -> None:
    cpu = {"machineType": "n1-standard-4"}
    assert _pools(_body("--workers", "3")) == [("1", cpu), ("2", cpu)]  # pool 0 the chief, pool 1 the other workers
    gpu = {"machineType": "g2-standard-24", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 2}
    assert _pools(_body("--workers", "2", "--accelerator", "NVIDIA_L4", "--gpus-per-worker", "2")) == [("1", gpu), ("1", gpu)]
    assert _pools(_body("--strategy", "parameter-server", "--workers", "2", "--ps", "1", "--machine-type", "n1-highmem-8")) == [
        ("1", {"machineType": "n1-highmem-8"}),
        ("2", {"machineType": "n1-highmem-8"}),
        ("1", {"machineType": "n1-standard-4"}),
    ]


def test_the_readable_dry_run_says_where_it_would_post() -> None:
    regional = OFFLINE | {"TPUCTL_VERTEX_ENDPOINT": None, "TPUCTL_REGION": "europe-west4"}
    result = in_process(
        "launch", EXAMPLE, "--backend", "vertex", "--image", IMAGE, "--accelerator", "v5litepod-8", "--project", "my-project",
        "--dry-run", env=regional,
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    # The region a run would use (here from TPUCTL_REGION), and its regional endpoint.
    assert lines[0].endswith("POST https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/locations/europe-west4/customJobs")
    assert "workerpool0: 1 x ct5lp-hightpu-8t (acceleratorType TPU_V5_LITEPOD, tpuTopology 2x4)" in lines
    assert lines[-1] == "(dry run: nothing staged or submitted)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--backend vertex needs --image IMAGE"),
        (["--image", IMAGE, "--accelerator", "v6e-8"], "v6e-8: TPU v6e and later are not offered for TensorFlow training on Vertex AI"),
        (["--image", IMAGE, "--accelerator", "v5p-8"], "Vertex AI custom training offers no TPU v5p"),
        (["--image", IMAGE, "--accelerator", "NVIDIA_L4", "--gpus-per-worker", "3"], "Vertex AI offers NVIDIA_L4 in counts of 1, 2, 4, 8 per machine, not 3"),
        (["--image", IMAGE, "--accelerator", "TPU_V9"], "'TPU_V9' is neither a TPU type nor a Vertex AI GPU"),
        (["--image", IMAGE, "--gpus-per-worker", "1"], "--gpus-per-worker needs --accelerator with a Vertex GPU"),
        (["--image", IMAGE, "--accelerator", "v2-8", "--workers", "2"], "a Vertex TPU job is one slice"),
        (["--image", IMAGE, "--accelerator", "v2-8", "--machine-type", "n1-standard-8"], "a TPU type names its machine"),
        (["--image", IMAGE, "--model-dir", "/tmp/run"], "a Vertex job writes to gs://"),
        (["--image", IMAGE, "--staging-bucket", "s3://x"], "is not gs://BUCKET[/PATH]"),
        (["--image", IMAGE, "--service-account", "me@example.com"], "is not a service account's email"),
        (["--image", IMAGE, "--region", "Mars"], "is not a region"),
        (["--image", IMAGE, "--hang-timeout", "60"], "--hang-timeout is for local and ssh workers"),
        (["--image", IMAGE, "--max-restarts", "2"], "--max-restarts is for local and ssh workers"),
        (["--image", IMAGE, "--tail", "--model-dir", "gs://b/r"], "--tail is for local and ssh workers"),
        (["--image", IMAGE, "--rehearse", "v2-8"], "does not combine with --backend vertex"),
    ],
)
def test_what_vertex_cannot_run_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = in_process("launch", EXAMPLE, "--backend", "vertex", *args, "--dry-run", env=OFFLINE)
    assert result.code == 2, result.out + result.err
    assert message in result.err
    assert len(result.err.strip().splitlines()) <= 2 and "Traceback" not in result.err


@pytest.mark.parametrize("flag", [["--region", "us-central1"], ["--staging-bucket", "gs://b/p"], ["--service-account", "a@b.iam.gserviceaccount.com"]])
def test_vertex_options_elsewhere_are_refused(flag: list[str]) -> None:
    result = in_process("launch", EXAMPLE, *flag, "--dry-run", env=OFFLINE)
    assert result.code == 2
    assert f"{flag[0]} is for --backend vertex (this launch uses --backend local)" in result.err


def test_a_missing_script_is_refused_only_where_it_is_shipped(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.py")
    staged = in_process("launch", missing, "--backend", "vertex", "--image", IMAGE, "--staging-bucket", "gs://my-bucket/p", "--dry-run", env=OFFLINE)
    assert staged.code == 2 and "script not found" in staged.err
    inside_image = in_process("launch", "/app/train.py", "--backend", "vertex", "--image", IMAGE, "--dry-run", "--json", env=OFFLINE)
    assert inside_image.code == 0, inside_image.err  # a path inside the image


# --- Keras 3 on JAX ----------------------------------------------------------------------------


def _env(pool: dict[str, Any]) -> dict[str, str]:
    code = pool.get("containerSpec") or pool["pythonPackageSpec"]
    return {e["name"]: e["value"] for e in code["env"]}


def test_a_jax_run_s_pools_carry_no_strategy_and_its_backend() -> None:
    body = _body("--framework", "jax", "--workers", "3")
    cpu = {"machineType": "n1-standard-4"}
    assert _pools(body) == [("1", cpu), ("2", cpu)]  # process 0 in pool 0, the others in pool 1 (CLUSTER_SPEC's order)
    for pool in body["jobSpec"]["workerPoolSpecs"]:
        env = _env(pool)
        assert (env["TPUCTL_FRAMEWORK"], env["KERAS_BACKEND"]) == ("jax", "jax")
        assert not {"TPUCTL_STRATEGY", "TPUCTL_SCOPE", "TPUCTL_KERAS", "TF_CONFIG"} & set(env)
        # Each replica learns its place inside the job, from Vertex's CLUSTER_SPEC: no cluster is written here.
        assert not [name for name in env if name.startswith(("KERAS_DISTRIBUTION_", "JAX_COORDINATOR_"))]


def test_a_jax_run_s_own_keras_backend_setting_wins() -> None:
    env = _env(_body("--framework", "jax", "--env", "KERAS_BACKEND=jax", "--env", "XLA_FLAGS=--xla_dump_to=/tmp/x")["jobSpec"]["workerPoolSpecs"][0])
    assert env["KERAS_BACKEND"] == "jax" and env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


@pytest.mark.parametrize(
    ("accelerator", "machine"),
    [
        ("v6e-8", {"machineType": "ct6e-standard-8t", "tpuTopology": "2x4"}),
        ("v6e-4", {"machineType": "ct6e-standard-4t", "tpuTopology": "2x2"}),
        ("v6e-16", {"machineType": "ct6e-standard-4t", "tpuTopology": "4x4"}),
        ("v5litepod-8", {"machineType": "ct5lp-hightpu-8t", "acceleratorType": "TPU_V5_LITEPOD", "tpuTopology": "2x4"}),
    ],
)
def test_a_jax_run_trains_on_the_tpus_vertex_runs_jax_on(accelerator: str, machine: dict[str, Any]) -> None:
    """v6e: Vertex trains JAX there, not TensorFlow (training-with-tpu-vm); a TensorFlow run is still refused (above)."""
    body = _body("--framework", "jax", "--accelerator", accelerator)
    assert _pools(body) == [("1", machine)]
    env = _env(body["jobSpec"]["workerPoolSpecs"][0])
    assert "TPUCTL_STRATEGY" not in env and env["TPUCTL_FRAMEWORK"] == "jax"


def test_a_jax_run_s_requirements_may_bring_jax_s_tpu_runtime(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("jax[tpu]>=0.4.37\nkeras>=3.6\n")
    args = ("--accelerator", "v6e-8", "--staging-bucket", "gs://my-bucket/stage", "--requirements", str(requirements))
    jax = in_process("launch", EXAMPLE, "--framework", "jax", "--backend", "vertex", "--image", IMAGE, *args, "--dry-run", env=OFFLINE)
    assert jax.code == 0, jax.err
    assert f"installs with the bundle, before the script, {requirements}'s requirements (its install_requires): jax[tpu]>=0.4.37, keras>=3.6" in jax.out
    tensorflow = in_process("launch", EXAMPLE, "--backend", "vertex", "--image", IMAGE, *args[2:], "--accelerator", "v5litepod-8", "--dry-run", env=OFFLINE)
    assert tensorflow.code == 2 and "'jax[tpu]>=0.4.37' would install JAX's runtime" in tensorflow.err


def test_a_jax_dry_run_says_where_the_replicas_find_their_cluster() -> None:
    result = in_process("launch", EXAMPLE, "--framework", "jax", "--backend", "vertex", "--image", IMAGE, "--workers", "2", "--dry-run", env=OFFLINE)
    assert result.code == 0, result.err
    assert "turns Vertex's CLUSTER_SPEC into KERAS_DISTRIBUTION_*" in result.out and "no TF_CONFIG" in result.out


def test_a_jax_run_on_a_vertex_tpu_is_one_replica() -> None:
    args = ("--framework", "jax", "--backend", "vertex", "--image", IMAGE, "--accelerator", "v6e-8", "--workers", "2", "--dry-run")
    result = in_process("launch", EXAMPLE, *args, env=OFFLINE)
    assert result.code == 2 and "a Vertex TPU job is one slice, its JAX processes find the slice themselves" in result.err

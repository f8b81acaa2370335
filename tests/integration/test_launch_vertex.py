"""`launch --backend vertex` against the local Vertex AI + Cloud Logging stand-in and a GCS emulator:
staging, submission, following states and logs, the exit status, Ctrl-C cancelling, a detached run's
`runs`/`logs`/`stop`.

tpuctl runs as a subprocess with google-auth and requests talking plain HTTP to the stand-in,
which plays each job's life (tests/standins/vertex_api.py, JobScript)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import ROOT, tpuctl_cmd
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tests.standins.vertex_api import JobScript

EXAMPLE = ROOT / "examples" / "train_tpu.py"
IMAGE = "us-docker.pkg.dev/tpuctl-test/train/tf:2.21"


def _env(g: GoogleStandin, tmp_path: Path, gcs: str | None = None) -> dict[str, str]:
    env = standin_env(g, tmp_path) | {
        "TPUCTL_VERTEX_ENDPOINT": g.url,
        "TPUCTL_LOGGING_ENDPOINT": g.url,
        "TPUCTL_VERTEX_POLL_S": "0.1",
    }
    return env | ({"STORAGE_EMULATOR_HOST": gcs} if gcs else {})


def _launch(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = tpuctl_cmd("launch", str(EXAMPLE), "--backend", "vertex", "--image", IMAGE, "--log-dir", str(tmp_path / "logs"), *args)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def _staging_bucket(gcs: str, name: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": gcs})
    return client.create_bucket(name)


def test_a_staged_tpu_job_is_submitted_followed_and_succeeds(google_standin: GoogleStandin, tmp_path: Path, gcs_emulator: str) -> None:
    g = google_standin
    bucket = _staging_bucket(gcs_emulator, "stage")
    models = _staging_bucket(gcs_emulator, "models")
    g.vertex.next_script(JobScript(logs={"workerpool0-0": ["Epoch 1/2", "Epoch 2/2", "loss: 0.25"]}))
    result = _launch(
        _env(g, tmp_path, gcs_emulator), tmp_path, "--accelerator", "v5litepod-8", "--staging-bucket", "gs://stage/runs",
        "--model-dir", "gs://models/run1", "--region", "us-central1", "--json", "--", "--epochs", "2",
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert (outcome["backend"], outcome["result"], outcome["exit_code"]) == ("vertex", "succeeded", 0)
    assert outcome["job"]["kind"] == "CustomJob" and outcome["job"]["namespace"] == "us-central1"
    # The body that reached Vertex: the TPU's machine spec, the bundle it was told to install, the script's args.
    (body,) = g.vertex.created_bodies
    (pool,) = body["jobSpec"]["workerPoolSpecs"]
    assert pool["machineSpec"] == {"machineType": "ct5lp-hightpu-8t", "acceleratorType": "TPU_V5_LITEPOD", "tpuTopology": "2x4"}
    spec = pool["pythonPackageSpec"]
    assert spec["args"] == ["train_tpu.py", "--epochs", "2"] and spec["executorImageUri"] == IMAGE
    # ... and the bundle is in the bucket, with the script in it.
    (uri,) = spec["packageUris"]
    blob = bucket.blob(uri.removeprefix("gs://stage/"))
    with tarfile.open(fileobj=io.BytesIO(blob.download_as_bytes())) as tar:
        assert "tpuctl-job-0.0.0/tpuctl_job/train_tpu.py" in tar.getnames()
    # States as they came, then the job's own lines tagged like local workers' (worker output goes to stderr with --json).
    states = [line.rsplit(": ", 1)[1].split(" after")[0] for line in result.stderr.splitlines() if line.startswith("tpuctl: CustomJob ")]
    assert states == ["QUEUED", "PENDING", "RUNNING", "SUCCEEDED"]
    assert "[chief:0] Epoch 2/2" in result.stderr.splitlines()
    assert (tmp_path / "logs" / "attempt-1" / "chief-0.log").read_text().splitlines()[-1] == "loss: 0.25"
    # A job backend's run publishes its view into the model dir too (issue 37): the launcher's timeline of the job.
    view = json.loads(models.blob(f"run1/tpuctl/{outcome['run_id']}/view.json").download_as_bytes())
    assert view["run"]["backend"] == "vertex" and view["run"]["state"] == "succeeded" and "cannot publish" not in result.stderr


def test_the_run_stages_and_submits_the_request_its_dry_run_printed(google_standin: GoogleStandin, tmp_path: Path, gcs_emulator: str) -> None:
    """TorchX's `schedule(dryrun(...))`: the body and the address a dry run prints are what the run sends (issue 47)."""
    g = google_standin
    bucket = _staging_bucket(gcs_emulator, "stage")
    env = _env(g, tmp_path, gcs_emulator)
    args = ("--workers", "2", "--staging-bucket", "gs://stage/runs", "--env", "NOTE=x: y", "--region", "europe-west4", "--", "--epochs", "2")
    dry = _launch(env, tmp_path, "--dry-run", *args)
    assert dry.returncode == 0, dry.stderr
    head, text = dry.stdout.split("\n", 1)
    where = head.split(": POST ", 1)[1]
    printed = json.loads(text[text.index("{") : text.rindex("\n(dry run")])
    assert g.vertex.created_bodies == [] and not list(bucket.list_blobs())
    real = _launch(env, tmp_path, "--json", *args)
    assert real.returncode == 0, real.stderr
    run_id = json.loads(real.stdout)["run_id"]
    # The dry run's run id (its display name, its label, its TPUCTL_RUN_ID, its bundle's path) is its own; the rest is the run's request.
    (body,) = g.vertex.created_bodies
    assert json.loads(json.dumps(printed).replace(printed["displayName"], run_id)) == body
    (posted,) = [path for method, path, *_ in g.requests if method == "POST" and path.endswith("/customJobs")]
    assert posted == urlsplit(where).path == "/v1/projects/tpuctl-test/locations/europe-west4/customJobs"
    (uri,) = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    assert [blob.name for blob in bucket.list_blobs()] == [uri.removeprefix("gs://stage/")]


def test_a_staged_job_s_bundle_installs_the_requirements_file(google_standin: GoogleStandin, tmp_path: Path, gcs_emulator: str) -> None:
    """--requirements on Vertex AI: the bundle the run uploads declares the file's requirements as its install_requires,
    which Vertex's pip install of the bundle installs before the script (tests/unit/test_staging.py runs that pip)."""
    g = google_standin
    bucket = _staging_bucket(gcs_emulator, "stage")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# the tutorial's\ntensorflow-datasets>=4.9  # data\nkeras-hub>=0.18 ; python_version >= '3.9'\n")
    result = _launch(_env(g, tmp_path, gcs_emulator), tmp_path, "--staging-bucket", "gs://stage/runs", "--requirements", str(requirements), "--json")
    assert result.returncode == 0, result.stderr
    (body,) = g.vertex.created_bodies
    (uri,) = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
    with tarfile.open(fileobj=io.BytesIO(bucket.blob(uri.removeprefix("gs://stage/")).download_as_bytes())) as tar:
        setup = tar.extractfile("tpuctl-job-0.0.0/setup.py")
        assert setup is not None
        text = setup.read().decode()
    assert "install_requires=['tensorflow-datasets>=4.9', \"keras-hub>=0.18 ; python_version >= '3.9'\"]," in text


def test_a_jax_run_on_v6e_is_accepted_and_its_bundle_brings_jax_s_tpu_runtime(google_standin: GoogleStandin, tmp_path: Path, gcs_emulator: str) -> None:
    """Vertex trains JAX, not TensorFlow, on v6e: the stand-in (Vertex's contract) takes the hosts' machine type and
    topology, and the bundle declares the run's jax[tpu] (JAX's own libtpu), which a TensorFlow run on a TPU refuses."""
    g = google_standin
    bucket = _staging_bucket(gcs_emulator, "stage")
    script = tmp_path / "keras_jax.py"
    script.write_text('import os\nos.environ["KERAS_BACKEND"] = "jax"\nimport keras\nkeras.distribution.initialize()\n')
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("jax[tpu]>=0.4.37\nkeras>=3.6\n")
    argv = tpuctl_cmd(
        "launch", str(script), "--backend", "vertex", "--image", IMAGE, "--log-dir", str(tmp_path / "logs"), "--accelerator", "v6e-8",
        "--staging-bucket", "gs://stage/runs", "--requirements", str(requirements), "--json",
    )  # fmt: skip
    result = subprocess.run(argv, env=_env(g, tmp_path, gcs_emulator), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (body,) = g.vertex.created_bodies
    (pool,) = body["jobSpec"]["workerPoolSpecs"]
    assert pool["machineSpec"] == {"machineType": "ct6e-standard-8t", "tpuTopology": "2x4"}
    env = {e["name"]: e["value"] for e in pool["pythonPackageSpec"]["env"]}
    assert env["TPUCTL_FRAMEWORK"] == "jax" and "TPUCTL_STRATEGY" not in env
    (uri,) = pool["pythonPackageSpec"]["packageUris"]
    with tarfile.open(fileobj=io.BytesIO(bucket.blob(uri.removeprefix("gs://stage/")).download_as_bytes())) as tar:
        setup = tar.extractfile("tpuctl-job-0.0.0/setup.py")
        assert setup is not None
        assert "install_requires=['jax[tpu]>=0.4.37', 'keras>=3.6']," in setup.read().decode()


def test_a_failed_replica_is_named_with_its_status_and_last_lines(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.vertex.next_script(
        JobScript(
            end="JOB_STATE_FAILED",
            logs={"workerpool0-0": ["step 1"], "workerpool1-0": ["step 1"]},
            stderr={"workerpool1-0": ["Traceback (most recent call last):", "ValueError: bad batch"]},
            error=g.vertex.replica_failure("0", "workerpool1-0", 3),
        )
    )
    result = _launch(_env(g, tmp_path), tmp_path, "--workers", "2")
    assert result.returncode == 1, result.stderr  # FAILED; the replica's own status is in the failure
    (job_id,) = g.vertex.jobs
    assert f"tpuctl: CustomJob {job_id} failed: worker:0 (replica workerpool1-0) exit status 3 (FAILED)" in result.stderr
    assert "tpuctl: cause: uncaught Python exception: ValueError: bad batch" in result.stderr
    assert "    ValueError: bad batch" in result.stderr  # the replica's last lines
    assert "[worker:0] ValueError: bad batch" in result.stdout


def test_ctrl_c_cancels_the_job(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.vertex.next_script(JobScript(states=[("JOB_STATE_QUEUED", 0.2), ("JOB_STATE_RUNNING", 60.0)]))
    argv = tpuctl_cmd("launch", str(EXAMPLE), "--backend", "vertex", "--image", IMAGE, "--log-dir", str(tmp_path / "logs"))
    proc = subprocess.Popen(argv, env=_env(g, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(job.get("state") == "JOB_STATE_RUNNING" for job in g.vertex.jobs.values()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    (job_id,) = g.vertex.jobs
    assert g.vertex.cancelled == [job_id]
    assert g.vertex.jobs[job_id]["state"] == "JOB_STATE_CANCELLED"
    assert f"tpuctl: received SIGINT; cancelling CustomJob {job_id}" in stderr
    assert f"interrupted; CustomJob {job_id} cancelled (exit 130)" in stderr


def test_a_detached_launch_follows_the_job_on_its_own_and_stop_cancels_it(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """`launch --detach` (issue 23): the follower goes on in a process of its own; `runs` lists the run, `logs`
    prints the replicas' lines, `stop` cancels the job as Ctrl-C on an attached launch does."""
    g = google_standin
    logs = {"workerpool0-0": ["epoch 1 loss 0.5", "epoch 2 loss 0.25"]}
    g.vertex.next_script(JobScript(states=[("JOB_STATE_QUEUED", 0.2), ("JOB_STATE_RUNNING", 0.5), ("JOB_STATE_RUNNING", 60.0)], logs=logs))
    env = _env(g, tmp_path) | {"XDG_STATE_HOME": str(tmp_path / "state")}
    started = time.monotonic()
    result = _launch(env, tmp_path, "--detach", "--json")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    said = json.loads(result.stdout)
    run_id = said["run_id"]
    assert (said["backend"], said["state"], said["log_dir"]) == ("vertex", "running", str(tmp_path / "logs"))
    _wait(lambda: any(job.get("state") == "JOB_STATE_RUNNING" for job in g.vertex.jobs.values()))
    (job_id,) = g.vertex.jobs
    assert _row(env, run_id)["state"] == "running"
    _wait(lambda: "[chief:0] epoch 2 loss 0.25" in _tpuctl(env, "logs", run_id).stdout.splitlines())
    stop = _tpuctl(env, "stop", run_id)
    assert stop.returncode == 0, stop.stderr
    assert f"run {run_id} stopped" in stop.stdout
    assert g.vertex.cancelled == [job_id] and g.vertex.jobs[job_id]["state"] == "JOB_STATE_CANCELLED"
    row = _row(env, run_id)
    assert (row["state"], row["exit_code"]) == ("stopped", 130) and job_id in str(row["job"])
    console = (tmp_path / "logs" / "console.log").read_text()
    assert f"tpuctl: received SIGTERM; cancelling CustomJob {job_id}" in console.splitlines(), console
    assert json.loads(console.splitlines()[-1])["result"] == "interrupted"  # --json: the outcome ends the console


def _tpuctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tpuctl_cmd(*args), env=env, capture_output=True, text=True, timeout=90)


def _row(env: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run as `tpuctl runs --json` lists it."""
    (row,) = [row for row in json.loads(_tpuctl(env, "runs", "--json").stdout) if row["run_id"] == run_id]
    return dict(row)


def _wait(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_create_whose_reply_is_lost_is_found_not_sent_twice(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.vertex.next_script(JobScript())
    g.faults.burst_after_effect(1, 503)  # Vertex creates the job, and the reply is lost
    result = _launch(_env(g, tmp_path), tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    (job_id,) = g.vertex.jobs  # one job: found by the run's label, not created again
    assert json.loads(result.stdout)["job"]["name"] == job_id
    assert len(g.vertex.created_bodies) == 1


def test_logs_that_cannot_be_read_do_not_stop_the_run(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.faults.denied_permissions.add("logging.logEntries.list")
    result = _launch(_env(g, tmp_path), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tpuctl: warning: cannot read the job's logs:" in result.stderr
    assert "logging.logEntries.list" in result.stderr


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("denied", "aiplatform.customJobs.create"),
        ("disabled", "aiplatform.googleapis.com"),
    ],
)
def test_a_refused_submission_is_one_line_and_exit_1(google_standin: GoogleStandin, tmp_path: Path, fault: str, message: str) -> None:
    g = google_standin
    if fault == "denied":
        g.faults.denied_permissions.add("aiplatform.customJobs.create")
    else:
        g.faults.disabled_apis.add("aiplatform.googleapis.com")
    result = _launch(_env(g, tmp_path), tmp_path)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("Error:")]) == 1
    assert g.vertex.jobs == {}


def test_a_missing_staging_bucket_is_one_line_and_nothing_is_submitted(google_standin: GoogleStandin, tmp_path: Path, gcs_emulator: str) -> None:
    g = google_standin
    result = _launch(_env(g, tmp_path, gcs_emulator), tmp_path, "--staging-bucket", "gs://no-such-bucket/x")
    assert result.returncode == 1
    assert "Error: staging bucket gs://no-such-bucket does not exist" in result.stderr
    assert g.vertex.created_bodies == []


TOKEN, PASSWORD = "tok-3f9a1c7e2b", "pw-long-enough"


def _shown_secrets(result: subprocess.CompletedProcess[str], tmp_path: Path) -> list[str]:
    outcome = tmp_path / "logs" / "outcome.json"
    shown = result.stdout + result.stderr + (outcome.read_text() if outcome.exists() else "")
    return [value for value in (TOKEN, PASSWORD) if value in shown]


@pytest.mark.parametrize("where", ["refused-create", "failed-job"])
def test_an_api_error_that_quotes_the_body_never_shows_a_secret(google_standin: GoogleStandin, tmp_path: Path, where: str) -> None:
    """Vertex relays what it was sent, in a refusal or in a failed job's error: tpuctl's words hide the job's secrets."""
    g = google_standin

    def quoted(body: dict[str, Any]) -> str:
        container = body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
        env = ",".join(f"{item['name']}={item['value']}" for item in container.get("env", []) if item["name"] == "API_TOKEN")
        return f"Organization policy denies plaintext credentials: env {env}; args {' '.join(container.get('args', [])[-4:])}"

    if where == "refused-create":
        g.vertex.refuse = quoted
    else:
        g.vertex.next_script(JobScript(end="JOB_STATE_FAILED", error=f"Invalid argument: env API_TOKEN={TOKEN}; args --password {PASSWORD} --epochs 3"))
    result = _launch(_env(g, tmp_path), tmp_path, "--env", f"API_TOKEN={TOKEN}", "--", "--password", PASSWORD, "--epochs", "3")
    assert result.returncode == (2 if where == "refused-create" else 1), result.stderr  # a refused request is bad input
    assert "API_TOKEN=<hidden: 14 characters>" in result.stderr and "--epochs 3" in result.stderr, result.stderr  # still readable
    assert _shown_secrets(result, tmp_path) == [], result.stdout + result.stderr

"""`tpuctl auth --vertex` as a user runs it: a subprocess against the Google stand-in (CRM, Service Usage, Storage, IAM)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuctl
from tests.standins.faults import FirstReadsTogether
from tests.standins.fixtures import service_account_email, standin_env, write_service_account_key
from tests.standins.google_apis import GoogleStandin

BUCKET = "tpuctl-test-staging"
MODEL_BUCKET = "tpuctl-test-models"
RUNNER = "runner@tpuctl-test.iam.gserviceaccount.com"


def agents(g: GoogleStandin) -> tuple[str, str]:
    n = g.project_number
    return (
        f"serviceAccount:service-{n}@gcp-sa-aiplatform.iam.gserviceaccount.com",
        f"serviceAccount:service-{n}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com",
    )


def env_for(g: GoogleStandin, tmp_path: Path) -> dict[str, str]:
    return {**standin_env(g, tmp_path), "TPUCTL_STORAGE_ENDPOINT": g.url, "TPUCTL_IAM_ENDPOINT": g.url}


def auth(g: GoogleStandin, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_tpuctl("auth", "--vertex", *args, env=env or env_for(g, tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=120)


def members(policy: dict[str, Any], role: str) -> set[str]:
    return {m for b in policy.get("bindings", []) if b["role"] == role and "condition" not in b for m in b["members"]}


def writes(g: GoogleStandin) -> int:
    return g.count("POST", ":setIamPolicy") + g.count("PUT", "/iam")


@pytest.fixture
def g(google_standin: GoogleStandin) -> GoogleStandin:
    google_standin.projects.add_bucket(BUCKET)
    google_standin.projects.add_bucket(MODEL_BUCKET)
    return google_standin


def test_dry_run_shows_every_policy_diff_and_changes_nothing(g: GoogleStandin, tmp_path: Path) -> None:
    before = (g.iam_policy(), dict(g.projects.buckets))
    done = auth(g, tmp_path, "--dry-run", "--staging-bucket", f"gs://{BUCKET}/code", "--model-dir", f"gs://{MODEL_BUCKET}/runs")
    assert done.returncode == 0, done.stderr
    agent, cc = agents(g)
    lines = done.stdout.splitlines()
    assert lines[3:] == [
        "APIs enabled: aiplatform.googleapis.com, storage.googleapis.com, logging.googleapis.com",
        f"Vertex AI service agent: {agent[15:]}",
        f"Vertex AI custom code service agent: {cc[15:]}",
        f"jobs run as: {cc[15:]} (the default)",
        "IAM policy of project tpuctl-test, bindings to add:",
        f"+ roles/aiplatform.serviceAgent  {agent}",
        f"+ roles/aiplatform.customCodeServiceAgent  {cc}",
        f"IAM policy of bucket gs://{BUCKET}, bindings to add:",
        f"+ roles/storage.objectAdmin  {cc}",
        f"IAM policy of bucket gs://{MODEL_BUCKET}, bindings to add:",
        f"+ roles/storage.objectAdmin  {cc}",
        "equivalent gcloud commands:",
        "  gcloud beta services identity create --service=aiplatform.googleapis.com --project=tpuctl-test",
        f"  gcloud projects add-iam-policy-binding tpuctl-test --member={agent} --role=roles/aiplatform.serviceAgent",
        f"  gcloud projects add-iam-policy-binding tpuctl-test --member={cc} --role=roles/aiplatform.customCodeServiceAgent",
        f"  gcloud storage buckets add-iam-policy-binding gs://{BUCKET} --member={cc} --role=roles/storage.objectAdmin",
        f"  gcloud storage buckets add-iam-policy-binding gs://{MODEL_BUCKET} --member={cc} --role=roles/storage.objectAdmin",
        "dry run: nothing changed",
    ]
    assert done.stderr == ""
    assert writes(g) == 0 and g.count("POST", ":generateServiceIdentity") == 0
    assert (g.iam_policy(), dict(g.projects.buckets)) == before


def test_grants_on_the_first_run_and_nothing_on_the_second(g: GoogleStandin, tmp_path: Path) -> None:
    agent, cc = agents(g)
    first = auth(g, tmp_path, "--yes", "--staging-bucket", f"gs://{BUCKET}")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-2:] == [
        "updated the IAM policy of project tpuctl-test: all 2 binding(s) above are in place",
        f"updated the IAM policy of bucket gs://{BUCKET}: all 1 binding(s) above are in place",
    ]
    policy = g.iam_policy()
    assert agent in members(policy, "roles/aiplatform.serviceAgent") and cc in members(policy, "roles/aiplatform.customCodeServiceAgent")
    bucket = g.projects.buckets[BUCKET]
    assert members(bucket, "roles/storage.objectAdmin") == {cc}
    assert f"projectOwner:{g.project}" in members(bucket, "roles/storage.legacyBucketOwner"), "the bucket's own bindings are kept"
    # The agents were created before anything named them (the stand-in refuses unknown agents, as Google does).
    assert g.count("POST", "/services/aiplatform.googleapis.com:generateServiceIdentity") == 1
    assert writes(g) == 2

    again = auth(g, tmp_path, "--staging-bucket", f"gs://{BUCKET}")  # no --yes, no terminal: fine when nothing changes
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-2:] == [
        "nothing to change: the IAM policy of project tpuctl-test already has all 2 binding(s)",
        f"nothing to change: the IAM policy of bucket gs://{BUCKET} already has all 1 binding(s)",
    ]
    assert writes(g) == 2 and g.count("POST", ":generateServiceIdentity") == 1
    assert g.iam_policy() == policy and g.projects.buckets[BUCKET] == bucket


def test_service_account_gets_the_bucket_and_the_caller_may_act_as_it(g: GoogleStandin, tmp_path: Path) -> None:
    key = write_service_account_key(g, tmp_path / "key.json")
    env = {k: v for k, v in env_for(g, tmp_path).items() if k != "TPUCTL_ACCESS_TOKEN_FILE"}
    g.projects.add_service_account(RUNNER)
    g.faults.denied_permissions.add("iam.serviceAccounts.actAs")
    args = ("--credentials", str(key), "--staging-bucket", f"gs://{BUCKET}", "--service-account", RUNNER, "--role", "roles/aiplatform.user")
    dry = auth(g, tmp_path, *args, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    caller = f"serviceAccount:{service_account_email(g)}"
    assert f"jobs run as: {RUNNER} (--service-account)" in dry.stdout
    assert [line for line in dry.stdout.splitlines() if line.startswith("+ ")][2:] == [
        f"+ roles/aiplatform.user  serviceAccount:{RUNNER}",
        f"+ roles/storage.objectAdmin  serviceAccount:{RUNNER}",
        f"+ roles/iam.serviceAccountUser  {caller}",
    ]
    assert f"  gcloud iam service-accounts add-iam-policy-binding {RUNNER} --member={caller} --role=roles/iam.serviceAccountUser" in dry.stdout
    done = auth(g, tmp_path, *args, "--yes", env=env)
    assert done.returncode == 0, done.stderr
    assert members(g.projects.service_accounts[RUNNER], "roles/iam.serviceAccountUser") == {caller}
    assert members(g.projects.buckets[BUCKET], "roles/storage.objectAdmin") == {f"serviceAccount:{RUNNER}"}
    again = auth(g, tmp_path, *args, env=env)
    assert again.returncode == 0, again.stderr
    assert f"you can act as {RUNNER}" in again.stdout and "+ " not in again.stdout


def test_a_caller_who_can_act_as_the_account_gets_nothing_there(g: GoogleStandin, tmp_path: Path) -> None:
    g.projects.add_service_account(RUNNER)
    done = auth(g, tmp_path, "--dry-run", "--service-account", RUNNER)
    assert done.returncode == 0, done.stderr
    assert f"you can act as {RUNNER}" in done.stdout and "serviceAccountUser" not in done.stdout
    assert "note: no staging bucket or model dir set" in done.stdout


def test_a_caller_without_launch_permissions_is_warned(g: GoogleStandin, tmp_path: Path) -> None:
    g.faults.denied_permissions.add("aiplatform.customJobs.create")
    done = auth(g, tmp_path, "--dry-run", "--staging-bucket", f"gs://{BUCKET}")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: you cannot yet launch Vertex jobs in project tpuctl-test: missing aiplatform.customJobs.create"
        " (ask an admin for roles/aiplatform.user and roles/logging.viewer)"
    ]


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("aiplatform-off", "aiplatform.googleapis.com is not enabled in project tpuctl-test (gcloud services enable aiplatform.googleapis.com --project tpuctl-test)"),
        ("storage-logging-off", "storage.googleapis.com, logging.googleapis.com are not enabled in project tpuctl-test (gcloud services enable"),
        ("no-bucket", "bucket gs://no-such-bucket does not exist (create it (gcloud storage buckets create gs://no-such-bucket"),
        ("deny-bucket-get", f"permission denied: read the IAM policy of bucket gs://{BUCKET} needs storage.buckets.getIamPolicy (ask the owner"),
        ("deny-bucket-set", f"permission denied: update the IAM policy of bucket gs://{BUCKET} needs storage.buckets.setIamPolicy"),
        ("deny-project-set", "needs resourcemanager.projects.setIamPolicy in project tpuctl-test"),
        ("no-service-account", f"service account {RUNNER} does not exist"),
    ],
)
def test_failures_are_one_line_and_exit_1(g: GoogleStandin, tmp_path: Path, fault: str, expected: str) -> None:
    bucket = "no-such-bucket" if fault == "no-bucket" else BUCKET
    args = ["--yes", "--staging-bucket", f"gs://{bucket}/code"]
    if fault == "aiplatform-off":
        g.faults.disabled_apis.add("aiplatform.googleapis.com")
    elif fault == "storage-logging-off":
        g.faults.disabled_apis |= {"storage.googleapis.com", "logging.googleapis.com"}
    elif fault == "deny-bucket-get":
        g.faults.denied_permissions.add("storage.buckets.getIamPolicy")
    elif fault == "deny-bucket-set":
        g.faults.denied_permissions.add("storage.buckets.setIamPolicy")
    elif fault == "deny-project-set":
        g.faults.denied_permissions.add("resourcemanager.projects.setIamPolicy")
    elif fault == "no-service-account":
        args += ["--service-account", RUNNER]
    done = auth(g, tmp_path, *args)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert expected in lines[0]
    assert "Traceback" not in done.stderr and g.token not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--legacy-ai-platform"], "--vertex and --legacy-ai-platform are two different flows"),
        (["--staging-bucket", "/local"], "--staging-bucket '/local' is not a gs:// path"),
        (["--staging-bucket", "gs://B!"], "does not name a bucket"),
        (["--service-account", "nobody"], "is not a service account email"),
        (["--staging-bucket", f"gs://{BUCKET}"], "would change the IAM policy of project tpuctl-test, bucket gs://"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(g: GoogleStandin, tmp_path: Path, args: list[str], expected: str) -> None:
    done = auth(g, tmp_path, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], done.stderr
    assert writes(g) == 0


def test_staging_bucket_needs_vertex(g: GoogleStandin, tmp_path: Path) -> None:
    done = run_tpuctl("auth", "--zone", g.zones[0], "--staging-bucket", f"gs://{BUCKET}", env=env_for(g, tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2 and "--staging-bucket only applies with --vertex" in done.stderr


def test_simultaneous_writers_meet_412_on_the_bucket_and_all_get_their_bindings(tmp_path: Path) -> None:
    """Three read-modify-writes of one bucket policy overlap (the stand-in holds each writer's first read until all
    three have asked: processes that start seconds apart on a loaded machine would otherwise never overlap): Storage
    answers 412 to stale etags."""
    from tests.conftest import tpuctl_cmd

    with GoogleStandin(project="tpuctl-test", seed=5) as g:
        g.projects.add_bucket(BUCKET)
        accounts = [f"w{i}@tpuctl-test.iam.gserviceaccount.com" for i in range(3)]
        for account in accounts:
            g.projects.add_service_account(account)
        g.faults.latency_s = 0.15
        together = FirstReadsTogether(len(accounts), lambda method, path: method == "GET" and path == f"/storage/v1/b/{BUCKET}/iam")
        g.on_request = together
        env = env_for(g, tmp_path)
        procs = [
            subprocess.Popen(
                tpuctl_cmd("auth", "--vertex", "--yes", "--staging-bucket", f"gs://{BUCKET}", "--service-account", account),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
            )
            for account in accounts
        ]
        outputs = [proc.communicate(timeout=120) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
        stale = sum(1 for method, path, status in g.requests if method == "PUT" and status == 412)
        bucket = g.projects.buckets[BUCKET]
    assert together.all_held, together.held
    assert stale >= 1, "the writers did not overlap; the test proves nothing"
    assert members(bucket, "roles/storage.objectAdmin") == {f"serviceAccount:{a}" for a in accounts}

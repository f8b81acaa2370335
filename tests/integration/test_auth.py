"""`tpuctl auth` as a user runs it: a subprocess talking to the Google stand-in over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_tpuctl, tpuctl_cmd
from tests.standins.faults import FirstReadsTogether
from tests.standins.fixtures import (
    standin_env,
    write_authorized_user,
    write_service_account_key,
)
from tests.standins.google_apis import GoogleStandin

BUCKET = "tpuctl-test-models"
MODEL_DIR = f"gs://{BUCKET}/runs"
OBJECT_ADMIN = "roles/storage.objectAdmin"
LOG_WRITER = "roles/logging.logWriter"
CONDITION = {
    "title": f"tpuctl-model-dir-{BUCKET}",
    "expression": f'resource.name == "projects/_/buckets/{BUCKET}" '
    f'|| resource.name.startsWith("projects/_/buckets/{BUCKET}/")',
}


def agent(g: GoogleStandin) -> str:
    return f"serviceAccount:service-{g.project_number}@cloud-tpu.iam.gserviceaccount.com"


def auth(g: GoogleStandin, tmp_path: Path, *args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    kw.setdefault("stdin", subprocess.DEVNULL)
    return run_tpuctl("auth", "--zone", g.zones[0], *args, env=env or standin_env(g, tmp_path), cwd=tmp_path, timeout=120, **kw)


def granted(policy: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(role, condition title, condition expression, member) for every member of every binding."""
    return {
        (b["role"], (b.get("condition") or {}).get("title", ""), (b.get("condition") or {}).get("expression", ""), m)
        for b in policy.get("bindings", [])
        for m in b["members"]
    }


def assert_no_duplicates(policy: dict[str, Any]) -> None:
    keys = [(b["role"], json.dumps(b.get("condition"), sort_keys=True)) for b in policy.get("bindings", [])]
    assert len(keys) == len(set(keys)), f"two bindings with one role and condition: {policy}"
    for binding in policy.get("bindings", []):
        assert len(binding["members"]) == len(set(binding["members"])), f"member listed twice: {binding}"


def set_calls(g: GoogleStandin) -> int:
    return g.count("POST", ":setIamPolicy")


# The contract: what a dry run shows, what a write does, what a re-run does


def test_dry_run_prints_the_exact_diff_and_changes_nothing(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    before = g.iam_policy()
    sa = "runner@tpuctl-test.iam.gserviceaccount.com"
    done = auth(g, tmp_path, "--dry-run", "--model-dir", MODEL_DIR, "--role", "roles/tpu.viewer", "--service-account", sa)
    assert done.returncode == 0, done.stderr
    me, other = agent(g), f"serviceAccount:{sa}"
    cond = f"--condition='expression={CONDITION['expression']},title={CONDITION['title']}'"
    add = "gcloud projects add-iam-policy-binding tpuctl-test"
    assert done.stdout.splitlines() == [
        f"credentials: access token file {tmp_path / 'access-token'}",
        "account: (not named by these credentials)",
        "project: tpuctl-test (from TPUCTL_PROJECT)",
        f"TPU service identity: {me[len('serviceAccount:'):]}",
        "IAM policy of project tpuctl-test, bindings to add:",
        f"+ {OBJECT_ADMIN}  {me}  if {CONDITION['title']}",
        f"+ {LOG_WRITER}  {me}",
        f"+ roles/tpu.viewer  {me}",
        f"+ {OBJECT_ADMIN}  {other}  if {CONDITION['title']}",
        f"+ {LOG_WRITER}  {other}",
        f"+ roles/tpu.viewer  {other}",
        "equivalent gcloud commands:",
        "  gcloud beta services identity create --service=tpu.googleapis.com --project=tpuctl-test",
        f"  {add} --member={me} --role={OBJECT_ADMIN} {cond}",
        f"  {add} --member={me} --role={LOG_WRITER}",
        f"  {add} --member={me} --role=roles/tpu.viewer",
        f"  {add} --member={other} --role={OBJECT_ADMIN} {cond}",
        f"  {add} --member={other} --role={LOG_WRITER}",
        f"  {add} --member={other} --role=roles/tpu.viewer",
        "dry run: nothing changed",
    ]
    assert set_calls(g) == 0
    assert g.iam_policy() == before
    assert g.count("POST", ":generateServiceIdentity") == 1


def test_dry_run_lists_only_what_is_missing(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    policy = g.iam_policy()
    policy["bindings"].append({"role": LOG_WRITER, "members": [agent(g)]})
    g.set_iam_policy_externally(policy)
    done = auth(g, tmp_path, "--dry-run", "--model-dir", MODEL_DIR)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("+ ")] == [
        f"+ {OBJECT_ADMIN}  {agent(g)}  if {CONDITION['title']}"
    ]


def test_grants_then_rerun_is_a_noop(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    before = granted(g.iam_policy())
    first = auth(g, tmp_path, "--yes", "--model-dir", MODEL_DIR)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "updated the IAM policy of project tpuctl-test: all 2 binding(s) above are in place"
    policy = g.iam_policy()
    assert policy["version"] == 3
    assert granted(policy) == before | {
        (OBJECT_ADMIN, CONDITION["title"], CONDITION["expression"], agent(g)),
        (LOG_WRITER, "", "", agent(g)),
    }
    assert set_calls(g) == 1

    again = auth(g, tmp_path, "--model-dir", MODEL_DIR)  # no --yes, no terminal: fine when nothing changes
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "nothing to change: the IAM policy of project tpuctl-test already has all 2 binding(s)"
    assert not any(line.startswith("+ ") for line in again.stdout.splitlines())
    assert set_calls(g) == 1, "a re-run must not write the policy"
    assert g.iam_policy() == policy


def test_model_dir_setting_and_project_wide_fallback(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    env = standin_env(g, tmp_path)
    project_wide = auth(g, tmp_path, "--dry-run", env=env)
    assert project_wide.returncode == 0, project_wide.stderr
    assert f"+ {OBJECT_ADMIN}  {agent(g)}" in project_wide.stdout.splitlines()
    assert "note: no model dir set" in project_wide.stdout and "--model-dir gs://" in project_wide.stdout
    from_setting = auth(g, tmp_path, "--dry-run", env={**env, "TPUCTL_MODEL_DIR": MODEL_DIR})
    assert f"+ {OBJECT_ADMIN}  {agent(g)}  if {CONDITION['title']}" in from_setting.stdout.splitlines()
    assert "note:" not in from_setting.stdout


def test_other_bindings_and_conditions_are_kept(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    policy = g.iam_policy()
    theirs = {"title": "office-hours", "expression": "request.time.getHours('UTC') < 18"}
    policy["version"] = 3
    policy["bindings"] += [
        {"role": OBJECT_ADMIN, "members": ["user:ada@example.com"], "condition": theirs},
        {"role": OBJECT_ADMIN, "members": ["user:bob@example.com"], "condition": CONDITION},
        {"role": LOG_WRITER, "members": ["group:ml@example.com"]},
    ]
    g.set_iam_policy_externally(policy)
    before = granted(g.iam_policy())
    done = auth(g, tmp_path, "--yes", "--model-dir", MODEL_DIR)
    assert done.returncode == 0, done.stderr
    after = g.iam_policy()
    assert granted(after) == before | {
        (OBJECT_ADMIN, CONDITION["title"], CONDITION["expression"], agent(g)),
        (LOG_WRITER, "", "", agent(g)),
    }
    assert_no_duplicates(after)
    joined = [b for b in after["bindings"] if b.get("condition") == CONDITION]
    assert len(joined) == 1 and set(joined[0]["members"]) == {"user:bob@example.com", agent(g)}


def test_legacy_ai_platform_flow(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    done = auth(g, tmp_path, "--legacy-ai-platform", "--yes", "--role", "roles/storage.objectViewer")
    assert done.returncode == 0, done.stderr
    assert "AI Platform Training was shut down on 2025-01-31" in done.stderr
    me = agent(g)
    assert f"TPU service account (ml getConfig): {me[len('serviceAccount:'):]}" in done.stdout
    assert f"TPU service agent (serviceusage): {me[len('serviceAccount:'):]}" in done.stdout
    assert [line for line in done.stdout.splitlines() if line.startswith("+ ")] == [
        f"+ roles/ml.serviceAgent  {me}",
        f"+ roles/storage.objectViewer  {me}",
    ]
    assert {("roles/ml.serviceAgent", "", "", me), ("roles/storage.objectViewer", "", "", me)} <= granted(g.iam_policy())
    assert g.count("GET", ":getConfig") == 1
    assert g.count("POST", "/v1beta1/projects/tpuctl-test/services/tpu.googleapis.com:generateServiceIdentity") == 1
    again = auth(g, tmp_path, "--legacy-ai-platform", "--role", "roles/storage.objectViewer")
    assert again.returncode == 0 and "nothing to change" in again.stdout
    assert set_calls(g) == 1


def test_asks_on_a_terminal(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """On a terminal tpuctl shows the diff and asks; 'n' changes nothing, 'y' writes."""
    g = google_standin
    for answer, code, writes in (("n", 1, 0), ("y", 0, 1)):
        main, secondary = os.openpty()
        try:
            proc = subprocess.Popen(
                tpuctl_cmd("auth", "--zone", g.zones[0], "--model-dir", MODEL_DIR),
                stdin=secondary,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=standin_env(g, tmp_path),
                cwd=tmp_path,
            )
            os.write(main, f"{answer}\n".encode())
            out, err = proc.communicate(timeout=60)
        finally:
            os.close(main)
            os.close(secondary)
        assert proc.returncode == code, err
        assert "Add 2 binding(s) to the IAM policy of project tpuctl-test?" in err
        assert f"+ {LOG_WRITER}  {agent(g)}" in out
        assert set_calls(g) == writes


# Failures: one line on stderr, exit 2 for bad input, 1 for a failed operation


@pytest.mark.parametrize(
    ("args", "env_change", "expected"),
    [
        (["--role", "storage.objectAdmin"], {}, "--role 'storage.objectAdmin' is not a role name"),
        (["--role", "roles/has space"], {}, "is not a role name"),
        (["--service-account", "nobody"], {}, "--service-account 'nobody' is not a service account email"),
        (["--model-dir", "/local/dir"], {}, "model-dir '/local/dir' from --model-dir is not valid"),
        (["--project", "Bad_Project"], {}, "project 'Bad_Project' from --project is not valid"),
        (["--zone", "nowhere"], {}, "zone 'nowhere' from --zone is not valid"),
        ([], {"TPUCTL_PROJECT": None}, "no project set"),
        (["--yes"], {"TPUCTL_ZONE": None}, "no zone set"),
        (["--legacy-ai-platform", "--model-dir", MODEL_DIR], {}, "--model-dir has no effect with --legacy-ai-platform"),
        (["--model-dir", MODEL_DIR], {}, "would change the IAM policy of project tpuctl-test"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    google_standin: GoogleStandin, tmp_path: Path, args: list[str], env_change: dict[str, str | None], expected: str
) -> None:
    g = google_standin
    env = standin_env(g, tmp_path)
    for name, value in env_change.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    command = ["auth", *args] if "TPUCTL_ZONE" in env_change else ["auth", "--zone", g.zones[0], *args]
    done = run_tpuctl(*command, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: ") and expected in lines[0]
    assert set_calls(g) == 0


@pytest.mark.parametrize(
    ("fault", "expected", "hint"),
    [
        ("deny-set", "permission denied: update the IAM policy needs resourcemanager.projects.setIamPolicy", "ask an admin"),
        ("deny-get", "needs resourcemanager.projects.getIamPolicy", "ask an admin"),
        ("deny-identity", "needs tpu.locations.generateServiceIdentity", "ask an admin"),
        ("crm-off", "the cloudresourcemanager.googleapis.com API is not enabled in project tpuctl-test", "gcloud services enable"),
        ("bad-token", "", ""),
        ("bad-token-legacy", "Google refused the credentials while trying to read the AI Platform config", "gcloud auth application-default login"),
    ],
)
def test_failed_operations_are_one_line_and_exit_1(
    google_standin: GoogleStandin, tmp_path: Path, fault: str, expected: str, hint: str
) -> None:
    g = google_standin
    env = standin_env(g, tmp_path)
    if fault == "deny-set":
        g.faults.denied_permissions.add("resourcemanager.projects.setIamPolicy")
    elif fault == "deny-get":
        g.faults.denied_permissions.add("resourcemanager.projects.getIamPolicy")
    elif fault == "deny-identity":
        g.faults.denied_permissions.add("tpu.locations.generateServiceIdentity")
    elif fault == "crm-off":
        g.faults.disabled_apis.add("cloudresourcemanager.googleapis.com")
    elif fault.startswith("bad-token"):
        Path(env["TPUCTL_ACCESS_TOKEN_FILE"]).write_text("ya29.not-the-right-one\n")
    flow = ["--legacy-ai-platform"] if fault.endswith("legacy") else ["--model-dir", MODEL_DIR]
    done = auth(g, tmp_path, "--yes", *flow, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if not line.startswith("warning: AI Platform")]
    assert len(errors) == 1 and errors[0].startswith("Error: "), done.stderr
    assert expected in errors[0] and hint in errors[0]
    assert "Traceback" not in done.stderr
    assert set_calls(g) == 0 or fault == "deny-set"


def test_no_credentials_says_how_to_log_in(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    env = standin_env(g, tmp_path)
    del env["TPUCTL_ACCESS_TOKEN_FILE"]
    done = auth(g, tmp_path, "--dry-run", env=env)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert "gcloud auth application-default login" in done.stderr and "--credentials KEY.json" in done.stderr


# Robustness: transient failures, concurrent writers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_succeeds_with_30_percent_of_requests_failing(tmp_path: Path, seed: int) -> None:
    """Every call (TPU, getIamPolicy, setIamPolicy) may fail; half of the failed writes took effect anyway."""
    with GoogleStandin(project="tpuctl-test", seed=seed) as g:
        g.faults.transient_rate = 0.3
        roles = ["roles/tpu.viewer", "roles/monitoring.metricWriter", "roles/storage.objectViewer"]
        accounts = [f"w{i}@tpuctl-test.iam.gserviceaccount.com" for i in range(len(roles))]
        for role, account in zip(roles, accounts):
            done = auth(g, tmp_path, "--yes", "--model-dir", MODEL_DIR, "--role", role, "--service-account", account)
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines()[-1].endswith(("binding(s) above are in place", "concurrent change(s)")), done.stdout
        failed = [status for _, _, status in g.requests if status >= 500 or status == 429]
        assert failed, "the fault injection did not happen"
        rerun = auth(g, tmp_path, "--model-dir", MODEL_DIR, "--role", roles[0], "--service-account", accounts[0])
        assert rerun.returncode == 0 and "nothing to change" in rerun.stdout, rerun.stderr
        g.faults.transient_rate = 0.0
        policy = g.iam_policy()
    assert_no_duplicates(policy)
    have = granted(policy)
    for role, account in zip(roles, accounts):
        for member in (agent(g), f"serviceAccount:{account}"):
            assert (OBJECT_ADMIN, CONDITION["title"], CONDITION["expression"], member) in have
            assert (LOG_WRITER, "", "", member) in have
            assert (role, "", "", member) in have


def external_add(g: GoogleStandin, role: str, member: str) -> None:
    """Another admin's tool: its own read-modify-write over HTTP with the etag, retried on 409/5xx."""
    headers = {"Authorization": f"Bearer {g.token}"}
    base = f"{g.url}/v1/projects/{g.project}"
    for _ in range(200):
        got = requests.post(f"{base}:getIamPolicy", json={"options": {"requestedPolicyVersion": 3}}, headers=headers, timeout=30)
        if got.status_code != 200:
            time.sleep(0.01)
            continue
        policy = got.json()
        if any(b["role"] == role and "condition" not in b and member in b["members"] for b in policy.get("bindings", [])):
            return
        policy.setdefault("bindings", []).append({"role": role, "members": [member]})
        put = requests.post(f"{base}:setIamPolicy", json={"policy": policy}, headers=headers, timeout=30)
        if put.status_code == 200:
            return
        time.sleep(0.005)
    raise AssertionError("external writer never got its write in")


writer_st = st.tuples(
    st.lists(st.sampled_from(["roles/tpu.viewer", "roles/monitoring.metricWriter", "roles/storage.objectViewer", "roles/viewer"]), max_size=2, unique=True),
    st.sampled_from([None, "a@tpuctl-test.iam.gserviceaccount.com", "b@tpuctl-test.iam.gserviceaccount.com"]),
    st.booleans(),  # with a model dir (conditional binding) or project-wide
)
external_st = st.lists(
    st.tuples(st.sampled_from(["roles/viewer", LOG_WRITER, "roles/browser"]), st.sampled_from(["user:x@example.com", "user:y@example.com", "group:z@example.com"])),
    max_size=6,
)


@given(writers=st.lists(writer_st, min_size=2, max_size=4), external=external_st)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_concurrent_writers_never_lose_a_binding(tmp_path: Path, writers: list[Any], external: list[tuple[str, str]]) -> None:
    with GoogleStandin(project="tpuctl-test", seed=len(writers)) as g:
        g.faults.latency_s = 0.05  # widen every read-modify-write window so writers really collide
        env = standin_env(g, tmp_path)
        procs = []
        expected: set[tuple[str, str, str, str]] = set(granted(g.iam_policy()))
        for roles, account, with_dir in writers:
            args = ["auth", "--zone", g.zones[0], "--yes"]
            members = [agent(g)] + ([f"serviceAccount:{account}"] if account else [])
            if with_dir:
                args += ["--model-dir", MODEL_DIR]
            for role in roles:
                args += ["--role", role]
            if account:
                args += ["--service-account", account]
            procs.append(subprocess.Popen(tpuctl_cmd(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT))
            title, expression = (CONDITION["title"], CONDITION["expression"]) if with_dir else ("", "")
            for member in members:
                expected |= {(OBJECT_ADMIN, title, expression, member), (LOG_WRITER, "", "", member)}
                expected |= {(role, "", "", member) for role in roles}
        outsiders = [threading.Thread(target=external_add, args=(g, role, member)) for role, member in external]
        for thread in outsiders:
            time.sleep(0.05)
            thread.start()
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
        for thread in outsiders:
            thread.join()
        expected |= {(role, "", "", member) for role, member in external}
        policy = g.iam_policy()
        assert granted(policy) == expected
        assert_no_duplicates(policy)


def test_simultaneous_writers_conflict_and_all_get_their_bindings(tmp_path: Path) -> None:
    """Four read-modify-writes that overlap: most meet a 409 and re-read. The stand-in holds each writer's first read
    of the project's policy until all four have asked (processes that start seconds apart on a loaded machine would
    otherwise never overlap), so they all read one etag."""
    roles = ["roles/tpu.viewer", "roles/monitoring.metricWriter", "roles/storage.objectViewer", "roles/viewer"]
    together = FirstReadsTogether(len(roles), lambda method, path: path.endswith(":getIamPolicy") and "/projects/" in path)

    with GoogleStandin(project="tpuctl-test", seed=7) as g:
        g.faults.latency_s = 0.15
        g.on_request = together
        env = standin_env(g, tmp_path)
        procs = [
            subprocess.Popen(
                tpuctl_cmd("auth", "--zone", g.zones[0], "--yes", "--role", role),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
            )
            for role in roles
        ]
        outputs = [proc.communicate(timeout=120) for proc in procs]
        assert [proc.returncode for proc in procs] == [0] * len(roles), outputs
        conflicts = sum(1 for _, path, status in g.requests if status == 409 and ":setIamPolicy" in path)
        policy = g.iam_policy()
    assert together.all_held, together.held  # every writer's first read was held for the others
    assert conflicts >= 1, "the writers did not overlap; the test proves nothing"
    assert sum("concurrent change(s)" in out for out, _ in outputs) >= 1
    have = granted(policy)
    assert {(role, "", "", agent(g)) for role in roles + [OBJECT_ADMIN, LOG_WRITER]} <= have
    assert_no_duplicates(policy)


# Secrets


def test_no_token_or_key_material_in_any_output(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    key_file = write_service_account_key(g, tmp_path / "key.json")
    adc_file = write_authorized_user(g, tmp_path / "adc.json")
    key = json.loads(key_file.read_text())
    secrets = [g.token, g.refresh_token, g.client_secret, key["private_key_id"]]
    secrets += [line for line in key["private_key"].splitlines() if line and "-----" not in line]
    base = standin_env(g, tmp_path)
    no_token = {k: v for k, v in base.items() if k != "TPUCTL_ACCESS_TOKEN_FILE"}
    runs = []
    with_key = {**no_token, "TPUCTL_PROJECT": ""}
    done = auth(g, tmp_path, "--credentials", str(key_file), "--yes", "--model-dir", MODEL_DIR, env=with_key)
    assert done.returncode == 0, done.stderr
    assert f"credentials: key file {key_file}" in done.stdout
    assert "account: tpuctl-sa@tpuctl-test.iam.gserviceaccount.com" in done.stdout
    assert f"project: tpuctl-test (from the key file {key_file})" in done.stdout
    runs.append(done)
    adc = {**no_token, "GOOGLE_APPLICATION_CREDENTIALS": str(adc_file)}
    done = auth(g, tmp_path, "--dry-run", "--legacy-ai-platform", env=adc)
    assert done.returncode == 0, done.stderr
    assert "credentials: application default credentials" in done.stdout
    runs.append(done)
    g.faults.denied_permissions.add("resourcemanager.projects.getIamPolicy")
    runs.append(auth(g, tmp_path, "--credentials", str(key_file), "--dry-run", env=no_token))
    runs.append(auth(g, tmp_path, "--yes", env=base))
    g.faults.denied_permissions.clear()
    Path(base["TPUCTL_ACCESS_TOKEN_FILE"]).write_text(g.token + " " + g.token)  # malformed on purpose
    runs.append(auth(g, tmp_path, "--yes", env=base))
    broken = tmp_path / "broken.json"
    broken.write_text(key_file.read_text()[:-40])
    runs.append(auth(g, tmp_path, "--credentials", str(broken), "--yes", env=no_token))
    assert [r.returncode for r in runs] == [0, 0, 1, 1, 2, 2]
    for run in runs:
        for secret in secrets:
            assert secret not in run.stdout and secret not in run.stderr

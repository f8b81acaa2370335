"""IAM policy rules: only ever add, never remove or duplicate, survive concurrent writers."""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from typing import Any

import pytest
from google.api_core import exceptions as api
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl.cloud.auth import iam, resource_iam
from tpuctl.cloud.auth.iam import Condition, Grant
from tpuctl.inputs.errors import AccessDenied, TpuctlError

ROLES = ["roles/storage.objectAdmin", "roles/logging.logWriter", "roles/viewer", "projects/my-proj/roles/custom.one"]
MEMBERS = [
    "serviceAccount:service-1@cloud-tpu.iam.gserviceaccount.com",
    "serviceAccount:sa@my-proj.iam.gserviceaccount.com",
    "user:ada@example.com",
    "group:ml@example.com",
]
CONDITIONS = [None, iam.bucket_condition("bucket-a"), iam.bucket_condition("bucket-b"), Condition("t", "true", "d")]

grants_st = st.builds(Grant, st.sampled_from(ROLES), st.sampled_from(MEMBERS), st.sampled_from(CONDITIONS))


@st.composite
def policies(draw: Any) -> dict[str, Any]:
    bindings = []
    for _ in range(draw(st.integers(0, 6))):
        role = draw(st.sampled_from(ROLES))
        condition = draw(st.sampled_from(CONDITIONS))
        members = draw(st.lists(st.sampled_from(MEMBERS + ["domain:example.com"]), min_size=1, max_size=4, unique=True))
        binding: dict[str, Any] = {"role": role, "members": members}
        if condition:
            binding["condition"] = condition.to_json()
        bindings.append(binding)
    policy: dict[str, Any] = {"version": draw(st.sampled_from([1, 3])), "etag": "BwX1", "bindings": bindings}
    if draw(st.booleans()):
        policy["auditConfigs"] = [{"service": "allServices", "auditLogConfigs": [{"logType": "DATA_READ"}]}]
    if not bindings and draw(st.booleans()):
        del policy["bindings"]
    return policy


def pairs(policy: dict[str, Any]) -> list[tuple[Any, str]]:
    """Every (binding identity, member) occurrence, duplicates kept."""
    return [(iam.binding_key(b), m) for b in policy.get("bindings", []) for m in b["members"]]


@given(policies(), st.lists(grants_st, max_size=8))
def test_merge_never_removes_or_reorders(policy: dict[str, Any], grants: list[Grant]) -> None:
    before = copy.deepcopy(policy)
    merged = iam.merge(policy, grants)
    assert policy == before, "merge must not modify its input"
    old = before.get("bindings", [])
    assert len(merged["bindings"]) >= len(old)
    for was, now in zip(old, merged["bindings"]):
        assert iam.binding_key(was) == iam.binding_key(now)
        assert now["members"][: len(was["members"])] == was["members"]
    for key in ("etag", "auditConfigs"):
        assert merged.get(key) == before.get(key)


@given(policies(), st.lists(grants_st, max_size=8))
def test_merge_adds_every_grant_exactly_once(policy: dict[str, Any], grants: list[Grant]) -> None:
    merged = iam.merge(policy, grants)
    assert iam.missing(merged, grants) == []
    old_counts: dict[Any, int] = {}
    for pair in pairs(policy):
        old_counts[pair] = old_counts.get(pair, 0) + 1
    new_counts: dict[Any, int] = {}
    for pair in pairs(merged):
        new_counts[pair] = new_counts.get(pair, 0) + 1
    for pair, count in new_counts.items():
        assert count == old_counts.get(pair, 1), f"{pair} duplicated"
    wanted = {(g.key, g.member) for g in grants}
    assert set(new_counts) == set(old_counts) | wanted
    # A new binding only appears when no binding with that (role, condition) existed.
    old_keys = [iam.binding_key(b) for b in policy.get("bindings", [])]
    new_keys = [iam.binding_key(b) for b in merged["bindings"][len(old_keys) :]]
    assert len(set(new_keys)) == len(new_keys)
    assert not set(new_keys) & set(old_keys)


@given(policies(), st.lists(grants_st, max_size=8), st.lists(grants_st, max_size=8))
def test_merge_is_idempotent_and_order_free(policy: dict[str, Any], first: list[Grant], second: list[Grant]) -> None:
    once = iam.merge(policy, first)
    assert iam.merge(once, first) == once
    ab = iam.merge(iam.merge(policy, first), second)
    ba = iam.merge(iam.merge(policy, second), first)
    assert iam.present(ab) == iam.present(ba)


@given(policies(), st.lists(grants_st, max_size=8))
def test_conditions_mean_version_3(policy: dict[str, Any], grants: list[Grant]) -> None:
    merged = iam.merge(policy, grants)
    if any("condition" in b for b in merged["bindings"]):
        assert merged["version"] == 3
    else:
        assert merged.get("version") == policy.get("version")


@given(policies(), st.lists(grants_st, max_size=8))
def test_missing_is_what_merge_adds(policy: dict[str, Any], grants: list[Grant]) -> None:
    todo = iam.missing(policy, grants)
    assert iam.merge(policy, todo) == iam.merge(policy, grants)
    assert len(todo) == len(set(todo))
    have = iam.present(policy)
    assert all((g.key, iam.member_key(g.member)) not in have for g in todo)


def test_member_joins_existing_binding_with_equal_role_and_condition() -> None:
    condition = iam.bucket_condition("b1")
    policy = {
        "etag": "e",
        "bindings": [
            {"role": "roles/storage.objectAdmin", "members": ["user:a@example.com"]},
            {"role": "roles/storage.objectAdmin", "members": ["user:b@example.com"], "condition": condition.to_json()},
        ],
    }
    merged = iam.merge(policy, [Grant("roles/storage.objectAdmin", "user:c@example.com", condition)])
    assert merged["bindings"][1]["members"] == ["user:b@example.com", "user:c@example.com"]
    assert merged["bindings"][0]["members"] == ["user:a@example.com"]
    assert len(merged["bindings"]) == 2
    assert merged["version"] == 3


def test_member_emails_compare_without_case() -> None:
    policy = {"etag": "e", "bindings": [{"role": "roles/viewer", "members": ["serviceAccount:SA@p.iam.gserviceaccount.com"]}]}
    assert iam.missing(policy, [Grant("roles/viewer", "serviceAccount:sa@p.iam.gserviceaccount.com")]) == []


def test_default_grants_and_exact_diff() -> None:
    member = "serviceAccount:service-42@cloud-tpu.iam.gserviceaccount.com"
    grants = iam.job_grants([member], "my-bucket", ["roles/storage.objectViewer"])
    assert iam.diff_lines(grants) == [
        f"+ roles/storage.objectAdmin  {member}  if tpuctl-model-dir-my-bucket",
        f"+ roles/logging.logWriter  {member}",
        f"+ roles/storage.objectViewer  {member}",
    ]
    assert grants[0].condition == Condition(
        "tpuctl-model-dir-my-bucket",
        'resource.name == "projects/_/buckets/my-bucket" || resource.name.startsWith("projects/_/buckets/my-bucket/")',
    )
    assert iam.gcloud_commands("my-proj", grants) == [
        "gcloud projects add-iam-policy-binding my-proj --member=" + member + " --role=roles/storage.objectAdmin "
        "--condition='expression=resource.name == \"projects/_/buckets/my-bucket\" || "
        "resource.name.startsWith(\"projects/_/buckets/my-bucket/\"),title=tpuctl-model-dir-my-bucket'",
        f"gcloud projects add-iam-policy-binding my-proj --member={member} --role=roles/logging.logWriter",
        f"gcloud projects add-iam-policy-binding my-proj --member={member} --role=roles/storage.objectViewer",
    ]


def test_grants_without_bucket_are_project_wide_and_deduplicated() -> None:
    member = "serviceAccount:a@p.iam.gserviceaccount.com"
    grants = iam.job_grants([member, member], None, ["roles/logging.logWriter"])
    assert grants == [Grant(iam.STORAGE_ROLE, member), Grant(iam.LOGGING_ROLE, member)]
    assert iam.legacy_grants([member], ["roles/viewer"]) == [Grant(iam.LEGACY_ROLE, member), Grant("roles/viewer", member)]


@pytest.mark.parametrize(
    "role", ["roles/viewer", "roles/storage.objectAdmin", "projects/my-proj/roles/my_role.x", "organizations/123/roles/r"]
)
def test_good_roles(role: str) -> None:
    assert iam.check_role(role) == role


@pytest.mark.parametrize("role", ["viewer", "roles/", "roles/a b", "projects/X/roles/r", "organizations/abc/roles/r", ""])
def test_bad_roles(role: str) -> None:
    with pytest.raises(TpuctlError) as err:
        iam.check_role(role)
    assert err.value.exit_code == 2


def test_service_account_member() -> None:
    assert iam.service_account_member("SA@p.iam.gserviceaccount.com") == "serviceAccount:sa@p.iam.gserviceaccount.com"
    assert iam.service_account_member("serviceAccount:x@y.com") == "serviceAccount:x@y.com"
    for bad in ("nobody", "a@b", "user:a@b.com"):
        with pytest.raises(TpuctlError):
            iam.service_account_member(bad)


def test_bucket_of() -> None:
    assert iam.bucket_of("gs://my-bucket/runs/1") == "my-bucket"
    assert iam.bucket_of("gs://my.bucket") == "my.bucket"
    for bad in ("/tmp/x", "gs://", "gs://A/x"):
        with pytest.raises(TpuctlError):
            iam.bucket_of(bad)


# Read-modify-write against an in-memory policy store with etags


class Store:
    """A policy with an etag that changes on every write, like Cloud Resource Manager's."""

    def __init__(self, policy: dict[str, Any] | None = None, jitter: bool = False) -> None:
        self.lock = threading.Lock()
        self.policy = policy or {"version": 1, "bindings": []}
        self.serial = 0
        self.policy["etag"] = "etag-0"
        self.writes = 0
        self.jitter = jitter

    def read(self) -> dict[str, Any]:
        with self.lock:
            seen = json.loads(json.dumps(self.policy))
        if self.jitter:
            time.sleep(random.uniform(0, 0.002))  # let other writers in between our read and write
        return seen

    def write(self, policy: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if policy.get("etag") != self.policy["etag"]:
                raise api.Aborted("There were concurrent policy changes.")
            self.serial += 1
            self.writes += 1
            self.policy = json.loads(json.dumps(policy))
            self.policy["etag"] = f"etag-{self.serial}"
            return json.loads(json.dumps(self.policy))

    def external_add(self, grant: Grant) -> None:
        """Someone else's correct read-modify-write, done atomically."""
        with self.lock:
            self.serial += 1
            self.policy = iam.merge(self.policy, [grant])
            self.policy["etag"] = f"etag-{self.serial}"


def no_sleep(_: float) -> None:
    pass


def test_write_happens_once_and_rerun_is_a_noop() -> None:
    store = Store()
    grants = iam.job_grants(["serviceAccount:a@p.iam.gserviceaccount.com"], "b", [])
    result = iam.read_modify_write(store.read, store.write, grants, sleep=no_sleep)
    assert result.written == grants and result.conflicts == 0 and store.writes == 1
    again = iam.read_modify_write(store.read, store.write, grants, sleep=no_sleep)
    assert again.written == [] and store.writes == 1


@given(
    st.lists(grants_st, min_size=1, max_size=6),
    st.lists(st.lists(grants_st, max_size=3), max_size=5),
)
@settings(max_examples=60)
def test_conflicts_are_retried_and_external_bindings_survive(ours: list[Grant], external: list[list[Grant]]) -> None:
    """Before each of our first writes someone else writes: we re-read, recompute, and keep theirs."""
    store = Store()
    pending = list(external)
    applied: list[list[Grant]] = []

    def write(policy: dict[str, Any]) -> dict[str, Any]:
        if pending:
            applied.append(pending[0])
            for grant in pending.pop(0):
                store.external_add(grant)
            store.serial += 1  # and some other change (e.g. audit config): the etag moves regardless
            store.policy["etag"] = f"etag-{store.serial}"
        return store.write(policy)

    result = iam.read_modify_write(store.read, write, ours, sleep=no_sleep, attempts=len(external) + 1)
    everyone = set(ours) | {g for batch in applied for g in batch}
    assert iam.missing(store.policy, everyone) == []
    found = pairs(store.policy)
    assert len(found) == len(set(found)), "a binding member appears twice"
    assert result.conflicts == len(applied)
    assert set(result.written) <= set(ours)
    if result.written:
        assert result.conflicts == len(external) and store.writes == 1
    else:
        assert store.writes == 0


def test_gives_up_after_the_last_conflict() -> None:
    store = Store()

    def always_conflict(policy: dict[str, Any]) -> dict[str, Any]:
        raise api.Aborted("There were concurrent policy changes.")

    seen: list[int] = []
    with pytest.raises(api.Conflict):
        iam.read_modify_write(
            store.read, always_conflict, [Grant("roles/viewer", MEMBERS[0])], sleep=no_sleep, attempts=3, on_conflict=seen.append
        )
    assert seen == [1, 2]


def test_stops_when_someone_else_added_everything() -> None:
    store = Store()
    grant = Grant("roles/viewer", MEMBERS[0])

    def write(policy: dict[str, Any]) -> dict[str, Any]:
        store.external_add(grant)
        return store.write(policy)

    result = iam.read_modify_write(store.read, write, [grant], sleep=no_sleep)
    assert result.written == [] and result.conflicts == 1 and store.writes == 0
    assert pairs(store.policy) == [(grant.key, grant.member)]


def test_refuses_to_write_without_an_etag() -> None:
    with pytest.raises(TpuctlError, match="etag"):
        iam.read_modify_write(lambda: {"bindings": []}, lambda p: p, [Grant("roles/viewer", MEMBERS[0])], sleep=no_sleep)


def test_other_errors_are_not_retried() -> None:
    calls = []

    def write(policy: dict[str, Any]) -> dict[str, Any]:
        calls.append(policy)
        raise api.PermissionDenied("Permission 'resourcemanager.projects.setIamPolicy' denied")

    with pytest.raises(api.PermissionDenied):
        iam.read_modify_write(Store().read, write, [Grant("roles/viewer", MEMBERS[0])], sleep=no_sleep)
    assert len(calls) == 1


@given(st.lists(st.lists(grants_st, min_size=1, max_size=4), min_size=2, max_size=5), st.lists(grants_st, max_size=6))
@settings(max_examples=15, deadline=None)
def test_concurrent_writers_never_lose_a_binding(writers: list[list[Grant]], external: list[Grant]) -> None:
    """Threads doing read-modify-write at once, plus atomic external writers: all bindings end up there once."""
    store = Store(jitter=True)
    errors: list[BaseException] = []

    def writer(grants: list[Grant]) -> None:
        try:
            iam.read_modify_write(store.read, store.write, grants, sleep=lambda s: time.sleep(s / 100), attempts=50)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def outsider() -> None:
        for grant in external:
            store.external_add(grant)
            time.sleep(0.0005)

    threads = [threading.Thread(target=writer, args=(w,)) for w in writers] + [threading.Thread(target=outsider)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    everyone = {g for w in writers for g in w} | set(external)
    assert iam.missing(store.policy, everyone) == []
    found = pairs(store.policy)
    assert len(found) == len(set(found))
    keys = [iam.binding_key(b) for b in store.policy["bindings"]]
    assert len(keys) == len(set(keys)), "two bindings with the same role and condition"


# Vertex AI (tpuctl auth --vertex)


def test_vertex_grants_and_their_gcloud_commands() -> None:
    agent, cc = iam.vertex_agents("123")
    assert agent == "serviceAccount:service-123@gcp-sa-aiplatform.iam.gserviceaccount.com"
    assert cc == "serviceAccount:service-123@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    grants = iam.vertex_project_grants(agent, cc, cc, ["roles/aiplatform.user", "roles/aiplatform.user"])
    assert [(g.role, g.member) for g in grants] == [
        ("roles/aiplatform.serviceAgent", agent),
        ("roles/aiplatform.customCodeServiceAgent", cc),
        ("roles/aiplatform.user", cc),
    ]
    (bucket_grant,) = iam.vertex_bucket_grants(cc)
    assert iam.gcloud_bucket_command("b", bucket_grant) == f"gcloud storage buckets add-iam-policy-binding gs://b --member={cc} --role=roles/storage.objectAdmin"
    user = Grant(iam.SA_USER_ROLE, iam.caller_member("Ada@Example.com"))
    assert user.member == "user:ada@example.com"
    assert iam.caller_member("ci@p-1.iam.gserviceaccount.com") == "serviceAccount:ci@p-1.iam.gserviceaccount.com"
    assert iam.gcloud_service_account_command("sa@p.iam.gserviceaccount.com", user) == (
        "gcloud iam service-accounts add-iam-policy-binding sa@p.iam.gserviceaccount.com --member=user:ada@example.com --role=roles/iam.serviceAccountUser"
    )


def test_a_bucket_policy_keeps_its_legacy_bindings_and_fields() -> None:
    policy = {
        "kind": "storage#policy",
        "resourceId": "projects/_/buckets/b",
        "version": 1,
        "bindings": [{"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:p"]}],
        "etag": "CAE=",
    }
    merged = iam.merge(policy, iam.vertex_bucket_grants("serviceAccount:a@p.iam.gserviceaccount.com"))
    assert merged["kind"] == "storage#policy" and merged["etag"] == "CAE=" and merged["version"] == 1
    assert merged["bindings"][0] == policy["bindings"][0]
    assert merged["bindings"][1] == {"role": "roles/storage.objectAdmin", "members": ["serviceAccount:a@p.iam.gserviceaccount.com"]}


def test_service_account_policy_path_names_the_accounts_project() -> None:
    class _Identity:
        credentials = None

    user_managed = resource_iam.ServiceAccountIam(_Identity(), "https://iam.googleapis.com", "sa@my-proj.iam.gserviceaccount.com", "p")
    assert user_managed.path == "v1/projects/my-proj/serviceAccounts/sa@my-proj.iam.gserviceaccount.com"
    default = resource_iam.ServiceAccountIam(_Identity(), "https://iam.googleapis.com", "1-compute@developer.gserviceaccount.com", "p")
    assert default.path == "v1/projects/-/serviceAccounts/1-compute@developer.gserviceaccount.com"


def test_a_bucket_that_refuses_is_access_denied_with_its_owner_to_ask() -> None:
    """Issue 35: the bucket's hint follows the error's type (AccessDenied, told where the 403 was read), not its words;
    a 403 for an API that is off is not a missing permission and keeps its own hint."""

    class _Identity:
        credentials = None

    bucket = resource_iam.BucketIam(_Identity(), "https://storage.googleapis.com", "my-bucket", "p")
    denied = bucket._explain(api.Forbidden("Permission 'storage.buckets.getIamPolicy' denied on resource (or it may not exist)."), writing=False)
    assert type(denied) is AccessDenied and "roles/storage.admin" in str(denied.hint) and " in project p" not in denied.message
    disabled = bucket._explain(api.Forbidden("Cloud Storage API has not been used in project 1 before or it is disabled."), writing=False)
    assert type(disabled) is TpuctlError and "gcloud services enable" in str(disabled.hint)

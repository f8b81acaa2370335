"""A project's IAM policy: what to grant, what is missing, and a safe read-modify-write.

The pure half (Grant, missing, merge, diff_lines, gcloud_commands) never does I/O,
so the rules that protect other people's bindings are tested exhaustively:

- a binding is identified by (role, condition); a member joins an existing binding
  with the same identity, otherwise a new binding is appended;
- nothing already in the policy is ever removed or reordered, and no member or
  binding is added twice;
- a policy that holds any condition is written as version 3.

The I/O half reads with getIamPolicy (requestedPolicyVersion 3, so conditions are
returned), writes with setIamPolicy carrying the etag it read, and on a conflict
(someone wrote in between) reads again and recomputes what is still missing.
"""

from __future__ import annotations

import copy
import re
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tpuctl.cloud.plumbing import api_errors, retry
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError

POLICY_VERSION = 3  # the version that can hold conditions
CONFLICT_ATTEMPTS = 8
STORAGE_ROLE = "roles/storage.objectAdmin"
LOGGING_ROLE = "roles/logging.logWriter"
LEGACY_ROLE = "roles/ml.serviceAgent"
# Vertex AI (tpuctl auth --vertex)
VERTEX_AGENT_ROLE = "roles/aiplatform.serviceAgent"
VERTEX_CC_AGENT_ROLE = "roles/aiplatform.customCodeServiceAgent"
SA_USER_ROLE = "roles/iam.serviceAccountUser"
ACT_AS = "iam.serviceAccounts.actAs"
SA_DOMAIN = ".iam.gserviceaccount.com"
TITLE_LIMIT = 100  # IAM's limit on a condition title

_ROLE = re.compile(
    r"(?:roles/[A-Za-z0-9_.]{1,64}"
    r"|projects/(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]/roles/[A-Za-z0-9_.]{1,64}"
    r"|organizations/[0-9]{1,20}/roles/[A-Za-z0-9_.]{1,64})\Z"
)
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\Z")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]\Z")


@dataclass(frozen=True)
class Condition:
    title: str
    expression: str
    description: str = ""

    def to_json(self) -> dict[str, str]:
        body = {"title": self.title, "expression": self.expression}
        if self.description:
            body["description"] = self.description
        return body


@dataclass(frozen=True)
class Grant:
    """One member in one binding: what `gcloud projects add-iam-policy-binding` adds."""

    role: str
    member: str
    condition: Condition | None = None

    @property
    def key(self) -> tuple[str, tuple[str, str, str] | None]:
        return (self.role, _condition_key(self.condition.to_json() if self.condition else None))


# Input checks (bad input: exit 2)


def check_role(role: str) -> str:
    role = role.strip()
    if not _ROLE.match(role):
        raise TpuctlError(
            f"--role {role!r} is not a role name",
            hint="e.g. roles/storage.objectViewer, projects/P/roles/ROLE or organizations/N/roles/ROLE",
            exit_code=USAGE,
        )
    return role


def service_account_member(email: str) -> str:
    """`serviceAccount:EMAIL` for an email given with or without that prefix."""
    text = email.strip()
    if text.startswith("serviceAccount:"):
        text = text[len("serviceAccount:") :]
    if not _EMAIL.match(text):
        raise TpuctlError(
            f"--service-account {email!r} is not a service account email",
            hint="e.g. my-sa@my-project.iam.gserviceaccount.com",
            exit_code=USAGE,
        )
    return f"serviceAccount:{text.lower()}"


def bucket_of(model_dir: str) -> str:
    """The bucket of a gs://bucket/path model dir."""
    if not model_dir.startswith("gs://"):
        raise TpuctlError(f"model dir {model_dir!r} is not a gs:// path", hint="e.g. --model-dir gs://my-bucket/runs", exit_code=USAGE)
    bucket = model_dir[len("gs://") :].split("/", 1)[0]
    if not _BUCKET.match(bucket):
        raise TpuctlError(f"model dir {model_dir!r} does not name a bucket", hint="e.g. --model-dir gs://my-bucket/runs", exit_code=USAGE)
    return bucket


def bucket_condition(bucket: str) -> Condition:
    """Objects (and the bucket itself) of one bucket: IAM's resource names for Cloud Storage."""
    resource = f"projects/_/buckets/{bucket}"
    expression = f'resource.name == "{resource}" || resource.name.startsWith("{resource}/")'
    return Condition(title=f"tpuctl-model-dir-{bucket}"[:TITLE_LIMIT], expression=expression)


def job_grants(members: Sequence[str], bucket: str | None, extra_roles: Sequence[str] = ()) -> list[Grant]:
    """What a TPU job needs: write the model dir (limited to its bucket when known), write logs, plus --role."""
    condition = bucket_condition(bucket) if bucket else None
    grants: list[Grant] = []
    for member in members:
        grants.append(Grant(STORAGE_ROLE, member, condition))
        grants.append(Grant(LOGGING_ROLE, member))
        grants.extend(Grant(role, member) for role in extra_roles)
    return unique(grants)


def legacy_grants(members: Sequence[str], extra_roles: Sequence[str] = ()) -> list[Grant]:
    grants = [Grant(role, member) for member in members for role in (LEGACY_ROLE, *extra_roles)]
    return unique(grants)


# Pure policy functions


def _condition_key(condition: Any) -> tuple[str, str, str] | None:
    if not condition:
        return None
    if not isinstance(condition, dict):
        return ("", str(condition), "")
    return (
        str(condition.get("expression", "")),
        str(condition.get("title", "")),
        str(condition.get("description", "")),
    )


def binding_key(binding: dict[str, Any]) -> tuple[str, tuple[str, str, str] | None]:
    return (str(binding.get("role", "")), _condition_key(binding.get("condition")))


def member_key(member: str) -> str:
    """Members compare with the email part case-insensitive, as IAM stores them."""
    kind, sep, rest = member.partition(":")
    return f"{kind}:{rest.lower()}" if sep else member


def unique(grants: Iterable[Grant]) -> list[Grant]:
    """Grants in first-seen order, each (role, condition, member) once."""
    seen: set[tuple[Any, str]] = set()
    out: list[Grant] = []
    for grant in grants:
        ident = (grant.key, member_key(grant.member))
        if ident not in seen:
            seen.add(ident)
            out.append(grant)
    return out


def _bindings(policy: dict[str, Any]) -> list[dict[str, Any]]:
    found = policy.get("bindings") or []
    return [b for b in found if isinstance(b, dict)]


def present(policy: dict[str, Any]) -> set[tuple[Any, str]]:
    """Every (binding identity, member) the policy grants."""
    return {(binding_key(b), member_key(str(m))) for b in _bindings(policy) for m in b.get("members") or []}


def missing(policy: dict[str, Any], grants: Iterable[Grant]) -> list[Grant]:
    """The grants the policy does not have yet, in order, without repeats."""
    have = present(policy)
    return [g for g in unique(grants) if (g.key, member_key(g.member)) not in have]


def merge(policy: dict[str, Any], grants: Iterable[Grant]) -> dict[str, Any]:
    """A new policy: the old one (untouched: etag, auditConfigs, order) plus the grants."""
    merged = copy.deepcopy(policy)
    bindings = merged.setdefault("bindings", [])
    if bindings is None:
        bindings = merged["bindings"] = []
    index: dict[Any, dict[str, Any]] = {}
    for binding in bindings:
        if isinstance(binding, dict):
            index.setdefault(binding_key(binding), binding)  # the first of any duplicates takes members
    for grant in missing(policy, grants):
        binding = index.get(grant.key)
        if binding is None:
            binding = {"role": grant.role, "members": []}
            if grant.condition:
                binding["condition"] = grant.condition.to_json()
            bindings.append(binding)
            index[grant.key] = binding
        members = binding.setdefault("members", [])
        if member_key(grant.member) not in {member_key(str(m)) for m in members}:
            members.append(grant.member)
    if any(isinstance(b, dict) and b.get("condition") for b in bindings):
        merged["version"] = POLICY_VERSION
    return merged


def diff_lines(grants: Iterable[Grant]) -> list[str]:
    """`+ ROLE  MEMBER[  if TITLE]`: one line per member added (documented in docs/auth.md)."""
    lines = []
    for grant in grants:
        line = f"+ {grant.role}  {grant.member}"
        if grant.condition:
            line += f"  if {grant.condition.title}"
        lines.append(line)
    return lines


def gcloud_command(project: str, grant: Grant) -> str:
    words = [
        "gcloud projects add-iam-policy-binding",
        shlex.quote(project),
        f"--member={shlex.quote(grant.member)}",
        f"--role={shlex.quote(grant.role)}",
    ]
    if grant.condition:
        spec = f"expression={grant.condition.expression},title={grant.condition.title}"
        if grant.condition.description:
            spec += f",description={grant.condition.description}"
        words.append(f"--condition={shlex.quote(spec)}")
    return " ".join(words)


def gcloud_commands(project: str, grants: Iterable[Grant]) -> list[str]:
    return [gcloud_command(project, grant) for grant in grants]


def gcloud_bucket_command(bucket: str, grant: Grant) -> str:
    return f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member={shlex.quote(grant.member)} --role={shlex.quote(grant.role)}"


def gcloud_service_account_command(email: str, grant: Grant) -> str:
    return (
        f"gcloud iam service-accounts add-iam-policy-binding {shlex.quote(email)}"
        f" --member={shlex.quote(grant.member)} --role={shlex.quote(grant.role)}"
    )


def caller_member(account: str) -> str:
    """The IAM member of the account tpuctl runs as: a service account or a user."""
    kind = "serviceAccount" if account.lower().endswith(".gserviceaccount.com") else "user"
    return f"{kind}:{account.lower()}"


def vertex_agents(project_number: str) -> tuple[str, str]:
    """(Vertex AI Service Agent, Vertex AI Custom Code Service Agent) members of a project."""
    return (
        f"serviceAccount:service-{project_number}@gcp-sa-aiplatform.iam.gserviceaccount.com",
        f"serviceAccount:service-{project_number}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com",
    )


def vertex_project_grants(agent: str, cc_agent: str, runner: str, extra_roles: Sequence[str] = ()) -> list[Grant]:
    """The roles Google grants the two service agents when it creates them itself (not when asked to), plus --role for the job's identity."""
    grants = [Grant(VERTEX_AGENT_ROLE, agent), Grant(VERTEX_CC_AGENT_ROLE, cc_agent)]
    grants.extend(Grant(role, runner) for role in extra_roles)
    return unique(grants)


def vertex_bucket_grants(runner: str) -> list[Grant]:
    """The job reads its code package and writes (and replaces, and prunes) checkpoints: object admin on the bucket."""
    return [Grant(STORAGE_ROLE, runner)]


# Read-modify-write


@dataclass(frozen=True)
class WriteResult:
    written: list[Grant]  # what our successful setIamPolicy added; empty when nothing was left to add
    policy: dict[str, Any]  # the policy as last seen (the written one, or the one that needed nothing)
    conflicts: int  # how many times someone else wrote between our read and our write


def is_conflict(exc: BaseException) -> bool:
    from google.api_core import exceptions as api

    return isinstance(exc, (api.Conflict, api.PreconditionFailed))


def read_modify_write(
    read: Callable[[], dict[str, Any]],
    write: Callable[[dict[str, Any]], dict[str, Any]],
    grants: Sequence[Grant],
    *,
    first: dict[str, Any] | None = None,
    attempts: int = CONFLICT_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    on_conflict: Callable[[int], None] | None = None,
) -> WriteResult:
    """Add the missing grants with the etag just read; on a conflict read again and recompute.

    `first` is a policy already read (the one whose diff the user approved). What is
    still missing after a conflict is always a subset of what was approved.
    """
    policy = first if first is not None else read()
    conflicts = 0
    for attempt in range(attempts):
        todo = missing(policy, grants)
        if not todo:
            return WriteResult([], policy, conflicts)
        if not policy.get("etag"):
            raise TpuctlError(
                "getIamPolicy returned a policy without an etag; refusing to write it blindly",
                hint="retry later; a write without an etag could remove someone else's binding",
                exit_code=FAILED,
            )
        try:
            written = write(merge(policy, todo))
        except Exception as exc:
            if not is_conflict(exc) or attempt == attempts - 1:
                raise
            conflicts += 1
            if on_conflict:
                on_conflict(conflicts)
            sleep(retry.backoff(attempt))
            policy = read()
            continue
        return WriteResult(todo, written or merge(policy, todo), conflicts)
    raise AssertionError("unreachable: the loop returns or raises")


class PolicyApi:
    """getIamPolicy / setIamPolicy of one resource, read-modify-write with the etag.

    Subclasses say how to read and write and which permissions each call needs;
    failures other than a conflict become one TpuctlError naming the resource.
    """

    label = "resource"  # "project my-proj", "bucket gs://b": how messages name the resource
    project = ""  # the project messages name (a bucket's policy is not the project's, but the user's project is)
    service = ""
    read_permission = ""
    write_permission = ""

    def _read(self) -> dict[str, Any]:
        raise NotImplementedError

    def _write(self, policy: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _where(self, action: str, permission: str) -> api_errors.Where:
        return api_errors.Where(action, self.project, None, permission, self.service)

    def read(self) -> dict[str, Any]:
        """The policy with conditions (version 3) and its etag; failures as one TpuctlError."""
        try:
            return self._read()
        except Exception as exc:
            if api_errors.is_api_failure(exc):
                raise self._explain(exc, writing=False) from None
            raise

    def write(self, policy: dict[str, Any]) -> dict[str, Any]:
        """setIamPolicy; a conflict stays an api_core exception so the caller can re-read."""
        try:
            return self._write(policy)
        except Exception as exc:
            if api_errors.is_api_failure(exc) and not is_conflict(exc):
                raise self._explain(exc, writing=True) from None
            raise

    def add(
        self,
        grants: Sequence[Grant],
        *,
        first: dict[str, Any] | None = None,
        on_conflict: Callable[[int], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> WriteResult:
        try:
            return read_modify_write(self.read, self.write, grants, first=first, on_conflict=on_conflict, sleep=sleep)
        except Exception as exc:
            if is_conflict(exc):
                raise self._explain(exc, writing=True) from None
            raise

    def _explain(self, exc: BaseException, *, writing: bool) -> TpuctlError:
        if writing:
            if is_conflict(exc):
                return TpuctlError(
                    f"the IAM policy of {self.label} kept changing while tpuctl tried to update it",
                    hint="re-run `tpuctl auth`; it only adds what is still missing",
                    exit_code=FAILED,
                )
            return api_errors.explain(exc, self._where(f"update the IAM policy of {self.label}", self.write_permission))
        return api_errors.explain(exc, self._where(f"read the IAM policy of {self.label}", self.read_permission))


class ProjectIam(PolicyApi):
    """getIamPolicy / setIamPolicy of one project through Cloud Resource Manager v1."""

    service = "cloudresourcemanager.googleapis.com"
    read_permission = "resourcemanager.projects.getIamPolicy"
    write_permission = "resourcemanager.projects.setIamPolicy"

    def __init__(self, identity: Any, endpoint: str, project: str) -> None:
        from tpuctl.cloud.plumbing.rest import RestApi

        self.api = RestApi(identity, endpoint)
        self.project = project
        self.label = f"project {project}"

    def _read(self) -> dict[str, Any]:
        body = {"options": {"requestedPolicyVersion": POLICY_VERSION}}
        return self.api.call("POST", f"v1/projects/{self.project}:getIamPolicy", body)

    def _write(self, policy: dict[str, Any]) -> dict[str, Any]:
        # Retrying a write is safe: it carries the etag, so a repeat after a lost reply
        # meets a conflict, and the re-read shows the bindings already there.
        return self.api.call("POST", f"v1/projects/{self.project}:setIamPolicy", {"policy": policy})

    def _explain(self, exc: BaseException, *, writing: bool) -> TpuctlError:
        if writing and not is_conflict(exc):
            return api_errors.explain(exc, self._where("update the IAM policy", self.write_permission))
        if not writing:
            return api_errors.explain(exc, self._where("read the IAM policy", self.read_permission))
        return super()._explain(exc, writing=writing)

    def missing_permissions(self, permissions: Sequence[str]) -> list[str]:
        """Which of `permissions` the caller lacks on the project (testIamPermissions; needs no role)."""
        where = self._where("test your permissions", "resourcemanager.projects.get")
        reply = api_errors.explained(
            lambda: self.api.call("POST", f"v1/projects/{self.project}:testIamPermissions", {"permissions": list(permissions)}), where
        )
        held = set(reply.get("permissions") or [])
        return [p for p in permissions if p not in held]

    def number(self) -> str:
        """The project number (Resource Manager v1 projects.get)."""
        where = self._where("read the project", "resourcemanager.projects.get")
        reply = api_errors.explained(lambda: self.api.call("GET", f"v1/projects/{self.project}"), where)
        number = str(reply.get("projectNumber") or "")
        if not number.isdigit():
            raise TpuctlError(f"Resource Manager returned no project number for project {self.project}", exit_code=FAILED)
        return number

"""`tpuctl auth --vertex`: what a Vertex AI custom job (TPU or not) needs in a project, checked and granted.

A CustomJob is created by the caller, scheduled by the Vertex AI Service Agent
(service-N@gcp-sa-aiplatform) and runs its code as the Vertex AI Custom Code
Service Agent (service-N@gcp-sa-aiplatform-cc) unless the job names a
`serviceAccount`. So, in this order and changing nothing before the one question:

1. the APIs the job and tpuctl use are enabled (aiplatform, storage, logging):
   a disabled one is an error naming the `gcloud services enable` command;
2. the caller holds what `tpuctl launch --backend vertex` calls need (checked
   with testIamPermissions, reported, never granted: only an admin could);
3. the two service agents hold the roles Google gives them when it creates
   them by itself, which it does not when they are created on request
   (generateServiceIdentity), as tpuctl does before granting;
4. the job's identity (the custom code agent, or --service-account) may read and
   write objects of the staging and model-dir buckets (bucket IAM, etag);
5. with --service-account, the caller may act as that account
   (roles/iam.serviceAccountUser on the account itself, only when missing).

Vertex needs no Cloud TPU service identity and no tpu.googleapis.com: its TPU
workers are VMs that Vertex manages in its own tenant project.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tpuctl.cloud.auth.auth_request import RESOURCE_MANAGER, AuthRequest, AuthUi, Target, Who, consent
from tpuctl.inputs.errors import FAILED, TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.auth.iam import Grant, PolicyApi

AIPLATFORM = "aiplatform.googleapis.com"
SERVICES = (AIPLATFORM, "storage.googleapis.com", "logging.googleapis.com")
# What `tpuctl launch --backend vertex` does as the caller: submit, follow, cancel a CustomJob, read its logs.
CALLER_PERMISSIONS = (
    "aiplatform.customJobs.create",
    "aiplatform.customJobs.get",
    "aiplatform.customJobs.cancel",
    "logging.logEntries.list",
)
CALLER_ROLES = "roles/aiplatform.user and roles/logging.viewer"


@dataclass
class _Policy:
    """One IAM policy to extend: where, what it grants, what is missing."""

    api: PolicyApi
    grants: list[Grant]
    gcloud: list[str] = field(default_factory=list)
    policy: dict[str, object] = field(default_factory=dict)
    todo: list[Grant] = field(default_factory=list)


def authorize_vertex(request: AuthRequest, target: Target, who: Who, ui: AuthUi) -> None:
    from tpuctl.cloud.auth import iam, resource_iam, service_agent

    project, resolved, identity = who.project, who.resolved, who.identity
    ui.progress(f"checking the APIs of project {project}")
    off = service_agent.disabled_services(identity, resolved, project, SERVICES)
    if off:
        raise TpuctlError(
            f"{', '.join(off)} {'is' if len(off) == 1 else 'are'} not enabled in project {project}",
            hint=f"gcloud services enable {' '.join(off)} --project {project}",
            exit_code=FAILED,
        )
    ui.say(f"APIs enabled: {', '.join(SERVICES)}")

    crm = iam.ProjectIam(identity, resolved.get("resourcemanager-endpoint") or RESOURCE_MANAGER, project)
    agent, cc_agent = iam.vertex_agents(crm.number())
    ui.say(f"Vertex AI service agent: {agent.partition(':')[2]}")
    ui.say(f"Vertex AI custom code service agent: {cc_agent.partition(':')[2]}")
    runner = target.extra_member or cc_agent
    ui.say(f"jobs run as: {runner.partition(':')[2]}" + (" (--service-account)" if target.extra_member else " (the default)"))

    missing = crm.missing_permissions(CALLER_PERMISSIONS)
    if missing:
        who_ = identity.account or "you"
        ui.note(f"warning: {who_} cannot yet launch Vertex jobs in project {project}: missing {', '.join(missing)} (ask an admin for {CALLER_ROLES})")

    policies = [_Policy(crm, iam.vertex_project_grants(agent, cc_agent, runner, target.extra_roles))]
    policies[0].gcloud = [iam.gcloud_command(project, g) for g in policies[0].grants]
    storage = resolved.get("storage-endpoint") or "https://storage.googleapis.com"
    for bucket in target.buckets:
        grants = iam.vertex_bucket_grants(runner)
        policies.append(_Policy(resource_iam.BucketIam(identity, storage, bucket, project), grants, [iam.gcloud_bucket_command(bucket, g) for g in grants]))
    if not target.buckets:
        ui.say("note: no staging bucket or model dir set, so no bucket access is granted; pass --staging-bucket gs://BUCKET/PATH")
    if target.extra_member:
        act_as = _act_as(request, target.extra_member, who, ui)
        if act_as is not None:
            policies.append(act_as)

    for item in policies:
        ui.progress(f"reading the IAM policy of {item.api.label}")
        item.policy = item.api.read()
        item.todo = iam.missing(item.policy, item.grants)
    todo = [item for item in policies if item.todo]
    for item in policies:
        if not item.todo:
            ui.say(f"nothing to change: the IAM policy of {item.api.label} already has all {len(item.grants)} binding(s)")
            continue
        ui.say(f"IAM policy of {item.api.label}, bindings to add:")
        for line in iam.diff_lines(item.todo):
            ui.say(line)
    if not todo:
        return
    if request.dry_run:
        ui.say("equivalent gcloud commands:")
        if policies[0].todo:
            ui.say(f"  {service_agent.gcloud_identity_command(project, AIPLATFORM)}")
        for item in todo:
            by_grant = dict(zip([(g.role, g.member) for g in item.grants], item.gcloud, strict=True))
            for grant in item.todo:
                ui.say(f"  {by_grant[(grant.role, grant.member)]}")
        ui.say("dry run: nothing changed")
        return
    consent(request, ", ".join(item.api.label for item in todo), sum(len(item.todo) for item in todo), ui)
    if policies[0].todo:
        # A member that does not exist yet cannot be granted anything; asking creates both agents.
        ui.progress(f"making sure the Vertex AI service agents of project {project} exist")
        created = service_agent.generate_service_identity(identity, resolved, project, AIPLATFORM)
        if created and iam.service_account_member(created) != agent:
            expected = agent.partition(":")[2]
            raise TpuctlError(f"Service Usage named {created} as the Vertex AI service agent, not {expected}", hint="nothing was granted", exit_code=FAILED)
    for item in todo:
        ui.progress(f"updating the IAM policy of {item.api.label}")
        label = item.api.label
        result = item.api.add(item.todo, first=item.policy, on_conflict=_conflict_note(label, ui))
        after = f" after {result.conflicts} concurrent change(s)" if result.conflicts else ""
        ui.say(f"updated the IAM policy of {label}: all {len(item.todo)} binding(s) above are in place{after}")


def _conflict_note(label: str, ui: AuthUi) -> Callable[[int], None]:
    def note(n: int) -> None:
        ui.progress(f"the policy of {label} changed meanwhile (conflict {n}); reading it again")

    return note


def _act_as(request: AuthRequest, member: str, who: Who, ui: AuthUi) -> _Policy | None:
    """roles/iam.serviceAccountUser for the caller on the job's account, unless the caller can act as it already."""
    from tpuctl.cloud.auth import iam, resource_iam

    email = member.partition(":")[2]
    accounts = resource_iam.ServiceAccountIam(who.identity, who.resolved.get("iam-endpoint") or "https://iam.googleapis.com", email, who.project)
    ui.progress(f"checking whether you can act as {email}")
    if accounts.can_act_as():
        ui.say(f"you can act as {email}")
        return None
    if not who.identity.account:
        ui.note(
            f"warning: you cannot act as {email} (iam.serviceAccounts.actAs), and these credentials do not name your account"
            f" (ask an admin: gcloud iam service-accounts add-iam-policy-binding {email} --member=user:YOU --role={iam.SA_USER_ROLE})"
        )
        return None
    grant = iam.Grant(iam.SA_USER_ROLE, iam.caller_member(who.identity.account))
    return _Policy(accounts, [grant], [iam.gcloud_service_account_command(email, grant)])

"""The `tpuctl auth` flow: credentials, the project, the TPU service identity, and its IAM grants.

The steps talk to three APIs one after another and tell the user what each
found before the next one starts (so a failure at step 3 still shows what
steps 1 and 2 established), then ask before the only write. The flow therefore
reports through an `AuthUi` as it goes instead of returning one result: the CLI
decides where lines go and how a question is asked; this module decides what
is said and in which order. Nothing here ever names a token or key material.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpuctl.cloud.auth.auth_request import RESOURCE_MANAGER, AuthRequest, AuthUi, Target, Who, consent
from tpuctl.inputs.errors import USAGE, TpuctlError
from tpuctl.settings import cloud as settings

if TYPE_CHECKING:
    from tpuctl.cloud.auth.iam import Grant


def authorize(request: AuthRequest, ui: AuthUi) -> None:
    """Run the whole flow; re-running it changes nothing once every binding is in place."""
    target = _check(request, ui)
    if request.vertex:
        from tpuctl.cloud.vertex import vertex_auth

        vertex_auth.authorize_vertex(request, target, _credentials(target.resolved, ui), ui)
        return
    who = _credentials(target.resolved, ui)
    members = _service_members(request, target, who, ui)
    _update_policy(request, target, who, members, ui)


def _check(request: AuthRequest, ui: AuthUi) -> Target:
    """Bad input first, before any file or network is touched: exit 2."""
    from tpuctl.cloud.auth import iam

    extra_roles = [iam.check_role(role) for role in request.roles]
    extra_member = iam.service_account_member(request.service_account) if request.service_account else None
    resolved = settings.resolve(
        {
            "project": request.project,
            "zone": request.zone,
            "model_dir": request.model_dir,
            "credentials": request.credentials,
            "access_token_file": request.access_token_file,
        }
    )
    if request.staging_bucket is not None and not request.vertex:
        raise TpuctlError("--staging-bucket only applies with --vertex", hint="add --vertex, or pass --model-dir for TPU VM jobs")
    if request.vertex:
        if request.legacy_ai_platform:
            raise TpuctlError("--vertex and --legacy-ai-platform are two different flows", hint="pick one")
        if request.staging_bucket is not None and not request.staging_bucket.startswith("gs://"):
            raise TpuctlError(f"--staging-bucket {request.staging_bucket!r} is not a gs:// path", hint="e.g. --staging-bucket gs://my-bucket/staging")
        buckets = [iam.bucket_of(path) for path in (request.staging_bucket, resolved.get("model-dir")) if path]
        return Target(resolved, extra_roles, extra_member, None, None, tuple(dict.fromkeys(buckets)))
    if not request.legacy_ai_platform:
        chosen_dir = resolved.get("model-dir")
        return Target(resolved, extra_roles, extra_member, iam.bucket_of(chosen_dir) if chosen_dir else None, resolved.zone)
    from tpuctl.cloud.auth.service_agent import LEGACY_WARNING

    if request.model_dir is not None:
        raise TpuctlError(
            "--model-dir has no effect with --legacy-ai-platform",
            hint="the legacy flow grants roles/ml.serviceAgent project-wide; add --role for more",
        )
    ui.note(f"warning: {LEGACY_WARNING}")
    return Target(resolved, extra_roles, extra_member, None, None)


def _credentials(resolved: settings.Settings, ui: AuthUi) -> Who:
    """The credentials, checked, and the project: the settings', else the one the credentials name."""
    from tpuctl.cloud.auth import credentials as creds

    identity = creds.load(resolved)
    project = resolved.get("project")
    source = resolved.source("project")
    if project is None and identity.project:
        project, source = identity.project, f"the {identity.source}"
        values = {setting.key: value for setting, value in resolved.items()}
        values["project"] = settings.Value(project, source)
        resolved = settings.Settings(values)
    if project is None:
        raise TpuctlError("no project set", hint="pass --project, set TPUCTL_PROJECT, or run `tpuctl init`", exit_code=USAGE)
    creds.check_token(identity)
    ui.say(f"credentials: {identity.source}")
    ui.say(f"account: {identity.account or '(not named by these credentials)'}")
    ui.say(f"project: {project} (from {source})")
    return Who(identity, resolved, project)


def _service_members(request: AuthRequest, target: Target, who: Who, ui: AuthUi) -> list[str]:
    """The IAM members to grant: the TPU service identity (or the legacy pair's account), plus --service-account."""
    from tpuctl.cloud.auth import iam, service_agent

    project = who.project
    if request.legacy_ai_platform:
        ui.progress(f"asking ml.googleapis.com for the TPU service account of project {project}")
        legacy = service_agent.legacy_identity(who.identity, who.resolved, project)
        ui.say(f"TPU service account (ml getConfig): {legacy.tpu_service_account}")
        ui.say(f"TPU service agent (serviceusage): {legacy.service_agent or '(not named in the reply)'}")
        members = [iam.service_account_member(legacy.tpu_service_account)]
    else:
        assert target.zone is not None
        ui.progress(f"asking the TPU API for the service identity of project {project}")
        email = service_agent.tpu_service_identity(who.identity, who.resolved, target.zone)
        ui.say(f"TPU service identity: {email}")
        members = [iam.service_account_member(email)]
    if target.extra_member and target.extra_member not in members:
        members.append(target.extra_member)
    return members


def _update_policy(request: AuthRequest, target: Target, who: Who, members: list[str], ui: AuthUi) -> None:
    """The IAM policy: read, diff, (dry run: show the gcloud commands), ask, write with the etag."""
    from tpuctl.cloud.auth import iam

    project = who.project
    grants = iam.legacy_grants(members, target.extra_roles) if request.legacy_ai_platform else iam.job_grants(members, target.bucket, target.extra_roles)
    policy_api = iam.ProjectIam(who.identity, who.resolved.get("resourcemanager-endpoint") or RESOURCE_MANAGER, project)
    ui.progress(f"reading the IAM policy of project {project}")
    policy = policy_api.read()
    todo = iam.missing(policy, grants)
    if target.bucket is None and not request.legacy_ai_platform:
        ui.say(f"note: no model dir set, so {iam.STORAGE_ROLE} applies to the whole project; pass --model-dir gs://BUCKET/PATH to limit it to one bucket")
    if not todo:
        ui.say(f"nothing to change: the IAM policy of project {project} already has all {len(grants)} binding(s)")
        return
    ui.say(f"IAM policy of project {project}, bindings to add:")
    for line in iam.diff_lines(todo):
        ui.say(line)
    if request.dry_run:
        _show_dry_run(project, todo, ui)
        return
    consent(request, f"project {project}", len(todo), ui)
    ui.progress(f"updating the IAM policy of project {project}")
    result = policy_api.add(todo, first=policy, on_conflict=lambda n: ui.progress(f"the policy changed meanwhile (conflict {n}); reading it again"))
    # Whatever the path (our write, a retry of it whose reply was lost, or another writer
    # adding the same bindings meanwhile), every binding listed is now in the policy.
    after = f" after {result.conflicts} concurrent change(s)" if result.conflicts else ""
    ui.say(f"updated the IAM policy of project {project}: all {len(todo)} binding(s) above are in place{after}")


def _show_dry_run(project: str, todo: list[Grant], ui: AuthUi) -> None:
    from tpuctl.cloud.auth import iam, service_agent

    ui.say("equivalent gcloud commands:")
    ui.say(f"  {service_agent.gcloud_identity_command(project)}")
    for command in iam.gcloud_commands(project, todo):
        ui.say(f"  {command}")
    ui.say("dry run: nothing changed")

"""`tpuctl auth`: credentials, the TPU service identity, and the IAM roles a TPU job needs.

Results go to stdout as plain lines; progress and warnings to stderr. Nothing
here ever prints a token or key material: only account names, file paths and
the settings layer each value came from.
"""

from __future__ import annotations

import sys

import click

from tpuctl import settings
from tpuctl.cli import cloud_options
from tpuctl.errors import FAILED, USAGE, TpuctlError


def _progress(message: str) -> None:
    """What is happening now: on a terminal only, like a spinner (scripts see results and errors)."""
    if sys.stderr.isatty():
        click.echo(f"tpuctl: {message}", err=True)


def _with_project(resolved: settings.Settings, project: str, source: str) -> settings.Settings:
    """The same settings with the project taken from the credentials (the key file's project)."""
    values = {setting.key: value for setting, value in resolved.items()}
    values["project"] = settings.Value(project, source)
    return settings.Settings(values)


@click.command("auth")
@cloud_options.project_options
@cloud_options.zone_option
@click.option(
    "--model-dir",
    metavar="gs://BUCKET/PATH",
    help="Where jobs write checkpoints; write access is limited to its bucket [env TPUCTL_MODEL_DIR].",
)
@click.option(
    "--role",
    "roles",
    multiple=True,
    metavar="ROLE",
    help="Another role to grant, e.g. roles/storage.objectViewer (repeatable).",
)
@click.option(
    "--service-account",
    metavar="EMAIL",
    help="Also grant the same roles to this account (the one TPU VM workloads run as).",
)
@click.option("--dry-run", is_flag=True, help="Print the policy diff and the equivalent gcloud commands; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Update the IAM policy without asking.")
@click.option(
    "--legacy-ai-platform",
    is_flag=True,
    help="The old AI Platform flow (ml getConfig, roles/ml.serviceAgent) for stacks that still call ml.googleapis.com.",
)
def auth(
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    model_dir: str | None,
    roles: tuple[str, ...],
    service_account: str | None,
    dry_run: bool,
    yes: bool,
    legacy_ai_platform: bool,
) -> None:
    """Check credentials, get the TPU service identity, and grant it what a TPU job needs.

    By default the TPU service identity gets roles/storage.objectAdmin on the model-dir
    bucket (an IAM condition limits it to that bucket) and roles/logging.logWriter.
    Bindings are only ever added: the policy is read, extended and written back with
    its etag, again on a concurrent change. Re-running changes nothing.
    """
    from tpuctl.cloud import iam

    # Bad input first, before any file or network is touched: exit 2.
    extra_roles = [iam.check_role(role) for role in roles]
    extra_member = iam.service_account_member(service_account) if service_account else None
    resolved = cloud_options.resolve(
        project=project, zone=zone, model_dir=model_dir, credentials=credentials, access_token_file=access_token_file
    )
    if legacy_ai_platform:
        from tpuctl.cloud.service_agent import LEGACY_WARNING

        if model_dir is not None:
            raise TpuctlError(
                "--model-dir has no effect with --legacy-ai-platform",
                hint="the legacy flow grants roles/ml.serviceAgent project-wide; add --role for more",
            )

        click.echo(f"warning: {LEGACY_WARNING}", err=True)
        bucket = None
        tpu_zone = None
    else:
        chosen_dir = resolved.get("model-dir")
        bucket = iam.bucket_of(chosen_dir) if chosen_dir else None
        tpu_zone = resolved.zone

    # 1. Credentials.
    from tpuctl.cloud import credentials as creds

    identity = creds.load(resolved)
    project_id = resolved.get("project")
    project_source = resolved.source("project")
    if project_id is None and identity.project:
        project_id, project_source = identity.project, f"the {identity.source}"
        resolved = _with_project(resolved, project_id, project_source)
    if project_id is None:
        raise TpuctlError("no project set", hint="pass --project, set TPUCTL_PROJECT, or run `tpuctl init`", exit_code=USAGE)
    creds.check_token(identity)
    click.echo(f"credentials: {identity.source}")
    click.echo(f"account: {identity.account or '(not named by these credentials)'}")
    click.echo(f"project: {project_id} (from {project_source})")

    # 2. The service identity.
    from tpuctl.cloud import service_agent

    if legacy_ai_platform:
        _progress(f"asking ml.googleapis.com for the TPU service account of project {project_id}")
        legacy = service_agent.legacy_identity(identity, resolved, project_id)
        click.echo(f"TPU service account (ml getConfig): {legacy.tpu_service_account}")
        click.echo(f"TPU service agent (serviceusage): {legacy.service_agent or '(not named in the reply)'}")
        members = [iam.service_account_member(legacy.tpu_service_account)]
    else:
        assert tpu_zone is not None
        _progress(f"asking the TPU API for the service identity of project {project_id}")
        email = service_agent.tpu_service_identity(identity, resolved, tpu_zone)
        click.echo(f"TPU service identity: {email}")
        members = [iam.service_account_member(email)]
    if extra_member and extra_member not in members:
        members.append(extra_member)
    if legacy_ai_platform:
        grants = iam.legacy_grants(members, extra_roles)
    else:
        grants = iam.job_grants(members, bucket, extra_roles)

    # 3. The IAM policy: read, diff, ask, write with the etag.
    endpoint = resolved.get("resourcemanager-endpoint") or "https://cloudresourcemanager.googleapis.com"
    policy_api = iam.ProjectIam(identity, endpoint, project_id)
    _progress(f"reading the IAM policy of project {project_id}")
    policy = policy_api.read()
    todo = iam.missing(policy, grants)
    if bucket is None and not legacy_ai_platform:
        click.echo(
            f"note: no model dir set, so {iam.STORAGE_ROLE} applies to the whole project; "
            "pass --model-dir gs://BUCKET/PATH to limit it to one bucket"
        )
    if not todo:
        click.echo(f"nothing to change: the IAM policy of project {project_id} already has all {len(grants)} binding(s)")
        return
    click.echo(f"IAM policy of project {project_id}, bindings to add:")
    for line in iam.diff_lines(todo):
        click.echo(line)
    if dry_run:
        click.echo("equivalent gcloud commands:")
        click.echo(f"  {service_agent.gcloud_identity_command(project_id)}")
        for command in iam.gcloud_commands(project_id, todo):
            click.echo(f"  {command}")
        click.echo("dry run: nothing changed")
        return
    if not yes:
        if not sys.stdin.isatty():
            raise TpuctlError(
                f"would change the IAM policy of project {project_id}",
                hint="re-run with --yes or --dry-run",
                exit_code=USAGE,
            )
        if not click.confirm(f"Add {len(todo)} binding(s) to the IAM policy of project {project_id}?", err=True):
            raise TpuctlError(f"the IAM policy of project {project_id} was not changed", exit_code=FAILED)

    _progress(f"updating the IAM policy of project {project_id}")
    result = policy_api.add(
        todo,
        first=policy,
        on_conflict=lambda n: _progress(f"the policy changed meanwhile (conflict {n}); reading it again"),
    )
    # Whatever the path (our write, a retry of it whose reply was lost, or another writer
    # adding the same bindings meanwhile), every binding listed is now in the policy.
    after = f" after {result.conflicts} concurrent change(s)" if result.conflicts else ""
    click.echo(f"updated the IAM policy of project {project_id}: all {len(todo)} binding(s) above are in place{after}")

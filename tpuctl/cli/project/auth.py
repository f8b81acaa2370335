"""`tpuctl auth`: credentials, the TPU service identity, and the IAM roles a TPU job needs.

The flow itself is tpuctl.cloud.auth.auth_flow; this module parses the flags and
gives it its channels: results to stdout as plain lines, progress and warnings
to stderr, questions on a terminal. Nothing ever prints a token or key
material: only account names, file paths and the settings layer each value
came from.
"""

from __future__ import annotations

import sys

import click

from tpuctl.cli import cloud_options


class _Terminal:
    """The auth flow's channels: results on stdout, notes on stderr, progress and questions only on a terminal."""

    @property
    def can_ask(self) -> bool:
        return sys.stdin.isatty()

    def say(self, line: str) -> None:
        click.echo(line)

    def note(self, line: str) -> None:
        click.echo(line, err=True)

    def progress(self, line: str) -> None:
        """Like a spinner: scripts see results and errors only."""
        if sys.stderr.isatty():
            click.echo(f"tpuctl: {line}", err=True)

    def confirm(self, question: str) -> bool:
        return click.confirm(question, err=True)


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
    help="Also grant the same roles to this account (the one TPU VM workloads run as); with --vertex, the account jobs run as.",
)
@click.option("--dry-run", is_flag=True, help="Print the policy diff and the equivalent gcloud commands; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Update the IAM policy without asking.")
@click.option(
    "--legacy-ai-platform",
    is_flag=True,
    help="The old AI Platform flow (ml getConfig, roles/ml.serviceAgent) for stacks that still call ml.googleapis.com.",
)
@click.option(
    "--vertex",
    is_flag=True,
    help="Set up for Vertex AI custom jobs (tpuctl launch --backend vertex) instead of TPU VMs: APIs, service agents, bucket access.",
)
@click.option(
    "--staging-bucket",
    metavar="gs://BUCKET[/PATH]",
    help="With --vertex: the bucket jobs read their code from; the job's account gets object access to it.",
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
    vertex: bool,
    staging_bucket: str | None,
) -> None:
    """Check credentials, get the TPU service identity, and grant it what a TPU job needs.

    By default the TPU service identity gets roles/storage.objectAdmin on the model-dir
    bucket (an IAM condition limits it to that bucket) and roles/logging.logWriter.
    Bindings are only ever added: the policy is read, extended and written back with
    its etag, again on a concurrent change. Re-running changes nothing.

    With --vertex: checks that the Vertex AI, Cloud Storage and Logging APIs are on and
    that you may launch jobs, gives the Vertex AI service agents their roles, gives the
    account jobs run as (the custom code service agent, or --service-account) object
    access to the staging and model-dir buckets, and lets you act as --service-account.
    """
    from tpuctl.cloud.auth.auth_flow import authorize
    from tpuctl.cloud.auth.auth_request import AuthRequest

    request = AuthRequest(
        project, credentials, access_token_file, zone, model_dir, roles, service_account, dry_run, yes, legacy_ai_platform, vertex, staging_bucket
    )
    authorize(request, _Terminal())

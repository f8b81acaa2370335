"""`tpuctl init`: choose project, zone, accelerator and runtime once, checked against the API."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tpuctl.cli.cloud_options import framework_option, project_options, resolve, tpu_api, zone_option
from tpuctl.cloud.nodes.node_lookup import check_defaults
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings import cloud as settings
from tpuctl.settings import files as config
from tpuctl.tpu import software

WRITTEN = ("project", "zone", "accelerator-type", "runtime-version", "model-dir")


@click.command("init")
@project_options
@zone_option
@click.option("--accelerator-type", metavar="TYPE", help="Default accelerator type, e.g. v4-8.")
@click.option("--runtime-version", metavar="VERSION", help="Default TPU VM runtime version [default: TensorFlow's image for the accelerator type].")
@framework_option("writes the accelerator type's JAX image (v2-alpha-tpuv6e, ...) as runtime-version")
@click.option("--model-dir", metavar="gs://BUCKET/PATH", help="Default bucket path for checkpoints and summaries.")
@click.option("--here", is_flag=True, help="Write ./tpuctl.toml (shared with the project) instead of the user config file.")
@click.option("--yes", "-y", is_flag=True, help="Ask nothing: take flags, then current settings, then defaults.")
@click.option("--dry-run", is_flag=True, help="Validate and show what would be written; write nothing.")
def init(
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    accelerator_type: str | None,
    runtime_version: str | None,
    framework: str,
    model_dir: str | None,
    here: bool,
    yes: bool,
    dry_run: bool,
) -> None:
    """Write the [cloud] defaults other commands use, after checking them with the TPU API.

    Suggested values come from flags, then existing settings, then gcloud's
    active configuration. Re-running with the same answers changes nothing.
    With --framework jax the runtime version is the type's JAX image, written.
    """
    flags = {
        "project": project,
        "zone": zone,
        "accelerator_type": accelerator_type,
        "runtime_version": runtime_version,
        "model_dir": model_dir,
    }
    current = resolve(credentials=credentials, access_token_file=access_token_file, **flags)
    if not yes and not sys.stdin.isatty():
        raise TpuctlError("tpuctl init asks questions, but stdin is not a terminal", hint="pass --yes with --project, --zone, …")
    chosen, follows = _choose(current, yes, framework == "jax")
    for key in ("project", "zone"):
        if not chosen[key]:
            raise TpuctlError(f"no {key} given", hint=f"pass --{key}")
    answers = settings.resolve({k.replace("-", "_"): v for k, v in chosen.items() if v} | _creds(credentials, access_token_file))
    check_defaults(tpu_api(answers), answers)
    target = Path.cwd() / config.PROJECT_FILE if here else config.config_files()[0]
    values = {key: value for key, value in chosen.items() if value}
    for key, value in values.items():
        click.echo(f"{key} = {value}")
    if follows:
        shown = answers.get("runtime-version")
        click.echo(f"# runtime-version: {shown}, TensorFlow's image for {answers.get('accelerator-type')} (not written: it follows accelerator-type)")
    if dry_run:
        click.echo(f"(dry run: {target} not written)")
        return
    changed = config.update_section(target, settings.SECTION, values)
    click.echo(f"wrote {target}" if changed else f"{target} already has these values; nothing changed")


def _choose(current: settings.Settings, yes: bool, jax: bool) -> tuple[dict[str, str | None], bool]:
    """The values to write (asked for, unless `yes`) and whether runtime-version follows the accelerator type.

    A runtime no layer set is not written: it follows the accelerator type, where a written one would give every later
    --accelerator-type this type's image (a single host's on a pod slice, TensorFlow's on v6e). That default follows
    TensorFlow's image, so a JAX one (--framework jax) is written."""
    chosen = {key: current.get(key) for key in WRITTEN}
    follows = not current.given("runtime-version")
    if not yes:
        for key in WRITTEN:
            if key == "runtime-version" and follows:
                suggested = _default_image(chosen["accelerator-type"] or "", jax)
                chosen[key] = _ask(key, suggested)
                follows = not jax and chosen[key] in (None, suggested)
            else:
                chosen[key] = _ask(key, chosen[key])
    if follows and jax:
        chosen["runtime-version"], follows = _default_image(chosen["accelerator-type"] or "", jax), False
    if follows:
        chosen["runtime-version"] = None
    return chosen, follows


def _default_image(accelerator_type: str, jax: bool) -> str | None:
    """The image suggested for the type: TensorFlow's default (settings.default_runtime), or its JAX image."""
    return software.jax_image(accelerator_type) if jax else settings.default_runtime(accelerator_type)


def _creds(credentials: str | None, access_token_file: str | None) -> dict[str, str]:
    given = {"credentials": credentials, "access_token_file": access_token_file}
    return {key: value for key, value in given.items() if value}


def _ask(key: str, default: str | None) -> str | None:
    optional = key == "model-dir"
    label = f"{settings.BY_KEY[key].help} ({key})" + (" [optional]" if optional else "")
    answer = click.prompt(label, default=default or "", show_default=bool(default), err=True).strip()
    return answer or None

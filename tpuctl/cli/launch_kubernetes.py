"""`tpuctl launch --backend kubernetes`: the options only that backend reads, and its dispatch.

The options are added to `launch` by one decorator and kept out of its
signature (click stores them in ctx.meta), so the command stays readable; a
kubernetes option given to another backend is refused, never ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from tpuctl.errors import TpuctlError

if TYPE_CHECKING:
    from tpuctl.launch.plan import Job

F = TypeVar("F", bound=Callable[..., Any])
_META = "tpuctl.kubernetes"


def _keep(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta.setdefault(_META, {})[param.name] = value
    return value


def kubernetes_options(f: F) -> F:
    options = [
        click.option("--image", metavar="IMAGE", expose_value=False, callback=_keep, help="Container image the pods run (--backend kubernetes): it holds SCRIPT, TensorFlow and tpuctl."),
        click.option("--namespace", metavar="NS", default="default", show_default=True, expose_value=False, callback=_keep, help="Kubernetes namespace of the job."),
        click.option("--job-name", metavar="NAME", expose_value=False, callback=_keep, help="TFJob/JobSet name.  [default: SCRIPT's name and 4 random hex digits]"),
        click.option(
            "--accelerator",
            metavar="TYPE",
            expose_value=False,
            callback=_keep,
            help="GKE accelerator: tpu-v5-lite-podslice, tpu-v4-podslice, ... runs a JobSet on one TPU slice; nvidia-l4, ... puts GPU workers on such nodes.",
        ),
        click.option("--topology", metavar="AxB[xC]", expose_value=False, callback=_keep, help="TPU slice topology for --accelerator tpu-..., e.g. 2x4 or 2x2x4."),
        click.option(
            "--tpu-chips-per-host",
            type=click.IntRange(min=1),
            expose_value=False,
            callback=_keep,
            help="Chips per TPU host where a topology comes in two machine types (4 makes v5e 2x4 two hosts).  [default: one host up to 8 chips, else 4]",
        ),
        click.option("--gpus-per-worker", type=click.IntRange(min=0), default=0, expose_value=False, callback=_keep, help="nvidia.com/gpu for each chief and worker pod."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def given(ctx: click.Context) -> dict[str, Any]:
    return dict(ctx.meta.get(_META, {}))


def _explicit(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def refuse_elsewhere(ctx: click.Context, backend: str) -> None:
    """Kubernetes options given to another backend are a mistake, not something to ignore."""
    for name in given(ctx):
        if _explicit(ctx, name):
            flag = "--" + name.replace("_", "-")
            raise TpuctlError(f"{flag} is for --backend kubernetes (this launch uses --backend {backend})")


def launch_kubernetes(job: Job, *, dry_run: bool, as_json: bool, log_dir: Path, tail_view: bool) -> int:
    """Render the job's manifest; print it (--dry-run) or apply and follow it."""
    from tpuctl.launch.k8s_manifest import KubeOptions, render

    ctx = click.get_current_context()
    if _explicit(ctx, "start_timeout"):
        raise TpuctlError("--start-timeout is for local and ssh workers", hint="on Kubernetes, pods wait for the scheduler as long as it takes")
    if tail_view:
        raise TpuctlError("--tail is not available with --backend kubernetes", hint="run `tpuctl tail MODEL_DIR` beside it")
    values = given(ctx)
    if not values.get("image"):
        raise TpuctlError("--backend kubernetes needs --image IMAGE", hint="an image with SCRIPT, TensorFlow and tpuctl installed")
    if dry_run and as_json:
        raise TpuctlError("--json is not for --backend kubernetes --dry-run", hint="the dry run prints the manifest as YAML")
    manifest = render(
        job,
        KubeOptions(
            image=values["image"],
            namespace=values.get("namespace") or "default",
            name=values.get("job_name"),
            accelerator=values.get("accelerator"),
            topology=values.get("topology"),
            chips_per_host=values.get("tpu_chips_per_host"),
            gpus_per_worker=values.get("gpus_per_worker") or 0,
        ),
    )
    if dry_run:
        sys.stdout.write(manifest.text)
        sys.stdout.flush()
        return 0
    from tpuctl.launch.k8s_run import launch

    return launch(manifest, log_dir=log_dir, as_json=as_json)

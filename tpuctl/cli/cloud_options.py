"""The options every cloud command shares, and turning them into resolved Settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tpuctl.settings import cloud as settings

if TYPE_CHECKING:
    from tpuctl.cloud.nodes.tpu import TpuApi

F = TypeVar("F", bound=Callable[..., Any])


def project_options(fn: F) -> F:
    """--project, the two ways to give credentials other than Application Default Credentials, and --api-timeout."""
    return _project_options(api_timeout_option(fn))


def project_options_each_call(fn: F) -> F:
    """project_options for a command that runs for days (babysit): --api-timeout bounds each call, not all together."""
    return _project_options(api_timeout_option(fn, each_call=True))


def _project_options(fn: F) -> F:
    fn = click.option(
        "--access-token-file",
        metavar="FILE",
        help="Use the bearer token in FILE instead of Application Default Credentials [env TPUCTL_ACCESS_TOKEN_FILE].",
    )(fn)
    fn = click.option(
        "--credentials",
        metavar="KEY.json",
        help="Service-account or authorized-user JSON file instead of ADC [env TPUCTL_CREDENTIALS].",
    )(fn)
    return click.option("--project", metavar="ID", help="Google Cloud project [env TPUCTL_PROJECT].")(fn)


def api_timeout_option(fn: F, *, each_call: bool = False) -> F:
    """--api-timeout: the command's deadline for Google API requests that go unanswered (tpuctl/cloud/plumbing/retry.py), all of
    them together; `each_call`, for a command that runs for days (babysit, launch): each call's own. Every command that
    calls a Google API takes it, with --project or alone (runs --delete-lost-vms, doctor --tpu)."""
    whose = "each request's own" if each_call else "all of this command's together"
    return click.option(
        "--api-timeout",
        metavar="SECONDS",
        expose_value=False,
        callback=lambda ctx, param, value: api_deadline(ctx, value, each_call=each_call),
        help=f"Give up after SECONDS of Google API requests left unanswered, retries included ({whose}) [env TPUCTL_API_TIMEOUT; default 60].",
    )(fn)


def api_deadline(ctx: click.Context, flag: str | None = None, *, each_call: bool = False) -> None:
    """The api-timeout deadline (`flag`: --api-timeout's value, if the command has one), in force until it returns."""
    from tpuctl.cloud.plumbing import retry

    seconds = float(settings.value_of("api-timeout", flag) or retry.DEFAULT_S)
    ctx.with_resource(retry.limited(seconds, "--api-timeout" if flag else "api-timeout setting", each_call=each_call))


def zone_option(fn: F) -> F:
    return click.option("--zone", metavar="ZONE", help="Zone, e.g. us-central2-b [env TPUCTL_ZONE].")(fn)


def framework_option(what: str) -> Callable[[F], F]:
    """--framework for a command that makes TPU VMs: jax takes the type's JAX image (tpuctl/tpu/software.py)."""
    return click.option(
        "--framework",
        type=click.Choice(["tensorflow", "jax"]),
        default="tensorflow",
        show_default=True,
        help=f"What new TPU VMs are for: jax {what}.",
    )


def resolve(**flags: Any) -> settings.Settings:
    """Settings from the command's flags (None where not given) over every other layer."""
    known = {key: value for key, value in flags.items() if key in settings.BY_KEY_ATTR and value is not None}
    return settings.resolve(known)


def tpu_api(resolved: settings.Settings) -> TpuApi:
    """The TPU API client, its credentials checked once up front (see tpuctl.cloud.nodes.tpu)."""
    from tpuctl.cloud.nodes.tpu import TpuApi

    return TpuApi.connect(resolved)

"""The options every cloud command shares, and turning them into resolved Settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tpuctl.settings import cloud as settings

if TYPE_CHECKING:
    from tpuctl.cloud.tpu import TpuApi

F = TypeVar("F", bound=Callable[..., Any])


def project_options(fn: F) -> F:
    """--project plus the two ways to give credentials other than Application Default Credentials."""
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


def zone_option(fn: F) -> F:
    return click.option("--zone", metavar="ZONE", help="Zone, e.g. us-central2-b [env TPUCTL_ZONE].")(fn)


def resolve(**flags: Any) -> settings.Settings:
    """Settings from the command's flags (None where not given) over every other layer."""
    known = {key: value for key, value in flags.items() if key in settings.BY_KEY_ATTR and value is not None}
    return settings.resolve(known)


def tpu_api(resolved: settings.Settings) -> TpuApi:
    """The TPU API client, its credentials checked once up front (see tpuctl.cloud.tpu)."""
    from tpuctl.cloud.tpu import TpuApi

    return TpuApi.connect(resolved)

"""A `tpuctl auth` request as both flows take it (auth_flow.py for TPU VMs, vertex_auth.py for --vertex).

The flags, where the flow's words go, what the first steps established (the
request checked, the credentials and the project), and the one question asked
before a write. A module of its own so that the Vertex flow, which the TPU VM
flow hands --vertex to, imports none of that flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.auth.credentials import Identity
    from tpuctl.settings import cloud as settings

RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com"


class AuthUi(Protocol):
    """Where the flow's words go."""

    @property
    def can_ask(self) -> bool:
        """A person is there to answer confirm()."""

    def say(self, line: str) -> None:
        """A result (stdout)."""

    def note(self, line: str) -> None:
        """A warning, always shown (stderr)."""

    def progress(self, line: str) -> None:
        """What is happening now; may be dropped when nobody watches."""

    def confirm(self, question: str) -> bool:
        """Ask a yes/no question; only called when can_ask."""


@dataclass(frozen=True)
class AuthRequest:
    """`tpuctl auth`'s flags (None where not given)."""

    project: str | None = None
    credentials: str | None = None
    access_token_file: str | None = None
    zone: str | None = None
    model_dir: str | None = None
    roles: tuple[str, ...] = ()
    service_account: str | None = None
    dry_run: bool = False
    yes: bool = False
    legacy_ai_platform: bool = False
    vertex: bool = False
    staging_bucket: str | None = None


@dataclass(frozen=True)
class Target:
    """The request checked: settings resolved, roles and member validated, the bucket and zone chosen."""

    resolved: settings.Settings
    extra_roles: list[str]
    extra_member: str | None
    bucket: str | None
    zone: str | None
    buckets: tuple[str, ...] = ()  # --vertex: the staging bucket and the model dir's, each once


@dataclass(frozen=True)
class Who:
    """Checked credentials and the project they act on (with the settings that name it)."""

    identity: Identity
    resolved: settings.Settings
    project: str


def consent(request: AuthRequest, where: str, count: int, ui: AuthUi) -> None:
    """--yes, or a person who says yes to `count` bindings in `where`; without a terminal to ask on, the change needs --yes (exit 2)."""
    if request.yes:
        return
    if not ui.can_ask:
        raise TpuctlError(f"would change the IAM policy of {where}", hint="re-run with --yes or --dry-run", exit_code=USAGE)
    if not ui.confirm(f"Add {count} binding(s) to the IAM policy of {where}?"):
        raise TpuctlError(f"the IAM policy of {where} was not changed", exit_code=FAILED)

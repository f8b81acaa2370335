"""The one error type the CLI turns into a single line and an exit status, and the kinds callers tell apart.

Each kind is named where the reply that shows it is read (a Google API's status, an ssh agent's
hello), once, so a caller tests its type rather than the words of its message."""

from __future__ import annotations

import copy
import enum
from typing import TypeVar

from tpuctl.inputs.terminal import printable

USAGE = 2
FAILED = 1
_Told = TypeVar("_Told", bound="TpuctlError")


class TpuctlError(Exception):
    """An expected failure: bad input (exit 2) or a failed operation (exit 1).

    Anything else that escapes is a bug and keeps its traceback under --debug.
    """

    default_exit = USAGE

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = self.default_exit if exit_code is None else exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"

    def retold(self: _Told, message: str) -> _Told:
        """The same failure, of the same kind, in other words (what a clean-up after it left behind, added)."""
        told = copy.copy(self)
        told.message, told.args = message, (message,)
        return told


class Stockout(str, enum.Enum):
    """How a zone said it has no capacity now; each is told where the reply is read (cloud/plumbing/api_errors.py,
    cloud/nodes/lifecycle.py). The value is the short reason a stockout line shows."""

    REFUSED = "refused at once"  # the create call itself: RESOURCE_EXHAUSTED naming capacity
    ZONE = "code 8"  # the operation: "There is no more capacity in the zone"
    RESERVED = "code 9"  # the operation: "Insufficient reserved capacity"
    PREEMPTED = "preempted while being created"  # code 3, "... in state PREEMPTED", a spot node
    INTERNAL = "code 13 twice"  # the opaque "an internal error has occurred", again on a second try
    STUCK = "stuck in CREATING"  # past the per-try deadline (setting create-deadline)
    QUEUED = "still queued"  # a hunt's queued request still waiting for resources past the per-try deadline


class CapacityError(TpuctlError):
    """The zone has no capacity for the TPU asked for now (RESOURCE_EXHAUSTED about capacity): a spot or queued
    request, another zone, or a later try may get one; the project's quota is not the limit."""

    default_exit = FAILED

    def __init__(self, message: str, *, kind: Stockout = Stockout.ZONE, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind


class QuotaError(TpuctlError):
    """The project's quota is spent (429 RESOURCE_EXHAUSTED, an operation's code 8): a quota increase or a smaller
    request helps, another try soon does not; another zone (or, when `region` is set, another region) may have room."""

    default_exit = FAILED

    def __init__(self, message: str, *, hint: str | None = None, quota_id: str | None = None, region: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.quota_id = quota_id  # the quota the reply names, e.g. TPUV6EPreemptiblePerProjectPerRegionForTPUAPI
        self.region = region  # set when that quota is a region's: every zone of the region is refused alike


class AccessDenied(TpuctlError):
    """The credentials lack a permission (403 PERMISSION_DENIED, an operation's code 7): an IAM grant helps."""

    default_exit = FAILED


class LostConnection(TpuctlError):
    """A host could not be reached, or stopped answering (ssh): the network or the host, not the script."""

    default_exit = FAILED


class PreflightFailed(TpuctlError):
    """A check run on a host before any worker started failed there (tpuctl/launch/preflight.py): the host's
    Python or TensorFlow, which `tpuctl doctor` looks at further."""

    default_exit = FAILED


def one_line(text: str, limit: int = 240, *, first: bool = False, last: bool = False) -> str:
    """Untrusted, possibly multi-line text (an API reply, a remote command's stderr) fit
    for a one-line message: whitespace collapsed, control characters escaped (terminal.printable) so they
    cannot move the terminal's cursor, long text cut. `first` keeps only the first non-blank line,
    where the rest is detail (TensorFlow's errors, with their stack of op names); `last`
    only the last, where the lines before it are noise (ssh's warnings before its error)."""
    if first or last:
        lines = [line for line in text.splitlines() if line.strip()]
        text = (lines[0] if first else lines[-1]) if lines else ""
    shown = printable(" ".join(text.split()))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"

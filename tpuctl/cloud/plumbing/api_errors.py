"""Google API failures as one line a user can act on.

The raw messages are long, sometimes multi-line, and bury the fix. Each kind
that users actually hit (API off, missing permission, quota, capacity, bad
request, refused credentials) gets a message naming the project and zone used
and a hint with the next command to run. The kinds a caller acts on differently
(capacity, quota, permission) are told apart here, where the reply is read, and
raised as their own types (tpuctl/inputs/errors.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tpuctl.cloud.plumbing import retry
from tpuctl.inputs.errors import FAILED, USAGE, AccessDenied, CapacityError, QuotaError, Stockout, TpuctlError, one_line
from tpuctl.tpu.offers import region_of

# google-api-core prefixes REST errors with "POST https://…: "; the URL adds nothing for the user.
_REQUEST_PREFIX = re.compile(r"^[A-Z]+ \S+: ")
_PERMISSION = re.compile(r"Permission '([^']+)' denied")
# How the TPU API names a refused quota and where it counts, in a 429's message and an operation's code 8 alike:
# "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5."
# (github.com/marin-community/marin/pull/1612), "Quota 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' exhausted.
# Limit 4 in zone us-central1-a" (public quota errors; tpuctl/tpu/quota_ids.py).
_QUOTA_ID = re.compile(r"Quota (?:limit )?'([A-Za-z0-9_-]{1,120})'")
_QUOTA_REGION = re.compile(r"\bin region ([a-z][a-z0-9-]{1,60}[a-z0-9])")
T = TypeVar("T")
# google.rpc.Code values an operation's error carries (google/rpc/code.proto).
INVALID_ARGUMENT, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INTERNAL = 3, 7, 8, 9, 13
_CAPACITY_HINT = "try --spot, --queued, or another zone (`tpuctl accelerators --zone Z` shows what a zone offers)"
_QUOTA_HINT = "request more quota (console: IAM & Admin > Quotas, service tpu.googleapis.com), or try another zone or region (`tpuctl offers TYPE`)"


@dataclass(frozen=True)
class Where:
    """What was being done, where: every message names it so a wrong --project or --zone shows."""

    action: str  # "create node my-tpu"
    project: str
    zone: str | None = None
    permission: str | None = None  # the IAM permission this call needs
    service: str = "tpu.googleapis.com"
    role: str = "roles/tpu.admin"  # a predefined role that has the permission, for the hint

    def place(self) -> str:
        return f"project {self.project}" + (f", zone {self.zone}" if self.zone else "")


def guarded(fn: Callable[[], T], where: Where) -> T:
    """fn() with transient failures retried and the final failure explained in one line."""
    return explained(lambda: retry.call(fn), where)


def explained(fn: Callable[[], T], where: Where) -> T:
    """fn() (which retries itself, if at all) with a Google API failure explained in one line."""
    try:
        return fn()
    except Exception as exc:
        if is_api_failure(exc):
            raise explain(exc, where) from None
        raise


def error_from_reply(status: int, body: bytes, method: str, url: str) -> Exception:
    """google-api-core's exception for an error reply we read ourselves, built as its REST transport builds them.

    The stdlib path then raises the same types as google-cloud-tpu and
    AuthorizedSession calls, so retries and `explain` serve every transport.
    """
    import requests
    from google.api_core import exceptions as api

    response = requests.Response()
    response.status_code = status
    response._content = body
    response.request = requests.Request(method, url).prepare()
    error: Exception = api.from_http_response(response)
    return error


def is_api_failure(exc: BaseException) -> bool:
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    return isinstance(exc, (api.GoogleAPICallError, requests.RequestException, auth.GoogleAuthError, ConnectionError, TimeoutError, retry.Unusable))


def explain(exc: BaseException, where: Where) -> TpuctlError:
    """A TpuctlError for any failure of a Google API call (the caller has already retried)."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    message = one_line(_REQUEST_PREFIX.sub("", str(getattr(exc, "message", "") or exc)))
    if isinstance(exc, api.Forbidden):
        if _service_disabled(exc):
            return TpuctlError(
                f"the {where.service} API is not enabled in {where.place()}",
                hint=f"gcloud services enable {where.service} --project {where.project}",
                exit_code=FAILED,
            )
        permission = _permission(exc) or where.permission or "a permission"
        return AccessDenied(
            f"permission denied: {where.action} needs {permission} in {where.place()}",
            hint=f"ask an admin for a role that has it (e.g. {where.role}), or check --project/--zone",
        )
    # A 401 makes google-auth try a refresh; a bare access token cannot, and says so obscurely.
    if isinstance(exc, (api.Unauthorized, api.Unauthenticated, auth.RefreshError)):
        return TpuctlError(
            f"Google refused the credentials while trying to {where.action}",
            hint="the token may have expired: refresh it or run `gcloud auth application-default login`",
            exit_code=FAILED,
        )
    if isinstance(exc, api.TooManyRequests) and retry.is_quota(exc):
        return quota_refused(message, where)
    if isinstance(exc, api.TooManyRequests) and retry.is_capacity(exc):
        return CapacityError(f"no TPU capacity in {where.place()}: {message}", kind=Stockout.REFUSED, hint=_CAPACITY_HINT)
    if isinstance(exc, (api.BadRequest, api.InvalidArgument)):
        return TpuctlError(f"cannot {where.action} in {where.place()}: {message}", exit_code=USAGE)
    if isinstance(exc, api.NotFound) and names_location(exc, where):
        return TpuctlError(
            f"zone {where.zone} has no Cloud TPUs for project {where.project}",
            hint="`gcloud compute tpus locations list` or `tpuctl list --all-zones` shows the zones",
            exit_code=USAGE,
        )
    if isinstance(exc, api.NotFound):
        return TpuctlError(f"cannot {where.action}: not found in {where.place()} ({message})", exit_code=FAILED)
    if isinstance(exc, retry.NoAnswer):
        return no_answer(exc, where)
    if isinstance(exc, retry.Unusable):  # a reply larger than any, a listing without end
        return Unanswered(f"{exc} while trying to {where.action} in {where.place()}")
    if isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return TpuctlError(
            f"cannot reach the Google API to {where.action}: {exc.__class__.__name__}",
            hint="check the network, or the endpoint settings shown by `tpuctl config show`",
            exit_code=FAILED,
        )
    code = getattr(exc, "code", None)
    status = f"{code} " if code else ""
    suffix = " after retries" if retry.is_transient(exc) else ""
    return TpuctlError(f"cannot {where.action} in {where.place()}: {status}{message}{suffix}", exit_code=FAILED)


class Unanswered(TpuctlError):
    """A call that got no usable answer (none within the deadline, or one no API gives): whatever it asked for may or
    may not have been done, so a create's caller says how to delete what it may have made."""

    default_exit = FAILED


def no_answer(exc: retry.NoAnswer, where: Where) -> TpuctlError:
    """The deadline of a command's API calls ran out: the endpoint named, and how to give it longer."""
    return Unanswered(f"{exc} while trying to {where.action} in {where.place()}", hint=no_answer_hint(exc))


def no_answer_hint(exc: retry.NoAnswer) -> str:
    longer = {"--hunt-timeout": "--hunt-timeout bounds the listing of the offers too", "--api-timeout": "allow longer with --api-timeout"}.get(
        exc.why, "allow longer with the api-timeout setting (TPUCTL_API_TIMEOUT)"
    )
    return f"check the network and the endpoint settings (`tpuctl config show`); {longer}"


def operation_failed(code: int, message: str, where: Where, *, creating: bool = False, repeated: bool = False) -> TpuctlError:
    """A long-running operation that ended in error (google.rpc.Status code and message).

    `creating`: the operation creates or starts a node, where a PREEMPTED state means a spot node taken back
    before it was up. `repeated`: an opaque INTERNAL already ended the same try in this zone once; the TPU API
    answers spot stockouts that way, and only a repeat tells them from a passing fault."""
    text = one_line(message)
    capacity = "capacity" in text.lower()
    if code == RESOURCE_EXHAUSTED and capacity:  # "There is no more capacity in the zone ..."
        return CapacityError(f"no TPU capacity in {where.place()}: {text}", kind=Stockout.ZONE, hint=_CAPACITY_HINT)
    if code == RESOURCE_EXHAUSTED:  # the same code carries quota refusals
        return quota_refused(text, where)
    if code == FAILED_PRECONDITION and capacity:  # "Insufficient reserved capacity ..."
        return CapacityError(f"no reserved TPU capacity in {where.place()}: {text}", kind=Stockout.RESERVED, hint=_CAPACITY_HINT)
    if code == INVALID_ARGUMENT and creating and "state PREEMPTED" in text:
        return CapacityError(f"preempted while being created in {where.place()}: {text}", kind=Stockout.PREEMPTED, hint=_CAPACITY_HINT)
    if code == INTERNAL and creating and repeated:
        return CapacityError(f"no TPU capacity in {where.place()}: {text} (twice)", kind=Stockout.INTERNAL, hint=_CAPACITY_HINT)
    if code == PERMISSION_DENIED:
        permission = _PERMISSION.search(text)
        needed = permission.group(1) if permission else where.permission or "a permission"
        return AccessDenied(f"permission denied: {where.action} needs {needed} in {where.place()}")
    return TpuctlError(f"{where.action} failed in {where.place()}: {text}", exit_code=FAILED)


def quota_refused(text: str, where: Where) -> QuotaError:
    """A quota refusal, with the quota it names and, when that quota is a region's, the region (all its zones are
    refused alike): "in region R" in the words, or an id of a per-region quota (…PerProjectPerRegion…)."""
    named = _QUOTA_ID.search(text)
    quota_id = named.group(1) if named else None
    in_region = _QUOTA_REGION.search(text)
    region = in_region.group(1) if in_region else None
    if region is None and quota_id and "PerRegion" in quota_id and where.zone:
        region = region_of(where.zone)
    return QuotaError(f"quota exceeded in {where.place()}: {text}", hint=_QUOTA_HINT, quota_id=quota_id, region=region)


def names_location(exc: BaseException, where: Where) -> bool:
    """A 404 about the zone itself, not about a node inside it."""
    if not where.zone:
        return False
    location = f"projects/{where.project}/locations/{where.zone}"
    return re.search(re.escape(location) + r"(?![/\w-])", str(getattr(exc, "message", exc))) is not None


def _service_disabled(exc: BaseException) -> bool:
    if getattr(exc, "reason", None) == "SERVICE_DISABLED":
        return True
    text = str(getattr(exc, "message", exc))
    return "has not been used in project" in text or "it is disabled" in text


def _permission(exc: BaseException) -> str | None:
    metadata = getattr(exc, "metadata", None) or {}
    if isinstance(metadata, dict) and metadata.get("permission"):
        return str(metadata["permission"])
    found = _PERMISSION.search(str(getattr(exc, "message", exc)))
    return found.group(1) if found else None

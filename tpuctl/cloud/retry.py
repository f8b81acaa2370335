"""Retries for Google API calls, and the one deadline a command's calls share.

Our own loop rather than google-api-core's Retry: it counts attempts (a dead
endpoint should fail in seconds, not after a two-minute deadline) and it must
tell a rate limit (retry) from an exhausted quota (never retry) on a 429.

The deadline (the api-timeout setting, docs/cloud.md): a command's calls share one allowance of unanswered time,
the time spent in attempts that ended without a usable answer (no reply in time, no connection, a reply saying
"try again") and in the pauses between them. Every request's timeout is the smaller of its own and what is left
(`timeout`), no attempt starts once nothing is left, and the call then ends in NoAnswer naming the endpoint. An
answer costs nothing: a create that polls for half an hour is not cut short, while a silent endpoint costs the
command api-timeout at most, however many calls it makes. A command that runs for hours (babysit, a launch)
gives each call an allowance of its own (`each_call`), so an outage an hour ago cannot refuse the delete at its
end. A bound in wall-clock time (`wall`: a hunt's listing, which counts against --hunt-timeout) caps the
requests under it the same way. The scopes are the process's, not a thread's: a command's zone listings run
in a thread pool and spend the same allowance.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 8
BASE_S = 0.25
CAP_S = 8.0
REQUEST_S = 60.0  # one request's own timeout, when more than that is left
DEFAULT_S = 60.0  # the api-timeout setting's default: what one request could always wait, now a whole command's


@dataclass(eq=False)
class Limit:
    """A bound on the Google API calls made under it: `seconds` of unanswered time (or of wall clock, `wall`)."""

    seconds: float
    why: str  # what set it, for the message: "--api-timeout", "api-timeout setting", "--hunt-timeout"
    each_call: bool = False  # each call gets `seconds` of its own rather than all of them sharing them
    wall: bool = False
    started: float = field(default_factory=time.monotonic)
    spent: float = 0.0

    def left(self) -> float:
        return self.started + self.seconds - time.monotonic() if self.wall else self.seconds - self.spent


class NoAnswer(TimeoutError):
    """An endpoint left a call unanswered until its deadline: no further attempt was started."""

    def __init__(self, endpoint: str, limit: Limit) -> None:
        super().__init__(f"{endpoint} did not answer within {limit.seconds:g} s ({limit.why})")
        self.endpoint, self.seconds, self.why = endpoint, limit.seconds, limit.why


_scopes: list[Limit] = []  # entered by the command's own thread, read by every thread
_lock = threading.Lock()
_local = threading.local()  # the limits and endpoint of the call this thread is making


@contextmanager
def limited(seconds: float, why: str, *, each_call: bool = False, wall: bool = False) -> Iterator[Limit]:
    """Every Google API call inside runs under this limit too (see the module's docstring)."""
    limit = Limit(seconds, why, each_call, wall)
    _scopes.append(limit)
    try:
        yield limit
    finally:
        _scopes.remove(limit)


def _shared() -> list[Limit]:
    return [limit for limit in list(_scopes) if not limit.each_call]


def _limits_of_a_call() -> list[Limit]:
    """The limits a call starting now runs under: the shared ones, and one of its own unless a command's allowance of
    unanswered time is among them (the innermost each_call scope's, else DEFAULT_S)."""
    shared = _shared()
    if any(not limit.wall for limit in shared):
        return shared
    each = next((limit for limit in reversed(list(_scopes)) if limit.each_call), None)
    return [*shared, Limit(DEFAULT_S, "api-timeout setting") if each is None else Limit(each.seconds, each.why)]


def _current() -> list[Limit]:
    limits: list[Limit] | None = getattr(_local, "limits", None)
    return _shared() if limits is None else limits


def _tightest(limits: list[Limit]) -> Limit | None:
    return min(limits, key=Limit.left, default=None)


def left() -> float:
    """Seconds left to this thread's call, or to the command where no call is being made (inf: no bound)."""
    tightest = _tightest(_current())
    return float("inf") if tightest is None else tightest.left()


def spend(seconds: float) -> None:
    """Count `seconds` of unanswered waiting against the current limits (a reader with its own loop: prices)."""
    with _lock:
        for limit in _current():
            limit.spent += seconds


def timeout(per_request: float, endpoint: str) -> float:
    """A request's timeout: its own, or what is left of the deadline if less; NoAnswer when nothing is left."""
    _local.endpoint = endpoint
    tightest = _tightest(_current())
    if tightest is not None and tightest.left() <= 0:
        raise NoAnswer(endpoint, tightest)
    return per_request if tightest is None else min(per_request, tightest.left())


def is_quota(exc: BaseException) -> bool:
    """A 429 that will not pass by waiting: a quota limit, not a per-minute rate limit."""
    reason = getattr(exc, "reason", None)
    if reason in ("RATE_LIMIT_EXCEEDED", "RATE_LIMIT_EXCEEDED_PER_USER"):
        return False
    message = str(getattr(exc, "message", exc)).lower()
    return "quota" in message and "per minute" not in message


def is_capacity(exc: BaseException) -> bool:
    """A 429 refusing a create for want of capacity in the zone (RESOURCE_EXHAUSTED naming it): waiting
    seconds does not bring capacity back, another zone or kind might."""
    return "capacity" in str(getattr(exc, "message", exc)).lower() and not is_quota(exc)


def is_transient(exc: BaseException) -> bool:
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    if isinstance(exc, api.TooManyRequests):
        return not is_quota(exc) and not is_capacity(exc)
    transient = (
        api.ServiceUnavailable,
        api.InternalServerError,
        api.BadGateway,
        api.GatewayTimeout,
        api.DeadlineExceeded,
        requests.ConnectionError,
        requests.Timeout,
        auth.TransportError,
        ConnectionError,  # http.client's, for the stdlib reader
        TimeoutError,
    )
    return isinstance(exc, transient)


def _answered(exc: BaseException) -> bool:
    """The endpoint replied (an HTTP error status), rather than leaving the request without a reply."""
    from google.api_core import exceptions as api

    return isinstance(exc, api.GoogleAPICallError)


def backoff(attempt: int) -> float:
    """Full jitter (AWS architecture blog): spreads retrying clients instead of syncing them."""
    return random.uniform(0, min(CAP_S, BASE_S * 2**attempt))


def call(fn: Callable[[], T], *, attempts: int = ATTEMPTS, sleep: Callable[[float], None] = time.sleep) -> T:
    """fn() until it succeeds or fails for a reason waiting cannot fix (the last error is raised), or until the
    deadline leaves no time for another attempt (NoAnswer, naming the endpoint fn's request last went to)."""
    outer, asked = getattr(_local, "limits", None), getattr(_local, "endpoint", None)
    limits = outer if outer is not None else _limits_of_a_call()
    _local.limits, _local.endpoint = limits, "a Google API"
    try:
        attempt = 0
        while True:
            began = time.monotonic()
            try:
                return fn()
            except NoAnswer:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise
                spend(time.monotonic() - began)
                pause, tightest = backoff(attempt), _tightest(limits)
                if tightest is not None and tightest.left() <= pause:
                    if _answered(exc):  # a 503 after a 503: what it said is the line, not silence
                        raise
                    raise NoAnswer(_local.endpoint, tightest) from exc
                if attempt == attempts - 1:
                    raise
            sleep(pause)
            spend(pause)
            attempt += 1
    finally:
        _local.limits, _local.endpoint = outer, asked

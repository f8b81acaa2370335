"""Retries for Google API calls: transient failures again with backoff and full jitter.

Our own loop rather than google-api-core's Retry: it counts attempts (a dead
endpoint should fail in seconds, not after a two-minute deadline) and it must
tell a rate limit (retry) from an exhausted quota (never retry) on a 429.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 8
BASE_S = 0.25
CAP_S = 8.0


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


def backoff(attempt: int) -> float:
    """Full jitter (AWS architecture blog): spreads retrying clients instead of syncing them."""
    return random.uniform(0, min(CAP_S, BASE_S * 2**attempt))


def call(fn: Callable[[], T], *, attempts: int = ATTEMPTS, sleep: Callable[[float], None] = time.sleep) -> T:
    """fn() until it succeeds or fails for a reason waiting cannot fix; the last error is raised."""
    for attempt in range(attempts - 1):
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            sleep(backoff(attempt))
    return fn()

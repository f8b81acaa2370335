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

A request's reply is read whole within that request's timeout and no larger than MAX_REPLY_BYTES (`reply_class`, the
response class of every connection tpuctl opens to Google: http.client's, requests' through `bounded`), so an
endpoint that answers a byte at a time, each just inside the socket's timeout, is cut at the deadline like a silent
one (`Cut`), and one that answers without end is cut at the cap (`TooLarge`). A List method's pages are followed
by `pages`, which stops an endpoint that pages forever or in a circle (`Endless`).
"""

from __future__ import annotations

import functools
import io
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # http.client costs a command that makes no request tens of ms: imported with the first connection
    import http.client
    import socket
    from urllib.parse import SplitResult

    import requests

S = TypeVar("S", bound="requests.Session")

T = TypeVar("T")

ATTEMPTS = 8
BASE_S = 0.25
CAP_S = 8.0
REQUEST_S = 60.0  # one request's own timeout, when more than that is left
DEFAULT_S = 60.0  # the api-timeout setting's default: what one request could always wait, now a whole command's
# The largest replies Google's APIs send tpuctl are pages of lists: a Billing Catalog page holds 5,000 SKUs, about
# 4 MiB in the catalogue's shape (prices.py); a TPU VM is about 1 KB of JSON plus a networkEndpoint of under 150 bytes
# a host, so even a slice of a whole v5p pod (8,960 chips, 4 a host: cloud.google.com/tpu/docs/v5p) is about 300 KB,
# and a page of a zone's nodes holds a hundred such in 32 MiB. A reply past it is an endpoint gone wrong: it is not
# read further (json would hold several times its size in memory).
MAX_REPLY_BYTES = 32 << 20
# Google's List methods choose their own page size when asked for none, and may return fewer items, even none, with a
# token (AIP-158), so no count of items bounds a listing's pages. A real listing of a project's TPU zones, or a zone's
# types, runtime versions, TPU VMs or queued resources takes a few pages; one still paging after 500 pages forever.
MAX_PAGES = 500


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


class Cut(TimeoutError):
    """A reply still arriving when its request's time was up (an endpoint that trickles): cut there, as a silent one
    is, and retried as a timeout within the command's deadline."""


class Unusable(Exception):
    """A reply no working endpoint gives: one line (api_errors.explain), never asked for again."""


class TooLarge(Unusable):
    def __init__(self, endpoint: str, cap: int) -> None:
        super().__init__(f"{endpoint} answered with more than {cap >> 20} MiB (more than any Google API reply; not read further)")


class Endless(Unusable):
    """A List method whose pages never end: past the cap, or a page token given twice (the same pages again)."""


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


class _Within(io.RawIOBase):
    """A socket's bytes, each read waiting no longer than what is left until `until`, and no more than `cap` of them."""

    def __init__(self, sock: socket.socket, until: float, cap: int) -> None:
        super().__init__()
        self._raw = sock.makefile("rb", buffering=0)  # keeps the socket open for the reply, as http.client's own file does
        self._sock, self._until, self._cap = sock, until, cap
        self._per_read = sock.gettimeout()
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._until - time.monotonic()
        if left <= 0:
            raise Cut("the reply had not arrived in full when the request's time was up")
        self._sock.settimeout(left if self._per_read is None else min(left, self._per_read))
        try:
            got = self._raw.readinto(buffer)
        finally:
            self._sock.settimeout(self._per_read)  # a kept-alive connection's next request starts with its own
        self._read += got or 0
        if self._read > self._cap:
            raise TooLarge(getattr(_local, "endpoint", None) or "a Google API", self._cap)
        return got

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Socket:
    """What http.client.HTTPResponse takes from a socket (its file), read through _Within."""

    def __init__(self, sock: socket.socket, until: float | None, cap: int) -> None:
        self._sock, self._until, self._cap = sock, until, cap

    def makefile(self, mode: str) -> io.BufferedReader:
        budget = self._sock.gettimeout() or REQUEST_S
        return io.BufferedReader(_Within(self._sock, time.monotonic() + budget if self._until is None else self._until, self._cap))


@functools.cache
def reply_class() -> type[http.client.HTTPResponse]:
    """An http.client response read whole (status line, headers, body) by `until` and no larger than `cap` bytes;
    `until` defaults to the socket's timeout from now, which every request sets to what is left of its deadline
    (`timeout`): the request's time bounds the whole reply, not each read of it. The response class of every
    connection tpuctl opens to Google (`connection`; requests' through `bounded`)."""
    import http.client

    class Reply(http.client.HTTPResponse):
        def __init__(
            self, sock: socket.socket, debuglevel: int = 0, method: str | None = None, url: str | None = None, *, until: float | None = None,
            cap: int = MAX_REPLY_BYTES,
        ) -> None:  # fmt: skip
            super().__init__(_Socket(sock, until, cap), debuglevel, method, url)  # type: ignore[arg-type]  # it has makefile, all it reads

    return Reply


def connection(parts: SplitResult, seconds: float, *, until: float | None = None, cap: int = MAX_REPLY_BYTES) -> http.client.HTTPConnection:
    """An http.client connection to `parts`' host (https or http) whose requests wait `seconds` at most for a
    connection and each read, and whose replies are read as `reply_class` reads them."""
    import http.client

    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    opened = kind(parts.hostname or "", parts.port, timeout=seconds)
    opened.response_class = functools.partial(reply_class(), until=until, cap=cap)  # type: ignore[assignment,call-arg]  # called as the class is
    return opened


def pages(fetch: Callable[[str], Mapping[str, Any]], what: str, most: int = MAX_PAGES) -> Iterator[Mapping[str, Any]]:
    """Each page of a List method (AIP-158): fetch(page token, "" for the first) until a page names no nextPageToken.

    At most `most` pages; a token given twice asks for pages already read, so the listing would never end: both
    end it in Endless (`what` names the endpoint in its line). Each page's request runs under the command's deadline
    as any other does."""
    followed: set[str] = set()
    token = ""
    for _ in range(most):
        reply = fetch(token)
        yield reply
        token = str(reply.get("nextPageToken") or "")
        if not token:
            return
        if token in followed:
            raise Endless(f"{what} paged in a circle (a page token given twice)")
        followed.add(token)
    raise Endless(f"{what} was still paging after {most} pages")


def bounded(session: S) -> S:
    """`session`, its replies read as reply_class reads them: whole within the request's timeout and at most
    MAX_REPLY_BYTES. requests waits its timeout for each read, so a reply that trickles would not end otherwise.

    Every requests session tpuctl sends to Google goes through here (RestApi's, the token refresh's, google-cloud-tpu's
    REST transport's, the bucket read's), and an AuthorizedSession's own session for refreshing its token with it."""
    adapter = _adapter()
    for prefix in ("https://", "http://"):
        before = session.adapters.get(prefix)
        session.mount(prefix, adapter(max_retries=getattr(before, "max_retries", 0)))  # its connection retries kept (google-auth's: 3)
    inner = getattr(session, "_auth_request_session", None)  # google-auth's AuthorizedSession keeps it there (transport/requests.py)
    if inner is not None:
        bounded(inner)
    return session


@functools.cache
def _adapter() -> type[requests.adapters.HTTPAdapter]:
    """An HTTPAdapter whose connections (urllib3's, which read replies through http.client) build reply_class's responses."""
    import requests.adapters
    from urllib3 import connection as connections
    from urllib3 import connectionpool

    plain = type("HTTPConnection", (connections.HTTPConnection,), {"response_class": reply_class()})
    secure = type("HTTPSConnection", (connections.HTTPSConnection,), {"response_class": reply_class()})
    pools = {
        "http": type("HTTPConnectionPool", (connectionpool.HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("HTTPSConnectionPool", (connectionpool.HTTPSConnectionPool,), {"ConnectionCls": secure}),
    }

    class Adapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            if not proxy.lower().startswith("socks"):  # a SOCKS proxy's pools are its own (urllib3.contrib.socks)
                manager.pool_classes_by_scheme = pools
            return manager

    return Adapter

"""Fault knobs of the stand-in: the failures real Google APIs produce, made repeatable.

Everything random is drawn from one seeded ``random.Random`` so a test that
sees a failure sees the same failure on every run (given the same request
order).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

# Transient failures cycle through these HTTP statuses, as Google fronts produce them.
TRANSIENT_CYCLE: tuple[int, ...] = (503, 429, 500)
# The ways a create (or a start) meets no capacity, as the TPU API reports them (issue 36; the texts as
# SkyPilot's GCP failover handler quotes them, sky/backends/*: codes 3, 8 and 9 of the create operation):
#   capacity  the operation ends with code 8 "There is no more capacity in the zone ..."; the node is gone
#   reserved  code 9 "Insufficient reserved capacity ..."; the node is left CREATING
#   preempted code 3 "... not supported while in state PREEMPTED" (a spot node); the node is left PREEMPTED
#   internal  code 13 "an internal error has occurred" (opaque); the node is left CREATING
#   quota     code 8 carrying a quota refusal; the node is gone
#   stuck     the node stays CREATING, its operation never ends
#   refused   the create call itself is refused: 429 RESOURCE_EXHAUSTED naming capacity; nothing is made
STOCKOUT_KINDS = ("capacity", "reserved", "preempted", "internal", "quota", "stuck", "refused")


@dataclass
class Decision:
    """What to do with one API request: fail it with `status`, before or after it takes effect."""

    status: int
    after_effect: bool


@dataclass
class Faults:
    """Fault settings; tests assign the attributes directly or call the helpers."""

    seed: int = 0
    latency_s: float = 0.0
    transient_rate: float = 0.0
    capacity_zones: set[str] = field(default_factory=set)
    quota_zones: set[str] = field(default_factory=set)
    denied_permissions: set[str] = field(default_factory=set)
    disabled_apis: set[str] = field(default_factory=set)
    stockouts: dict[str, list[str]] = field(default_factory=dict)  # zone -> kinds the next creates/starts there meet
    # A DELETE answered with its operation already done and a `response` without "@type" (an Any google-cloud-tpu
    # cannot turn into the Empty it expects: TypeError after the DELETE went out), the deletion going on meanwhile.
    untyped_delete_replies: bool = False
    # Replies to requests whose "METHOD /path" starts with one of these are sent a byte at a time (status line, headers,
    # body), `trickle_every_s` apart: an endpoint that answers, each byte just inside a client's per-read timeout.
    trickled: tuple[str, ...] = ()
    trickle_every_s: float = 0.5
    # Replies to these requests carry `padding` bytes of JSON whitespace before their body: still the API's JSON, but
    # larger than any reply a Google API sends.
    padded: tuple[str, ...] = ()
    padding: int = 0
    # List replies (GET, a path ending in one of these) always name a nextPageToken: a new one each page, or
    # (`same_page_token`) the first one again; after `endless_for` pages (None: never) the listing ends as usual.
    endless: tuple[str, ...] = ()
    same_page_token: bool = False
    endless_for: int | None = None

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._eid_rng = random.Random(self.seed + 1)  # separate, so error ids never shift the fault sequence
        self._lock = threading.Lock()
        self._burst: list[int] = []
        self._burst_after: list[int] = []
        self._cycle = 0
        self._failing_operations: list[str] = []
        self._pages = 0  # list replies an endless listing has answered

    def burst(self, n: int, status: int = 503) -> None:
        """The next n API requests fail with `status`, before they take effect."""
        with self._lock:
            self._burst.extend([status] * n)

    def burst_after_effect(self, n: int, status: int = 503) -> None:
        """The next n API requests take effect, then fail with `status`: a reply lost after the work was done."""
        with self._lock:
            self._burst_after.extend([status] * n)

    def fail_next_operations(self, n: int, message: str = "Internal error encountered.") -> None:
        """The next n long-running operations started finish with error code 13 (INTERNAL) and `message`."""
        with self._lock:
            self._failing_operations.extend([message] * n)

    def stockout(self, zone: str, kind: str, times: int = 1) -> None:
        """The next `times` creates (or starts) in `zone` stock out as `kind` (STOCKOUT_KINDS) does."""
        assert kind in STOCKOUT_KINDS, kind
        with self._lock:
            self.stockouts.setdefault(zone, []).extend([kind] * times)

    def take_stockout(self, zone: str) -> str | None:
        with self._lock:
            kinds = self.stockouts.get(zone)
            return kinds.pop(0) if kinds else None

    def decide(self) -> Decision | None:
        """Whether this API request fails; bursts first, then the seeded transient rate.

        Half of the transient failures (by a seeded draw) are answered only
        after the request took effect: the reply is lost but the side effect
        happened, which is what makes blind retries of creates collide.
        """
        with self._lock:
            if self._burst:
                return Decision(self._burst.pop(0), after_effect=False)
            if self._burst_after:
                return Decision(self._burst_after.pop(0), after_effect=True)
            if self.transient_rate <= 0 or self._rng.random() >= self.transient_rate:
                return None
            status = TRANSIENT_CYCLE[self._cycle % len(TRANSIENT_CYCLE)]
            self._cycle += 1
            return Decision(status, after_effect=self._rng.random() < 0.5)

    def trickles(self, method: str, path: str) -> bool:
        return bool(self.trickled) and f"{method} {path}".startswith(self.trickled)

    def padding_of(self, method: str, path: str) -> int:
        return self.padding if self.padded and f"{method} {path}".startswith(self.padded) else 0

    def endless_start(self, method: str, path: str) -> int | None:
        """Where the nextPageToken an endless listing adds to this reply starts, if it is one (a List method: a GET,
        or Logging's POST entries:list): past every item, so an empty page, and new each page unless `same_page_token`."""
        if not self.endless or not path.endswith(self.endless) or (method != "GET" and not path.endswith(":list")):
            return None
        with self._lock:
            self._pages += 1
            if self.endless_for is not None and self._pages > self.endless_for:
                return None
            return 10**6 if self.same_page_token else 10**6 + self._pages

    def take_operation_failure(self) -> str | None:
        """The message for a long-running operation about to start, if it is to fail."""
        with self._lock:
            return self._failing_operations.pop(0) if self._failing_operations else None

    def eid(self) -> str:
        """An error id like those Google appends to capacity errors ("[EID: 0x...]")."""
        with self._lock:
            return f"0x{self._eid_rng.getrandbits(64):016x}"


class FirstReadsTogether:
    """A stand-in's request hook (`GoogleStandin.on_request`) that holds the first `count` requests `first` picks until
    all have arrived (60 s at most), so that writers started as separate processes, seconds apart on a loaded machine,
    read one etag and their read-modify-writes really overlap. Later requests pass at once."""

    def __init__(self, count: int, first: Callable[[str, str], bool]) -> None:
        self.count = count
        self.first = first
        self.held: list[str] = []
        self.barrier = threading.Barrier(count, timeout=60)
        self._lock = threading.Lock()

    def __call__(self, method: str, path: str) -> None:
        with self._lock:
            hold = len(self.held) < self.count and self.first(method, path)
            if hold:
                self.held.append(path)
        if hold:
            with contextlib.suppress(threading.BrokenBarrierError):
                self.barrier.wait()

    @property
    def all_held(self) -> bool:
        return len(self.held) == self.count and not self.barrier.broken

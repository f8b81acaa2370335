"""A hunt for capacity: one create after another over ranked (type, capacity kind, zone) candidates until one holds.

Each try is one `lifecycle.ensure`, which already deletes what a stocked-out try left and takes back its saved
spec; the hunt only decides what comes next. A stockout (CapacityError, of any Stockout kind) is remembered
(tpu/stockouts.py) and the next candidate is tried; a quota refusal (QuotaError) leaves out the candidates on the
same quota in that zone, or in its region when the region's quota is the one refused, and the hunt goes on;
anything else — a permission, an invalid argument — would fail the same way in every zone, so it stops the hunt
at once. The per-try deadline is create-deadline, capped by what is left of the hunt's own bound, so
`--hunt-timeout` holds even while a zone leaves a create sitting in CREATING. Kept free of the CLI (NodeApi, clock
and sleep injected) so babysit's recovery policy can hunt the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tpuctl.cloud.nodes import lifecycle, nodespec
from tpuctl.cloud.nodes.creating import CREATE_DEADLINE_S, Accepted, Naming, Terms
from tpuctl.cloud.nodes.lifecycle import Ensured, Progress
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import NodeApi
from tpuctl.inputs.errors import FAILED, CapacityError, QuotaError, Stockout, TpuctlError
from tpuctl.settings.cloud import default_runtime
from tpuctl.tpu import stockouts
from tpuctl.tpu.accelerators import shape_of
from tpuctl.tpu.capacity import Capacity


@dataclass(frozen=True)
class Candidate:
    """One try: a type, a capacity kind and a zone, with the slice's list price there (None: no SKU prices it)."""

    accelerator_type: str
    capacity: Capacity
    zone: str
    usd_per_hour: float | None = None

    def __str__(self) -> str:
        return f"{self.zone} {self.accelerator_type} {self.capacity}"


@dataclass(frozen=True)
class Tried:
    """A candidate that did not hold, and why (the stockout's short reason)."""

    candidate: Candidate
    why: str
    seconds: float


@dataclass(frozen=True)
class Hunted:
    ensured: Ensured
    candidate: Candidate
    tried: list[Tried]  # the candidates before it, in order, none of which left anything behind
    changed: list[str] = field(default_factory=list)  # what the fallback type changed from the first type asked for


class HuntStopped(TpuctlError):
    """The hunt ended without a node: every candidate stocked out, its time ran out, it was interrupted, or a try
    failed in a way no other zone would cure. `tried` is what the summary and `--json` report."""

    def __init__(self, message: str, *, tried: list[Tried], hint: str | None = None, exit_code: int = FAILED) -> None:
        super().__init__(message, hint=hint, exit_code=exit_code)
        self.tried = tried


Say = Callable[[str], None]


@dataclass(frozen=True)
class Chosen:
    """The service accepted this candidate's create (its spec): the hunt waits for it to be READY now."""

    candidate: Candidate
    spec: NodeSpec


Heard = Callable[[Naming | Chosen], None]


@dataclass(frozen=True)
class HuntTerms:
    """How a hunt goes: each try's terms (creating.Terms: the create deadline, the runtime the user named, whether to
    wait) and the hunt's own bound (`timeout_s`, --hunt-timeout; `spent_s`: what the listing of the candidates already
    took of it). `clock` and `sleep` are injected so tests and babysit's recovery hunt the same way."""

    runtime_given: bool
    create_deadline_s: float = CREATE_DEADLINE_S
    timeout_s: float | None = None
    spent_s: float = 0.0
    wait: bool = True
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    images: Mapping[str, str] = field(default_factory=dict)  # a type's image where the caller chose one (launch --new-tpu)


def _deaf(event: Naming | Chosen) -> None:
    """A sink for a hunt whose caller needs to hear nothing."""


def spec_for(base: NodeSpec, candidate: Candidate, runtime_given: bool, images: Mapping[str, str] | None = None) -> NodeSpec:
    """The spec of one try: the user's, in the candidate's zone, type and kind; a type's own runtime image unless
    the user named one (a v6e fallback needs v6e's image, not the v5e one the first type would have had): the one
    `images` chose for it, else tpuctl's default."""
    chosen = (images or {}).get(candidate.accelerator_type)
    runtime = base.runtime_version if runtime_given else chosen or default_runtime(candidate.accelerator_type)
    if runtime is None:
        raise TpuctlError(
            f"tpuctl knows no TensorFlow runtime image for {candidate.accelerator_type}",
            hint="name one with --runtime-version (`tpuctl runtimes` lists a zone's)",
        )
    spec = replace(base.with_capacity(candidate.capacity), zone=candidate.zone, accelerator_type=candidate.accelerator_type)
    return replace(spec, config_type=None, topology=None, runtime_version=runtime)


def changes(first: NodeSpec, spec: NodeSpec) -> list[str]:
    """What a fallback type brings with it, against the first type asked for: its runtime image and host count."""
    said = []
    if spec.accelerator_type != first.accelerator_type:
        said.append(f"type {first.accelerator_type} -> {spec.accelerator_type}")
        before, after = shape_of(str(first.accelerator_type)).hosts, shape_of(str(spec.accelerator_type)).hosts
        if before != after:
            said.append(f"hosts {before} -> {after}")
    if spec.runtime_version != first.runtime_version:
        said.append(f"runtime {first.runtime_version} -> {spec.runtime_version}")
    return said


def _landed_first(api: NodeApi, base: NodeSpec, candidates: list[Candidate]) -> list[Candidate]:
    """A rerun finds the node an earlier hunt made: the candidate matching its saved spec goes first, so the
    node is reused rather than a second one created in another zone. A live node of that name that no candidate
    matches stops the hunt as a plain create stops on a node of another spec: a second node of the same name
    elsewhere is no rerun of the first."""
    for zone in nodespec.saved_zones(base.project, base.name):
        saved = nodespec.load(base.project, zone, base.name)
        if saved is None or api.get_node(zone, base.name) is None:
            continue
        mine = [c for c in candidates if (c.zone, c.accelerator_type, c.capacity.kind) == (zone, saved.accelerator_type, saved.capacity())]
        if not mine:
            raise TpuctlError(
                f"node {base.name} already exists in zone {zone} with a different spec: "
                f"{saved.accelerator()} {saved.capacity()} in {zone} is none of this hunt's candidates",
                hint="delete it first (`tpuctl delete`) or choose another name",
                exit_code=FAILED,
            )
        return mine[:1] + [c for c in candidates if c not in mine[:1]]
    return candidates


def hunt(
    api: NodeApi, base: NodeSpec, candidates: Sequence[Candidate], progress: Progress, terms: HuntTerms, *, say: Say, heard: Heard = _deaf
) -> Hunted:
    """Try `candidates` in order (`tpu.offers.rank`'s order) until one holds; see the module's docstring. `heard` hears
    each try's Naming before its create is sent, and Chosen once the service accepted one."""
    runtime_given, clock, timeout_s, create_deadline_s = terms.runtime_given, terms.clock, terms.timeout_s, terms.create_deadline_s
    if not candidates:
        raise TpuctlError("no candidate to try: no zone offers these types for these capacity kinds")
    specs = {c: spec_for(base, c, runtime_given, terms.images) for c in candidates}  # every type's image checked before any create
    first = specs[candidates[0]]
    order = _landed_first(api, base, list(candidates))
    started = clock() - terms.spent_s
    tried: list[Tried] = []
    for index, candidate in enumerate(order):
        left = None if timeout_s is None else timeout_s - (clock() - started)
        if left is not None and left <= 0:
            raise HuntStopped(f"no capacity found within --hunt-timeout {timeout_s:g} s; {_summary(tried)}", tried=tried)
        spec = specs[candidate]
        deadline = create_deadline_s if left is None else min(create_deadline_s, left)
        # A request the user queued (--queued: one candidate) waits as its --valid-until lets it, within the hunt's bound.
        queued_deadline = left if spec.queued else deadline
        began = clock()
        try:
            one = Terms(terms.wait, runtime_given, deadline, queued_deadline, terms.sleep)
            ensured = lifecycle.attempt(api, spec, progress, one, _telling(heard, candidate))
        except CapacityError as stockout:
            bound = queued_deadline if spec.queues() else deadline
            cut_short = stockout.kind in (Stockout.STUCK, Stockout.QUEUED) and left is not None and bound is not None and bound >= left
            # A try the hunt's own bound ended is no stockout, but the zone took the whole budget: remembered as slow,
            # so the next hunt tries it last rather than spending its budget there again.
            why = stockouts.SLOW if cut_short else stockout.kind.name.lower()
            stockouts.remember(spec.project, spec.zone, str(spec.accelerator_type), spec.capacity(), why)
            tried.append(Tried(candidate, f"no capacity ({stockout.kind.value})", clock() - began))
            following = order[index + 1] if index + 1 < len(order) else None
            if cut_short:
                say(f"{candidate}: {stockout.kind.value} when --hunt-timeout ran out; remembered as slow, a rerun tries it last")
            else:
                say(f"{candidate}: no capacity ({stockout.kind.value}), next: {following.zone if following else 'none left'}")
            continue
        except QuotaError as refused:
            covered = _same_quota(candidate, refused, order[index + 1 :])
            rest = [c for c in order[index + 1 :] if c not in covered]
            if not rest:  # nothing left that this refusal does not cover: it ends the hunt, as a create in one zone ends
                if not tried:
                    raise
                raise HuntStopped(f"{refused.message}; {_summary(tried)}", tried=tried, hint=refused.hint, exit_code=refused.exit_code) from None
            # Not a stockout (nothing to remember): the quota's zone, or its region, is left out and the hunt goes on.
            where = f"region {refused.region}" if refused.region else f"zone {candidate.zone}"
            quota = f"{refused.quota_id} in {where}" if refused.quota_id else f"quota in {where}"
            tried.append(Tried(candidate, f"quota refused ({quota})", clock() - began))
            tried += [Tried(c, f"skipped: {quota} refused {candidate.zone}", 0.0) for c in covered]
            say(f"{candidate}: quota refused ({quota}); leaving out {where} for this quota, next: {rest[0].zone}")
            order[index + 1 :] = rest  # the candidates it covers are not tried (the loop goes on over the rest)
            continue
        except TpuctlError as failed:
            if not tried and not isinstance(failed, (HuntStopped, lifecycle.Interrupted)):
                raise  # the first try's own error, as a create in one zone gives it
            raise HuntStopped(f"{failed.message}; {_summary(tried)}", tried=tried, hint=failed.hint, exit_code=failed.exit_code) from None
        return Hunted(ensured, candidate, tried, changes(first, ensured.spec))
    raise HuntStopped(f"no capacity in any of {len(order)} candidates; {_summary(tried)}", tried=tried,
                      hint="`tpuctl offers` shows the order and what stocked out; try later, more zones, other kinds or --queued")  # fmt: skip


def _telling(heard: Heard, candidate: Candidate) -> Callable[[Naming | Accepted], None]:
    """One try's create events as the hunt tells them: its Naming as it is, its Accepted as the candidate Chosen."""

    def told(event: Naming | Accepted) -> None:
        heard(Chosen(candidate, event.spec) if isinstance(event, Accepted) else event)

    return told


def _same_quota(refused_at: Candidate, refused: QuotaError, later: Sequence[Candidate]) -> list[Candidate]:
    """The later candidates a quota refusal covers: those drawing on the same quota (tpuctl/tpu/quota_ids.py: type's
    generation, v5e serving or training, capacity kind's quota) in the same zone, or anywhere in the refused region."""
    from tpuctl.tpu import quota_ids
    from tpuctl.tpu.offers import region_of

    mine = quota_ids.family(shape_of(refused_at.accelerator_type), refused_at.capacity.kind)
    return [
        c
        for c in later
        if (region_of(c.zone) == refused.region if refused.region else c.zone == refused_at.zone)
        and quota_ids.family(shape_of(c.accelerator_type), c.capacity.kind) == mine
    ]


def _summary(tried: list[Tried]) -> str:
    if not tried:
        return "no other candidate was tried"
    return "tried before: " + ", ".join(f"{t.candidate} ({t.why})" for t in tried)

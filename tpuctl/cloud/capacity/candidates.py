"""A hunt's candidates: the offers `gather()` finds, in `rank()`'s order, per type and capacity kind, less the zones
whose quota is known too small for the slice. A reservation is never judged by on-demand (or any) quota: it carries
its own capacity, so its candidates are every zone that offers the type, ranked without quota.

What `tpuctl create --zones`, babysit's recovery and `launch --new-tpu` hunt through is one list built here, so what
`tpuctl offers` shows is what each of them tries (docs/capacity.md, How tpuctl chooses). Below the CLI: the launch
core builds the same list for a run's VM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.settings.cloud import Settings
from tpuctl.tpu.capacity import FLEX_START, ON_DEMAND, PREEMPTIBLE, RESERVED, SPOT, Capacity, reservation_zone
from tpuctl.tpu.offers import QuotaBound

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.gather import Found
    from tpuctl.cloud.capacity.hunt import Candidate
    from tpuctl.cloud.nodes.tpu import TpuApi


@dataclass(frozen=True)
class Plan:
    types: list[str]
    capacities: list[Capacity]
    zones: list[str] | None  # None: every zone the TPU API lists
    resolved: Settings
    timeout_s: float | None


def parse_types(text: str) -> list[str]:
    """`TYPE[,TYPE2...]` (offers, a hunting create, `launch --new-tpu`): each a type tpuctl's table knows, repeats dropped."""
    from tpuctl.tpu.accelerators import shape_of

    names = list(dict.fromkeys(part.strip() for part in text.split(",")))
    for name in names:
        shape_of(name)  # a malformed or unknown type: its one-line error, exit 2
    return names


def offers(api: TpuApi, hunt_plan: Plan, note: Callable[[str], None]) -> Found:
    """gather()'s ranked offers, as `tpuctl offers --model-dir` ranks them for the model-dir setting's bucket; a bucket
    that cannot be read ranks nobody (`note` says why) rather than stopping a create that does not need it. `note`
    also says what gather left out, and when the bucket put a dearer zone first."""
    from tpuctl.cloud.capacity.gather import gather

    resolved, kinds = hunt_plan.resolved, priced(hunt_plan.capacities)
    bucket = _bucket(resolved.get("model-dir"))
    try:
        found = gather(api, resolved, hunt_plan.types, kinds, hunt_plan.zones, bucket, note)
    except TpuctlError as err:
        if bucket is None:
            raise
        note(f"note: ranking without the distance to gs://{bucket}: {err.message}")
        found = gather(api, resolved, hunt_plan.types, kinds, hunt_plan.zones, None, note)
    for line in found.notes:
        note(f"note: {line}")
    _say_dearer(found, hunt_plan, note)
    return found


def _say_dearer(found: Found, hunt_plan: Plan, note: Callable[[str], None]) -> None:
    """One line when the bucket's distance puts a dearer zone before a cheaper one for the first type and kind."""
    from tpuctl.tpu.offers import dearer_for_bucket

    first = hunt_plan.capacities[0].kind if hunt_plan.capacities else None
    if first not in (ON_DEMAND, SPOT, PREEMPTIBLE):  # reserved and flex-start have no list price to compare
        return
    kind = priced(hunt_plan.capacities[:1])[0]
    dearer = dearer_for_bucket([o for o in found.offers if (o.accelerator_type, o.kind) == (hunt_plan.types[0], kind)])
    if dearer is None:
        return
    top, cheapest = dearer
    note(
        f"note: {top.zone} goes first at ${top.usd_per_hour:,.2f}/h, dearer than the cheapest, {cheapest.zone} at ${cheapest.usd_per_hour:,.2f}/h: "
        f"it is nearer the model dir's bucket in {found.bucket_location} ({top.distance}; {cheapest.zone}: {cheapest.distance})"
    )


def priced(capacities: list[Capacity]) -> list[str]:
    """The kinds offers ranks and prices (on-demand, spot) that stand for the kinds asked, by the quota each draws on:
    preemptible and flex-start draw on the preemptible quota (Cloud TPU docs: quota; request-using-flex-start), so they are
    read as spot; a reservation is ranked as on-demand, without its quota (candidates). Reserved and flex-start have no
    list price."""
    return list(dict.fromkeys(SPOT if c.kind in (SPOT, PREEMPTIBLE, FLEX_START) else ON_DEMAND for c in capacities))


@dataclass(frozen=True)
class Skipped:
    """A candidate left out of the hunt: its zone's or its region's quota is known too small for the slice (its create
    could only be refused), so it is never tried; unknown quota stays a candidate."""

    candidate: Candidate
    headroom: int
    chips: int
    quota: QuotaBound | None  # the quota that is short (tpuctl/tpu/quota_ids.py)

    @property
    def why(self) -> str:
        if self.quota is not None and self.quota.regional:
            return f"skipped: region {self.quota.location}'s quota holds {self.headroom} of {self.chips} chips ({self.quota.quota_id})"
        return f"skipped: quota holds {self.headroom} of {self.chips} chips"


def candidates(found: Found, hunt_plan: Plan) -> tuple[list[Candidate], list[Skipped]]:
    """(type, kind, zone) in the user's order of types, then of kinds, then the zones as offers ranks them, each by
    the stockouts remembered for its own kind (a reservation's stockout is not on-demand's); and the skipped ones."""
    from tpuctl.cloud.capacity.hunt import Candidate
    from tpuctl.tpu import offers as ranking
    from tpuctl.tpu import stockouts

    found_candidates: list[Candidate] = []
    skipped: list[Skipped] = []
    for name in hunt_plan.types:
        for capacity in hunt_plan.capacities:
            kind = priced([capacity])[0]
            listed = capacity.kind in (ON_DEMAND, SPOT, PREEMPTIBLE)  # reserved and flex-start: no list price
            only = reservation_zone(capacity.reservation)  # a full reservation name: its own zone alone
            own = [
                replace(o, stocked_out_at=stockouts.recent(found.project, o.zone, name, capacity.kind))
                for o in found.offers
                if o.accelerator_type == name and only in (None, o.zone)
            ]
            if capacity.kind == RESERVED:  # its own capacity: the on-demand quota read for its offers neither ranks nor skips it
                own = [replace(o, headroom=None, quota=None) for o in own]
            for offer in ranking.rank(own, [name], [kind]):
                candidate = Candidate(name, capacity, offer.zone, offer.usd_per_hour if listed else None)
                if offer.quota_fits is False and offer.headroom is not None:
                    skipped.append(Skipped(candidate, offer.headroom, offer.chips, offer.quota))
                else:
                    found_candidates.append(candidate)
    return found_candidates, skipped


def all_short(skipped: list[Skipped]) -> TpuctlError:
    """Every candidate skipped for quota: one line naming each quota and the zones it is short in."""
    by_quota: dict[tuple[str, str | None], list[str]] = {}
    for s in skipped:
        region = s.quota.location if s.quota and s.quota.regional else None
        by_quota.setdefault((s.quota.quota_id if s.quota else "quota", region), []).append(f"{s.candidate.zone} ({s.headroom} of {s.chips} chips)")
    said = "; ".join(f"{quota} in {f'region {region}: ' if region else ''}{', '.join(dict.fromkeys(zones))}" for (quota, region), zones in by_quota.items())
    return TpuctlError(
        f"no candidate zone has quota for the slice: {said}",
        hint="request more quota (console: IAM & Admin > Quotas, service tpu.googleapis.com), or hunt over other zones, kinds or types",
        exit_code=FAILED,
    )


def ranked(api: TpuApi, hunt_plan: Plan, note: Callable[[str], None]) -> list[Candidate]:
    """The plan's candidates, best first: what `create --zones` tries, and what babysit hunts through once a lost
    node's own zone has stocked out (tpuctl/cloud/capacity/recovery.py)."""
    return candidates(offers(api, hunt_plan, note), hunt_plan)[0]


def _bucket(model_dir: str | None) -> str | None:
    if not model_dir:
        return None
    from tpuctl.cloud.auth.iam import bucket_of

    return bucket_of(model_dir)

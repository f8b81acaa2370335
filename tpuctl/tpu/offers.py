"""Offers of a TPU type: (zone, capacity kind) pairs, and the one order a hunt tries them in.

Pure (no I/O): the facts are gathered by tpuctl/cloud/capacity/gather.py, and `rank` is what
`tpuctl offers` prints and what a create that hunts across zones will try, so both agree.
The order puts first what is most likely to succeed and cheapest to run: a zone whose quota
cannot hold the slice fails at once (code 8 names quota), a zone that stocked out lately most
likely still has none, data read across an ocean costs egress and time, and among the rest
the list price decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tpuctl.tpu.capacity import ON_DEMAND, SPOT

KINDS = (ON_DEMAND, SPOT)  # the kinds an offer is priced and ranked for
SAME_REGION, SAME_CONTINENT, ELSEWHERE = "same region", "same continent", "elsewhere"
_DISTANCE_ORDER = {SAME_REGION: 0, SAME_CONTINENT: 1, ELSEWHERE: 2, None: 0}  # no bucket: distance ranks nobody

SORT_LINE = (
    "sorted by: your order of types, then of capacity kinds; within each, zones short of quota last and recent "
    "stockouts just before them; among the rest, quota known to hold the slice before unknown quota, then the "
    "bucket's region, its continent, elsewhere, and within each the cheapest list price first"
)

# A region's continent, from the first word of its name (https://cloud.google.com/about/locations):
# us-* and northamerica-* are North America, southamerica-* South America, and so on.
_CONTINENT_OF_PREFIX = {
    "us": "north-america",
    "northamerica": "north-america",
    "southamerica": "south-america",
    "europe": "europe",
    "asia": "asia",
    "australia": "oceania",
    "me": "middle-east",
    "africa": "africa",
}
# Cloud Storage's multi-regions and predefined dual-regions (https://cloud.google.com/storage/docs/locations):
# their data lives in several regions of one continent.
_CONTINENT_OF_BUCKET_AREA = {"US": "north-america", "EU": "europe", "ASIA": "asia", "NAM4": "north-america", "EUR4": "europe", "ASIA1": "asia"}


@dataclass(frozen=True)
class QuotaBound:
    """The quota an offer's headroom is read from: its id (tpuctl/tpu/quota_ids.py) and where it counts, the zone or
    the zone's region (a create needs room in both; the one with less room bounds it)."""

    quota_id: str
    location: str
    regional: bool

    def __str__(self) -> str:
        return f"{self.quota_id} in {'region' if self.regional else 'zone'} {self.location}"


@dataclass(frozen=True)
class Offer:
    """One (type, zone, capacity kind) that the TPU API says the zone offers, with what tpuctl knows of it."""

    accelerator_type: str
    zone: str
    kind: str  # ON_DEMAND or SPOT
    chips: int
    usd_per_hour: float | None  # the slice's list price; None: no SKU prices it
    headroom: int | None  # chips of quota left for this kind in this zone; None: the quota could not be read
    distance: str | None  # SAME_REGION / SAME_CONTINENT / ELSEWHERE from the model dir's bucket; None: no bucket
    stocked_out_at: float | None  # when it last stocked out (epoch seconds), None when not lately
    quota: QuotaBound | None = None  # the quota the headroom is read from; None when it is unknown

    @property
    def region(self) -> str:
        return region_of(self.zone)

    @property
    def quota_fits(self) -> bool | None:
        """Whether the quota left holds the slice; None when unknown (never guessed)."""
        return None if self.headroom is None else self.headroom >= self.chips


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def continent_of(region: str) -> str | None:
    return _CONTINENT_OF_PREFIX.get(region.split("-", 1)[0].lower())


def distance(zone: str, bucket_location: str | None) -> str | None:
    """How far a zone is from a bucket whose `location` is a region, dual-region or multi-region.

    A dual- or multi-region bucket keeps its data in several regions, so no zone is in its
    region: at best it is on the same continent (reads stay off the ocean, egress within
    the multi-region's continent is the cheaper kind). An unknown location is not guessed:
    None, as for no bucket."""
    if not bucket_location:
        return None
    region = region_of(zone)
    location = bucket_location.lower()
    if location == region:
        return SAME_REGION
    theirs = _CONTINENT_OF_BUCKET_AREA.get(bucket_location.upper()) or (continent_of(location) if "-" in location else None)
    if theirs is None:
        return None
    return SAME_CONTINENT if theirs == continent_of(region) else ELSEWHERE


def rank(offers: Sequence[Offer], types: Sequence[str], kinds: Sequence[str] = KINDS) -> list[Offer]:
    """`offers` best first, as SORT_LINE says: the order `tpuctl offers` prints and a hunt tries.

    Types and kinds not in `types` / `kinds` are left out: they were not asked for."""

    def key(offer: Offer) -> tuple[int, int, bool, bool, bool, int, bool, float, str]:
        fits = offer.quota_fits
        return (
            types.index(offer.accelerator_type),
            kinds.index(offer.kind),
            fits is False,
            offer.stocked_out_at is not None,
            fits is None,
            _DISTANCE_ORDER[offer.distance],
            offer.usd_per_hour is None,
            offer.usd_per_hour or 0.0,
            offer.zone,
        )

    return sorted((o for o in offers if o.accelerator_type in types and o.kind in kinds), key=key)


def dearer_for_bucket(ranked: Sequence[Offer]) -> tuple[Offer, Offer] | None:
    """(the first offer, the cheapest one) when the bucket's distance alone put a dearer zone first: among the
    offers of the first offer's type and kind that rank alike up to the distance (quota and stockouts), a cheaper
    one lies farther from the bucket. None when price and distance agree, or either price is unknown."""
    if not ranked:
        return None
    top = ranked[0]

    def tier(offer: Offer) -> tuple[str, str, bool, bool, bool]:
        fits = offer.quota_fits
        return (offer.accelerator_type, offer.kind, fits is False, offer.stocked_out_at is not None, fits is None)

    alike = [o for o in ranked if tier(o) == tier(top) and o.usd_per_hour is not None]
    cheapest = min(alike, key=lambda o: o.usd_per_hour or 0.0, default=None)
    if top.usd_per_hour is None or cheapest is None or cheapest.usd_per_hour is None or cheapest.usd_per_hour >= top.usd_per_hour:
        return None
    return (top, cheapest) if _DISTANCE_ORDER[top.distance] < _DISTANCE_ORDER[cheapest.distance] else None

"""The offers of TPU types across zones, with price, quota, bucket distance and stockout memory.

Which zones offer a type comes from the TPU API alone (projects.locations.list, then
locations.acceleratorTypes.list per zone, all zones at once): the Billing Catalog prices
regions that have no such hardware, so a price is never evidence of an offer. An enabled
zone sometimes answers an empty list; it is asked once more, and a zone that answers empty
twice is left out with a line rather than refusing the whole hunt. Quota headroom is the
smaller of the zone's and its region's quota (tpuctl/tpu/quota_ids.py), each less what the
project's nodes there hold of the same quota, in the quota's own unit (chips or TensorCores).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tpuctl.cloud.capacity import quotas
from tpuctl.cloud.nodes.node_lookup import MAX_ZONE_THREADS, short_list
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings.cloud import Settings
from tpuctl.tpu import offers as ranking
from tpuctl.tpu import quota_ids, stockouts
from tpuctl.tpu.accelerators import Shape, shape_of

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.prices import PriceBook
    from tpuctl.cloud.nodes.node import Node
    from tpuctl.cloud.nodes.tpu import TpuApi


@dataclass(frozen=True)
class Found:
    offers: list[ranking.Offer]  # ranked
    project: str  # whose quotas and stockout memory these are
    book: PriceBook
    quota_note: str  # "" when the quotas were read, else why headroom is unknown
    bucket_location: str | None
    notes: list[str] = field(default_factory=list)  # what was left out and why (a zone silent twice), one line each


def zone_types(api: TpuApi, zones: Sequence[str]) -> dict[str, set[str] | None]:
    """Per zone, the accelerator types its acceleratorTypes.list names; None for a zone that answered an empty
    list twice (it says nothing of what it offers, so it is left out, not taken to offer nothing)."""

    def types(zone: str) -> set[str] | None:
        for _ in range(2):
            found = {str(a.get("type", "")) for a in api.accelerator_types(zone)} - {""}
            if found:
                return found
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_ZONE_THREADS, len(zones)))) as pool:
        return dict(zip(zones, pool.map(types, zones), strict=True))


def chosen_zones(api: TpuApi, zones: Sequence[str] | None) -> list[str]:
    """Every zone of the TPU API (zones None), or the user's, each checked to be one of them."""
    return _zones(api, zones)[1]


def _zones(api: TpuApi, zones: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(every zone of the TPU API, the zones asked for)."""
    every = api.zones()
    if zones is None:
        return every, every
    unknown = [zone for zone in zones if zone not in every]
    if unknown:
        raise TpuctlError(f"not a Cloud TPU zone of project {api.project}: {short_list(unknown)}", hint=f"choose from: {short_list(every)}")
    return every, list(dict.fromkeys(zones))


def gather(
    api: TpuApi,
    settings: Settings,
    types: Sequence[str],
    kinds: Sequence[str],
    zones: Sequence[str] | None,
    bucket: str | None,
    waiting: Callable[[str], None] | None = None,
) -> Found:
    """The ranked offers; `waiting` hears the one line a slow price read says while it waits (tpuctl/cloud/capacity/prices.py)."""
    shapes = {name: shape_of(name) for name in types}
    every, asked = _zones(api, zones)
    answered = zone_types(api, asked)
    silent = [zone for zone in asked if answered[zone] is None]
    notes = [f"left out {short_list(silent)}: acceleratorTypes.list answered an empty list twice"] if silent else []
    offered = {zone: found for zone, found in answered.items() if found is not None}
    where = [zone for zone in asked if zone in offered]
    # The user's zones: each must offer one of the types, and each type one of them; a (zone, type) pair that is
    # not offered is no offer (a v5e zone in a v5e,v6e hunt is a v5e candidate only), not a mistake.
    idle = [zone for zone in where if not offered[zone] & set(types)]
    if zones is not None and idle:
        named = types[0] if len(types) == 1 else f"any of {', '.join(types)}"
        raise TpuctlError(
            f"{short_list(idle)} do{'es' if len(idle) == 1 else ''} not offer {named}", hint=f"`tpuctl offers {','.join(types)}` lists those that do"
        )
    for name in types:
        if not any(name in offered[zone] for zone in where):
            whose = "of project" if zones is None else "listed in --zones for project"
            also = f" ({notes[0]})" if notes else ""
            raise TpuctlError(f"no zone {whose} {api.project} offers {name}{also}", hint="`tpuctl offers` lists what each zone offers")
    from tpuctl.cloud.capacity.prices import price_book

    book = price_book(settings, api.bearer_token, waiting=waiting)
    infos = quotas.read(settings, api.project)
    limits = quotas.read_limits(infos) if not isinstance(infos, str) else {}
    holding = _holding(api, _counted_zones(every, where, limits, list(shapes.values()), kinds)) if limits else {}
    location = bucket_location(settings, bucket) if bucket else None
    found: list[ranking.Offer] = []
    for name, shape in shapes.items():
        for zone in (z for z in where if name in offered[z]):
            for kind in kinds:
                headroom, bound = _headroom(limits, holding, shape, kind, zone)
                found.append(
                    ranking.Offer(
                        name,
                        zone,
                        kind,
                        shape.chips,
                        book.slice_price(name, zone, kind),
                        headroom,
                        ranking.distance(zone, location),
                        stockouts.recent(api.project, zone, name, kind),
                        bound,
                    )
                )
    note = infos if isinstance(infos, str) else ""
    return Found(ranking.rank(found, list(types), list(kinds)), api.project, book, note, location, notes)


Holding = dict[str, list[tuple[Shape, str]]]  # zone -> (shape, capacity kind) of each of the project's nodes there


def _counted_zones(every: list[str], where: list[str], limits: Mapping[str, quotas.Limits], shapes: Sequence[Shape], kinds: Sequence[str]) -> list[str]:
    """The zones whose nodes count against the quotas read: the offering zones, and every zone of their regions
    when a region's quota of the wanted slices is in the reply (all its zones draw on it)."""
    regional = any((q := quota_ids.quotas_of(shape, kind)) is not None and q.region in limits for shape in shapes for kind in kinds)
    regions = {ranking.region_of(zone) for zone in where}
    return sorted(set(where) | ({z for z in every if ranking.region_of(z) in regions} if regional else set()))


def _holding(api: TpuApi, zones: list[str]) -> Holding:
    def shapes(zone: str) -> list[tuple[Shape, str]]:
        return [(shape, node.capacity) for node in api.list_nodes(zone) if (shape := _shape(node)) is not None]

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_ZONE_THREADS, len(zones)))) as pool:
        return dict(zip(zones, pool.map(shapes, zones), strict=True))


def _shape(node: Node) -> Shape | None:
    try:
        return shape_of(node.accelerator)
    except TpuctlError:
        return None  # a node tpuctl cannot size: not counted (its quota reads high, as when nodes cannot be listed)


def _headroom(limits: Mapping[str, quotas.Limits], holding: Holding, shape: Shape, kind: str, zone: str) -> tuple[int | None, ranking.QuotaBound | None]:
    """Chips of `kind`'s quota left for `shape` in `zone`: the smaller of the zone's and the region's headroom where
    both are read, each its limit less what the project's nodes there hold of the same quota, in the quota's unit;
    (None, None) when neither is known."""
    drawn = quota_ids.quotas_of(shape, kind)
    if drawn is None:
        return None, None
    mine = quota_ids.family(shape, kind)
    region = ranking.region_of(zone)
    read: list[tuple[int, ranking.QuotaBound]] = []
    for quota_id, place, regional in ((drawn.zone, zone, False), (drawn.region, region, True)):
        limit = quotas.limit(limits, quota_id, place)
        if quota_id is None or limit is None:
            continue
        there = [z for z in holding if (ranking.region_of(z) == region if regional else z == zone)]
        used = sum(drawn.units(s) for z in there for s, k in holding[z] if quota_ids.family(s, k) == mine)
        left = quotas.UNLIMITED if limit >= quotas.UNLIMITED else max(0, limit - used) // (drawn.units(shape) // shape.chips)
        read.append((left, ranking.QuotaBound(quota_id, place, regional)))
    if not read:
        return None, None
    return min(read, key=lambda pair: pair[0])


def bucket_location(settings: Settings, bucket: str) -> str:
    """The bucket's `location` (a region, dual-region or multi-region), through google-cloud-storage, retried and bounded as
    every Google API call is (tpuctl/cloud/plumbing/retry.py), not by the storage client's own two-minute retry."""
    from tpuctl.cloud.plumbing import retry, storage
    from tpuctl.cloud.plumbing.api_errors import Where, guarded

    client = storage.client(settings, small_replies=True)
    where = Where(f"read bucket gs://{bucket}", client.project, None, "storage.buckets.get", "storage.googleapis.com", "roles/storage.legacyBucketReader")
    location = guarded(lambda: client.get_bucket(bucket, timeout=retry.timeout(retry.REQUEST_S, client.api_endpoint), retry=None).location, where)
    return str(location or "")

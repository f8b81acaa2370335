"""The offers of TPU types across zones, with price, quota, bucket distance and stockout memory.

Which zones offer a type comes from the TPU API alone (projects.locations.list, then
locations.acceleratorTypes.list per zone, all zones at once): the Billing Catalog prices
regions that have no such hardware, so a price is never evidence of an offer. An enabled
zone sometimes answers an empty list; it is asked once more before it counts as offering
nothing. Quota headroom is the zone's limit minus the chips the project's nodes there hold,
of the same generation and kind (spot and preemptible nodes draw on the preemptible quota).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuctl.cloud.capacity import quotas
from tpuctl.cloud.node_lookup import MAX_ZONE_THREADS, short_list
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings.cloud import Settings
from tpuctl.tpu import offers as ranking
from tpuctl.tpu import stockouts
from tpuctl.tpu.accelerators import shape_of
from tpuctl.tpu.capacity import ON_DEMAND

if TYPE_CHECKING:
    from tpuctl.cloud.node import Node
    from tpuctl.cloud.prices import PriceBook
    from tpuctl.cloud.tpu import TpuApi


@dataclass(frozen=True)
class Found:
    offers: list[ranking.Offer]  # ranked
    project: str  # whose quotas and stockout memory these are
    book: PriceBook
    quota_note: str  # "" when the quotas were read, else why headroom is unknown
    bucket_location: str | None


def zone_types(api: TpuApi, zones: Sequence[str]) -> dict[str, set[str]]:
    """Per zone, the accelerator types its acceleratorTypes.list names (an empty reply asked twice)."""

    def types(zone: str) -> set[str]:
        for _ in range(2):
            found = {str(a.get("type", "")) for a in api.accelerator_types(zone)} - {""}
            if found:
                return found
        return set()

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_ZONE_THREADS, len(zones)))) as pool:
        return dict(zip(zones, pool.map(types, zones), strict=True))


def chosen_zones(api: TpuApi, zones: Sequence[str] | None) -> list[str]:
    """Every zone of the TPU API (zones None), or the user's, each checked to be one of them."""
    every = api.zones()
    if zones is None:
        return every
    unknown = [zone for zone in zones if zone not in every]
    if unknown:
        raise TpuctlError(f"not a Cloud TPU zone of project {api.project}: {short_list(unknown)}", hint=f"choose from: {short_list(every)}")
    return list(dict.fromkeys(zones))


def gather(
    api: TpuApi,
    settings: Settings,
    types: Sequence[str],
    kinds: Sequence[str],
    zones: Sequence[str] | None,
    bucket: str | None,
    waiting: Callable[[str], None] | None = None,
) -> Found:
    """The ranked offers; `waiting` hears the one line a slow price read says while it waits (tpuctl/cloud/prices.py)."""
    shapes = {name: shape_of(name) for name in types}
    where = chosen_zones(api, zones)
    offered = zone_types(api, where)
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
            raise TpuctlError(f"no zone {whose} {api.project} offers {name}", hint="`tpuctl offers` lists what each zone offers")
    from tpuctl.cloud.prices import price_book

    book = price_book(settings, api.bearer_token, waiting=waiting)
    infos = quotas.read(settings, api.project)
    holding = _nodes(api, sorted({z for z in where if offered[z]})) if not isinstance(infos, str) else {}
    location = bucket_location(settings, bucket) if bucket else None
    found: list[ranking.Offer] = []
    for name, shape in shapes.items():
        limits = quotas.limits(infos, shape, tuple(kinds)) if not isinstance(infos, str) else {}
        for zone in (z for z in where if name in offered[z]):
            for kind in kinds:
                limit = limits.get((zone, kind))
                used = sum(shape_of(n.accelerator).chips for n in holding.get(zone, []) if _draws_on(n, shape.generation, kind))
                found.append(
                    ranking.Offer(
                        name,
                        zone,
                        kind,
                        shape.chips,
                        book.slice_price(name, zone, kind),
                        None if limit is None else max(0, limit - used) if limit < quotas.UNLIMITED else quotas.UNLIMITED,
                        ranking.distance(zone, location),
                        stockouts.recent(api.project, zone, name, kind),
                    )
                )
    note = infos if isinstance(infos, str) else ""
    return Found(ranking.rank(found, list(types), list(kinds)), api.project, book, note, location)


def _nodes(api: TpuApi, zones: list[str]) -> dict[str, list[Node]]:
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_ZONE_THREADS, len(zones)))) as pool:
        return dict(zip(zones, pool.map(api.list_nodes, zones), strict=True))


def _draws_on(node: Node, generation: str, kind: str) -> bool:
    try:
        same = shape_of(node.accelerator).generation == generation
    except TpuctlError:
        return False
    return same and not node.reserved and (node.capacity == ON_DEMAND) == (kind == ON_DEMAND)


def bucket_location(settings: Settings, bucket: str) -> str:
    """The bucket's `location` (a region, dual-region or multi-region), through google-cloud-storage."""
    import google.cloud.storage as storage

    from tpuctl.cloud import credentials
    from tpuctl.cloud.api_errors import Where, explained

    identity = credentials.load(settings)
    client = storage.Client(
        project=settings.get("project") or identity.project,
        credentials=identity.credentials,
        client_options={"api_endpoint": settings.require("storage-endpoint")},
    )
    where = Where(f"read bucket gs://{bucket}", client.project, None, "storage.buckets.get", "storage.googleapis.com", "roles/storage.legacyBucketReader")
    location = explained(lambda: client.get_bucket(bucket).location, where)
    return str(location or "")

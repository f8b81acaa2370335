"""The ranking of offers (tpuctl/tpu/offers.py) and the reading of TPU quotaInfos (cloud/capacity/quotas.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuctl.cloud.capacity import quotas
from tpuctl.tpu import offers as o
from tpuctl.tpu.accelerators import shape_of


def offer(
    zone: str,
    kind: str = o.ON_DEMAND,
    usd: float | None = 10.0,
    headroom: int | None = 64,
    distance: str | None = None,
    stocked: float | None = None,
    t: str = "v5litepod-16",
) -> o.Offer:
    return o.Offer(t, zone, kind, shape_of(t).chips, usd, headroom, distance, stocked)


def test_rank_puts_quota_then_memory_then_distance_then_price_within_the_users_types_and_kinds() -> None:
    best = offer("us-west4-a", usd=20.0, distance=o.SAME_REGION)
    cheaper_far = offer("us-central1-a", usd=18.0, distance=o.ELSEWHERE)
    continent = offer("us-east1-d", usd=30.0, distance=o.SAME_CONTINENT)
    unknown_quota = offer("us-west4-b", usd=1.0, headroom=None, distance=o.SAME_REGION)
    stocked = offer("us-west4-c", usd=1.0, distance=o.SAME_REGION, stocked=1000.0)
    short = offer("us-west4-d", usd=1.0, headroom=8, distance=o.SAME_REGION)
    no_price = offer("us-west4-e", usd=None, distance=o.SAME_REGION)
    spot = offer("us-west4-a", kind=o.SPOT, usd=0.5, distance=o.SAME_REGION)
    second_type = offer("us-east5-a", usd=0.1, t="v5p-8", distance=o.SAME_REGION)
    everything = [second_type, spot, short, stocked, unknown_quota, continent, cheaper_far, no_price, best]
    for _ in range(5):
        random.shuffle(everything)
        ranked = o.rank(everything, ["v5litepod-16", "v5p-8"], [o.ON_DEMAND, o.SPOT])
        assert ranked == [best, no_price, continent, cheaper_far, unknown_quota, stocked, short, spot, second_type]
    assert o.rank(everything, ["v5p-8", "v5litepod-16"], [o.SPOT, o.ON_DEMAND])[0] == second_type
    assert o.rank(everything, ["v5litepod-16"], [o.SPOT]) == [spot]


def test_without_a_bucket_distance_ranks_nobody_and_price_decides() -> None:
    dear, cheap = offer("europe-west4-a", usd=25.0), offer("us-west4-a", usd=20.0)
    assert o.rank([dear, cheap], ["v5litepod-16"]) == [cheap, dear]


@pytest.mark.parametrize(
    ("zone", "location", "expected"),
    [
        ("us-central1-a", "US-CENTRAL1", o.SAME_REGION),
        ("us-east1-d", "US-CENTRAL1", o.SAME_CONTINENT),
        ("northamerica-northeast1-a", "us-central1", o.SAME_CONTINENT),
        ("europe-west4-a", "US-CENTRAL1", o.ELSEWHERE),
        # dual- and multi-regions hold the data in several regions: never "same region"
        ("us-central1-a", "US", o.SAME_CONTINENT),
        ("us-central1-a", "NAM4", o.SAME_CONTINENT),
        ("europe-west4-a", "EU", o.SAME_CONTINENT),
        ("asia-east1-c", "EU", o.ELSEWHERE),
        ("us-central1-a", "MARS1", None),  # a location tpuctl does not know: not guessed
        ("us-central1-a", None, None),
    ],
)
def test_distance_from_a_buckets_location(zone: str, location: str | None, expected: str | None) -> None:
    assert o.distance(zone, location) == expected


@given(st.text(max_size=80), st.text(max_size=80))
def test_distance_never_raises_on_hostile_locations(zone: str, location: str) -> None:
    assert o.distance(zone, location) in (o.SAME_REGION, o.SAME_CONTINENT, o.ELSEWHERE, None)


def _info(quota_id: str, zones: dict[str, object]) -> dict[str, object]:
    return {"quotaId": quota_id, "dimensionsInfos": [{"dimensions": {"zone": z}, "details": {"value": v}} for z, v in zones.items()]}


def test_quota_limits_per_zone_and_kind_in_chips() -> None:
    infos = [
        _info("TPUV5sLitepodPerProjectPerZoneForTPUAPI", {"us-west4-a": "64", "us-central1-a": "-1"}),
        _info("TPUV5sLitepodPreemptiblePerProjectPerZoneForTPUAPI", {"us-west4-a": "16"}),
        _info("TPUV4PodPerProjectPerZoneForTPUAPI", {"us-west4-a": "999"}),  # another generation's
        _info("TPUV2sPerProjectPerZoneForTPUAPI", {"us-central1-b": "16"}),  # TensorCores: 8 chips
        _info("TPUV5sLitepodPerProjectPerZoneForTPUAPI", {"europe-west4-a": "lots", "asia-east1-c": "9" * 40}),  # unreadable: absent
        "junk",
    ]
    limits = quotas.limits(infos, shape_of("v5litepod-16"), (o.ON_DEMAND, o.SPOT))
    assert limits == {("us-west4-a", o.ON_DEMAND): 64, ("us-central1-a", o.ON_DEMAND): quotas.UNLIMITED, ("us-west4-a", o.SPOT): 16}
    assert quotas.limits(infos, shape_of("v2-8"), (o.ON_DEMAND,)) == {("us-central1-b", o.ON_DEMAND): 8}
    assert quotas.quota_id(shape_of("v2-32"), o.SPOT) == "TPUV2sPodPreemptiblePerProjectPerZoneForTPUAPI"


@given(st.text(max_size=300))
def test_a_zones_value_is_every_zone_a_list_of_zones_or_one_line_exit_2(text: str) -> None:
    from tpuctl.inputs.errors import USAGE, TpuctlError
    from tpuctl.settings.cloud import zones_of

    try:
        zones = zones_of(text)
    except TpuctlError as err:
        assert err.exit_code == USAGE and "\n" not in str(err)
        return
    assert zones is None or all(z.count("-") == 2 for z in zones)


def test_zones_spelled_all_or_auto_mean_every_zone_and_a_list_is_kept_in_order_once() -> None:
    from tpuctl.settings.cloud import zones_of

    assert zones_of("all") is None and zones_of(" AUTO ") is None
    assert zones_of("us-west4-a, us-central1-a,us-west4-a") == ["us-west4-a", "us-central1-a"]

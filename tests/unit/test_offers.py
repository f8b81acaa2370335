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


def test_quota_limits_by_id_zone_region_and_default_as_cloud_quotas_serves_them() -> None:
    """DimensionsInfo (Cloud Quotas v1): own entries per zone or region; the one without dimensions is the default for
    every location without its own, within its applicableLocations (['global']: everywhere); `details` without a
    value is 0 (proto3 JSON); -1 is unlimited; what cannot be read is unknown, never 0."""
    infos = [
        {"quotaId": "A", "dimensionsInfos": [
            {"dimensions": {"zone": "us-west4-a"}, "details": {"value": "64"}},
            {"dimensions": {"zone": "us-central1-a"}, "details": {"value": "-1"}},
            {"dimensions": {"zone": "europe-west4-a"}, "details": {}},
            {"details": {"value": "8"}, "applicableLocations": ["us-west4-a", "us-east1-c"]},
        ]},
        {"quotaId": "B", "dimensionsInfos": [
            {"dimensions": {"region": "us-east1"}, "details": {"value": "0"}}, {"details": {"value": "16"}, "applicableLocations": ["global"]},
        ]},
        {"quotaId": "C", "dimensionsInfos": [
            {"dimensions": {"zone": "asia-east1-c"}, "details": {"value": "lots"}},
            {"dimensions": {"zone": "us-south1-a"}, "details": {"value": "9" * 40}},
            {"dimensions": {"zone": "us-west1-a"}},
            {"dimensions": {"provider": "Foo"}, "details": {"value": "3"}},  # a dimension TPU quotas do not have: not a default
        ]},
        "junk", {"quotaId": 3}, {"quotaId": "D", "dimensionsInfos": "junk"},
    ]  # fmt: skip
    limits = quotas.read_limits(infos)
    at = lambda quota_id, where: quotas.limit(limits, quota_id, where)  # noqa: E731
    assert [at("A", z) for z in ("us-west4-a", "us-central1-a", "europe-west4-a", "us-east1-c", "asia-east1-c")] == [64, quotas.UNLIMITED, 0, 8, None]
    assert [at("B", r) for r in ("us-east1", "europe-west4")] == [0, 16]
    assert [at("C", z) for z in ("asia-east1-c", "us-south1-a", "us-west1-a", "Foo")] == [None, None, None, None]
    assert at("D", "us-west4-a") is None and at("unknown", "us-west4-a") is None and at(None, "us-west4-a") is None


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["quotaId", "dimensionsInfos", "dimensions", "details", "value", "zone", "region", "applicableLocations"]), inner, max_size=4),
    max_leaves=20)  # fmt: skip


@given(st.lists(_JSON, max_size=4))
def test_reading_any_reply_never_raises(infos: list[object]) -> None:
    for read in quotas.read_limits(infos).values():
        assert all(0 <= v <= quotas.UNLIMITED for v in read.own.values())


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


def test_a_dearer_zone_first_for_the_buckets_sake_is_told_and_only_then() -> None:
    near = offer("europe-west4-a", usd=25.76, distance=o.SAME_REGION)
    far = offer("us-west4-a", usd=19.20, distance=o.ELSEWHERE)
    assert o.dearer_for_bucket(o.rank([far, near], ["v5litepod-16"])) == (near, far)
    assert o.dearer_for_bucket(o.rank([far, offer("europe-west4-a", usd=18.0, distance=o.SAME_REGION)], ["v5litepod-16"])) is None  # cheapest too
    assert o.dearer_for_bucket(o.rank([offer("us-west4-a", usd=19.2), offer("us-east1-c", usd=20.0)], ["v5litepod-16"])) is None  # no bucket
    # The far zone's quota is unknown: the near one goes first for its known quota, not for the bucket.
    assert o.dearer_for_bucket(o.rank([offer("us-west4-a", usd=19.2, headroom=None, distance=o.ELSEWHERE), near], ["v5litepod-16"])) is None
    assert o.dearer_for_bucket([]) is None

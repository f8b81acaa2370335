"""A hunt's candidates (tpuctl/cloud/capacity/candidates.py) from offers as gather() ranks them: each candidate ranked by the
stockouts remembered for its own kind, flex-start judged by the preemptible quota it draws on, and zones known short
of quota skipped. The stockout memory is tpuctl's own, in a private state folder; the offers are what gather makes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tpuctl.cloud.capacity.candidates import Plan
from tpuctl.cloud.capacity.candidates import all_short as _all_short
from tpuctl.cloud.capacity.candidates import candidates as _candidates
from tpuctl.cloud.capacity.candidates import priced as _priced
from tpuctl.cloud.capacity.gather import Found
from tpuctl.tpu import stockouts
from tpuctl.tpu.capacity import FLEX_START, ON_DEMAND, SPOT, Capacity, parse_capacities
from tpuctl.tpu.offers import Offer, QuotaBound, rank

PROJECT = "tpuctl-test"
TYPE = "v5litepod-16"
ZONES = ("us-west4-a", "us-east5-b", "europe-west4-a")  # cheapest first: the order rank() gives when nothing else differs


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    yield


QUOTA = {ON_DEMAND: "TPUV5sLitepodPerProjectPerZoneForTPUAPI", SPOT: "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"}


def found(headroom: dict[tuple[str, str], int | None] | None = None, regional: bool = False) -> Found:
    """Offers for both priced kinds in every zone, as gather() builds them (stockouts read under the priced kind), their
    headroom read from the zone's quota (or, `regional`, its region's)."""
    offers = [
        Offer(TYPE, zone, kind, 16, 10.0 + i if kind == ON_DEMAND else 4.0 + i, (headroom or {}).get((zone, kind), 64), None,
              stockouts.recent(PROJECT, zone, TYPE, kind),
              QuotaBound(QUOTA[kind].replace("Zone", "Region") if regional else QUOTA[kind], zone.rsplit("-", 1)[0] if regional else zone, regional))
        for i, zone in enumerate(ZONES) for kind in (ON_DEMAND, SPOT)
    ]  # fmt: skip
    return Found(rank(offers, [TYPE], [ON_DEMAND, SPOT]), PROJECT, book=None, quota_note="", bucket_location=None)  # type: ignore[arg-type]


def plan(capacity: str) -> Plan:
    return Plan([TYPE], parse_capacities(capacity), None, resolved=None, timeout_s=None)  # type: ignore[arg-type]


def zones_of(candidates: list[Any]) -> list[tuple[str, str]]:
    return [(str(c.capacity), c.zone) for c in candidates]


@pytest.mark.parametrize("kind", ["reserved", "flex-start", "preemptible"])
def test_a_kind_without_its_own_price_is_ranked_by_its_own_stockouts(kind: str) -> None:
    stockouts.remember(PROJECT, ZONES[0], TYPE, kind, "zone", now=time.time())
    candidates, _ = _candidates(found(), plan(kind))
    assert [c.zone for c in candidates] == [ZONES[1], ZONES[2], ZONES[0]]  # its own stockout goes last


def test_an_on_demand_stockout_does_not_push_back_a_reservation() -> None:
    stockouts.remember(PROJECT, ZONES[0], TYPE, ON_DEMAND, "zone", now=time.time())
    candidates, _ = _candidates(found(), plan("on-demand,reserved"))
    assert zones_of(candidates) == [
        ("on-demand", ZONES[1]), ("on-demand", ZONES[2]), ("on-demand", ZONES[0]), ("reserved", ZONES[0]), ("reserved", ZONES[1]), ("reserved", ZONES[2]),
    ]  # fmt: skip


def test_flex_start_is_judged_by_the_preemptible_quota_and_has_no_list_price() -> None:
    assert _priced([Capacity(FLEX_START)]) == [SPOT]
    short = found({(ZONES[0], SPOT): 8, (ZONES[1], ON_DEMAND): 8})  # spot (preemptible) quota short in the first zone only
    candidates, skipped = _candidates(short, plan("flex-start"))
    assert [c.zone for c in candidates] == [ZONES[1], ZONES[2]] and all(c.usd_per_hour is None for c in candidates)
    assert [(s.candidate.zone, s.why) for s in skipped] == [(ZONES[0], "skipped: quota holds 8 of 16 chips")]


def test_a_zone_known_short_is_skipped_and_unknown_quota_stays() -> None:
    candidates, skipped = _candidates(found({(ZONES[0], SPOT): 8, (ZONES[1], SPOT): None}), plan("spot"))
    assert [c.zone for c in candidates] == [ZONES[2], ZONES[1]]  # unknown quota after the zones where it fits
    assert [s.candidate.zone for s in skipped] == [ZONES[0]]


def test_every_zone_short_is_one_line_naming_the_quota_and_the_zones() -> None:
    _, skipped = _candidates(found({(zone, SPOT): 0 if zone == ZONES[2] else 8 for zone in ZONES}), plan("spot"))
    error = _all_short(skipped)
    assert error.exit_code == 1 and "\n" not in error.message
    assert error.message == (
        "no candidate zone has quota for the slice: TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI in "
        f"{ZONES[0]} (8 of 16 chips), {ZONES[1]} (8 of 16 chips), {ZONES[2]} (0 of 16 chips)"
    )


def test_a_full_reservation_name_makes_candidates_in_its_own_zone_only() -> None:
    candidates, _ = _candidates(found(), plan(f"reserved=projects/{PROJECT}/locations/{ZONES[1]}/reservations/r1,reserved=r2"))
    assert zones_of(candidates) == [
        (f"reserved=projects/{PROJECT}/locations/{ZONES[1]}/reservations/r1", ZONES[1]), *(("reserved=r2", zone) for zone in ZONES),
    ]  # fmt: skip


def test_a_reservation_is_never_judged_by_on_demand_quota() -> None:
    """Issue 45: with on-demand quota 0 (v5e's default) a reservation is still tried everywhere it may be; the
    on-demand candidates of the same hunt are skipped as before."""
    none_left = found({(zone, ON_DEMAND): 0 for zone in ZONES})
    candidates, skipped = _candidates(none_left, plan("on-demand,reserved=myres"))
    assert zones_of(candidates) == [("reserved=myres", zone) for zone in ZONES]
    assert [(str(s.candidate.capacity), s.candidate.zone) for s in skipped] == [("on-demand", zone) for zone in ZONES]


def test_a_region_short_of_quota_skips_its_zones_saying_it_is_the_region() -> None:
    short = found({(zone, SPOT): 0 if zone.startswith("us-") else 64 for zone in ZONES}, regional=True)
    candidates, skipped = _candidates(short, plan("spot"))
    assert [c.zone for c in candidates] == [ZONES[2]]
    assert [s.why for s in skipped] == [
        "skipped: region us-west4's quota holds 0 of 16 chips (TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI)",
        "skipped: region us-east5's quota holds 0 of 16 chips (TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI)",
    ]
    assert _all_short(skipped).message == (
        "no candidate zone has quota for the slice: TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI in region us-west4: us-west4-a (0 of 16 chips); "
        "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI in region us-east5: us-east5-b (0 of 16 chips)"
    )

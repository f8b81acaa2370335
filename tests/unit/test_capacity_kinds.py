"""`--capacity`'s spelling of capacity kinds (tpuctl/tpu/capacity.py) and a spec asking for one of them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.inputs.errors import TpuctlError
from tpuctl.tpu.capacity import FLEX_START, KINDS, ON_DEMAND, RESERVED, SPOT, Capacity, parse_capacities


def test_kinds_keep_the_users_order_drop_repeats_and_name_a_reservation() -> None:
    found = parse_capacities(" Spot, on-demand,spot,reserved=res-1 ,reserved, flex-start")
    assert found == [Capacity(SPOT), Capacity(ON_DEMAND), Capacity(RESERVED, "res-1"), Capacity(RESERVED), Capacity(FLEX_START)]
    assert [str(c) for c in found] == ["spot", "on-demand", "reserved=res-1", "reserved", "flex-start"]


@pytest.mark.parametrize("text", ["", "free", "spot,", "spot=x", "reserved=", "reserved= ", "on-demand=a", "reserved=" + "r" * 201, "reserved=a\x1b[2J"])
def test_what_is_not_a_kind_is_one_line_naming_it(text: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_capacities(text)
    assert "--capacity" in str(caught.value) and "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


@pytest.mark.parametrize("name", ["my reservation", "a/b", "projects/p/locations/z/reservations/r;rm", "r" * 64])
def test_a_reservation_that_is_no_name_is_refused_as_it_is_parsed(name: str) -> None:
    """As gcloud spells one (check_reservation): refused before any setting or API is read, not at the queue."""
    with pytest.raises(TpuctlError, match=r"^--capacity reserved=.* is not a reservation's name \("):
        parse_capacities(f"spot,reserved={name}")


def test_a_command_can_allow_only_the_kinds_it_handles() -> None:
    with pytest.raises(TpuctlError, match="on-demand, spot"):
        parse_capacities("reserved", allowed=(ON_DEMAND, SPOT))


@given(st.text(max_size=80))
def test_any_text_is_kinds_or_one_line(text: str) -> None:
    try:
        found = parse_capacities(text)
    except TpuctlError as err:
        assert "\n" not in str(err)
        return
    assert found and all(c.kind in KINDS for c in found)


def test_a_spec_asks_for_exactly_one_kind_and_survives_its_saved_form() -> None:
    spec = NodeSpec(name="n", project="p", zone="us-central2-b", runtime_version="tpu-vm-tf-2.18.0-pjrt", accelerator_type="v4-8", spot=True)
    for capacity in (Capacity(ON_DEMAND), Capacity(SPOT), Capacity(RESERVED, "res"), Capacity(FLEX_START)):
        other = spec.with_capacity(capacity)
        assert other.capacity() == capacity.kind
        assert NodeSpec.from_json(other.to_json(), "test") == other
    assert spec.with_capacity(Capacity(RESERVED, "res")).reservation == "res"
    assert spec.with_capacity(Capacity(SPOT)).reservation is None


def test_a_spec_saved_before_hunts_were_kept_still_loads_and_a_hunted_one_keeps_its_hunt() -> None:
    """Specs saved by earlier tpuctl versions have no hunt fields: they load as a create that did not hunt."""
    hunted = NodeSpec("n", "p", "us-east5-b", "v2-alpha-tpuv6e", "v6e-8", spot=True, hunt_zones="all", hunt_capacity="spot,on-demand")
    assert NodeSpec.from_json(hunted.to_json(), "test") == hunted
    old = {key: value for key, value in json.loads(hunted.to_json()).items() if not key.startswith("hunt_")}
    assert NodeSpec.from_json(json.dumps(old), "test") == replace(hunted, hunt_zones=None, hunt_capacity=None)

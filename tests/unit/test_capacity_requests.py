"""The requests a reserved or flex-start create sends, how an existing node is compared with one, and their flags.

The wire shapes are gcloud's (528.0.0, googlecloudsdk/command_lib/compute/tpus): `tpu-vm create --reserved` sets
`node.schedulingConfig.reserved`; GA `queued-resources create --reserved` sets `reservationName` to
`projects/P/locations/Z/reservations/-`; alpha `--reservation NAME` to the reservation's full name; alpha
`--provisioning-model flex-start --max-run-duration D` sets `provisioningModel` and `runDuration.maxRunDuration`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.standins.cli_calls import invoke
from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.inputs.errors import TpuctlError
from tpuctl.tpu.capacity import MAX_RUN_S, run_duration_s

ZONE = "us-east5-a"
SPEC = NodeSpec(name="my-tpu", project="tpuctl-test", zone=ZONE, runtime_version="v2-alpha-tpuv6e", accelerator_type="v6e-8")


def _spec(**fields: object) -> NodeSpec:
    return NodeSpec(**{**SPEC.__dict__, **fields})  # type: ignore[arg-type]


def test_a_reserved_node_is_created_directly_with_schedulingconfig_reserved() -> None:
    spec = _spec(reserved=True)
    assert not spec.queues() and spec.capacity() == "reserved"
    assert spec.resource()["schedulingConfig"] == {"reserved": True}


def test_a_named_reservation_goes_through_a_v2_queued_resource_naming_it() -> None:
    spec = _spec(reserved=True, reservation="team-res")
    assert spec.queues()
    resource = spec.queued_resource()
    assert resource["reservationName"] == f"projects/tpuctl-test/locations/{ZONE}/reservations/team-res"
    assert "schedulingConfig" not in resource["tpu"]["nodeSpec"][0]["node"] and "provisioningModel" not in resource
    full = "projects/host-project/locations/us-east5-a/reservations/shared"
    assert _spec(reserved=True, reservation=full).queued_resource()["reservationName"] == full
    any_one = _spec(reserved=True, queued=True).queued_resource()["reservationName"]
    assert any_one == f"projects/tpuctl-test/locations/{ZONE}/reservations/-"


def test_flex_start_is_a_v2alpha1_queued_resource_with_its_run_duration() -> None:
    spec = _spec(flex_start=True, max_run_duration="1d12h", valid_until="6h")
    assert spec.queues() and spec.capacity() == "flex-start"
    resource = spec.queued_resource()
    assert resource["provisioningModel"] == "FLEX_START" and resource["runDuration"] == {"maxRunDuration": "129600s"}
    assert resource["queueingPolicy"] == {"validUntilDuration": "21600s"}
    assert "spot" not in resource and "reservationName" not in resource
    assert "schedulingConfig" not in resource["tpu"]["nodeSpec"][0]["node"]


def test_reserved_and_flex_start_specs_survive_their_saved_form() -> None:
    for spec in (_spec(reserved=True, reservation="team-res"), _spec(flex_start=True, max_run_duration="1d12h", valid_until="6h")):
        again = NodeSpec.from_json(spec.to_json(), "test")
        assert again == spec and again.queued_resource() == spec.queued_resource()


def test_an_existing_node_of_another_kind_is_a_conflict_named_by_field() -> None:
    on_demand = Node(SPEC.resource(), ZONE)
    assert _spec(reserved=True).differences(on_demand) == ["reserved: False != True"]
    reserved = Node(_spec(reserved=True).resource(), ZONE)
    assert SPEC.differences(reserved) == ["reserved: True != False"]
    assert _spec(reserved=True).differences(reserved) == []
    flex = _spec(flex_start=True, max_run_duration="2d")
    assert flex.differences(on_demand) == ["made by a queued resource: False != True"]
    queued = Node({**SPEC.resource(), "queuedResource": f"projects/tpuctl-test/locations/{ZONE}/queuedResources/my-tpu"}, ZONE)
    assert flex.differences(queued) == []


def test_a_reserved_node_has_no_list_price_and_says_its_kind() -> None:
    node = Node({**SPEC.resource(), "schedulingConfig": {"reserved": True}}, ZONE)
    assert node.capacity == "reserved"


@pytest.mark.parametrize(("text", "seconds"), [("2d", 172800), ("36h", 129600), ("1d12h", 129600), ("90m", 5400), ("7d", MAX_RUN_S), (" 3H ", 10800)])
def test_run_durations(text: str, seconds: int) -> None:
    assert run_duration_s(text) == seconds


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("8d", "limit of 7 days"),
        ("7d1s", "limit of 7 days"),
        ("9999999d", "limit of 7 days"),
        ("0h", "no time at all"),
        ("-1d", "not a duration"),
        ("2 days", "not a duration"),
        ("1e9d", "not a duration"),
        ("2d\x1b[2J", "not a duration"),
        ("9" * 5000 + "d", "not a duration"),
        ("", "not a duration"),
        ("h", "not a duration"),
    ],
)
def test_bad_run_durations_are_one_line(text: str, says: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        run_duration_s(text)
    message = str(caught.value)
    assert says in message and "\n" not in message and "\x1b" not in message and len(message) < 300


@given(st.text(max_size=40))
def test_any_run_duration_is_seconds_within_the_limit_or_one_line(text: str) -> None:
    try:
        seconds = run_duration_s(text)
    except TpuctlError as err:
        assert "\n" not in str(err)
        return
    assert 0 < seconds <= MAX_RUN_S


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--max-run-duration", "2d"], "--max-run-duration needs --flex-start"),
        (["--flex-start"], "--flex-start needs --max-run-duration"),
        (["--flex-start", "--max-run-duration", "8d"], "limit of 7 days"),
        (["--flex-start", "--max-run-duration", "2d", "--spot"], "--spot and --flex-start are different capacity kinds"),
        (["--reserved", "--spot"], "--spot and --reserved are different capacity kinds"),
        (["--reserved", "--flex-start", "--max-run-duration", "1d"], "--reserved and --flex-start"),
        (["--reservation", "team-res"], "--reservation needs --reserved"),
        (["--reserved", "--reservation", "bad name/\x1b[2J"], "is not a reservation's name"),
        (["--reserved", "--valid-until", "6h"], "--valid-until needs --queued"),
    ],
)
def test_contradicting_capacity_flags_are_one_usage_line(flags: list[str], says: str) -> None:
    """A project that is valid: a run duration with no kind flag is checked once the capacity setting is read, which
    may name flex-start (create_hunt.plan); every other contradiction is refused before that."""
    result = invoke(["create", "my-tpu", "--project", "my-project", "--zone", ZONE, "--accelerator-type", "v6e-8", *flags])
    assert result.code == 2 and result.crash is None, result
    lines = [line for line in result.err.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and says in lines[0] and "\x1b" not in result.err

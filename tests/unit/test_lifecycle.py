"""The node lifecycle against a fake TPU API: what create, delete, stop/start and recreate do, step by step.

The fake stands in for Google's API only (scripted node states and replies);
tpuctl's lifecycle code and its Node and NodeSpec types are the real ones.
Nothing sleeps: waits record their pauses instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.standins.tpu_fakes import SPEC, ZONE, FakeApi, no_sleep
from tpuctl.cloud.nodes import lifecycle, nodespec
from tpuctl.cloud.nodes.creating import Terms
from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import Queued
from tpuctl.inputs.errors import CapacityError, Stockout, TpuctlError


@pytest.fixture(autouse=True)
def _spec_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    yield


def _run(step: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    seen: list[str] = []
    progress = lambda state, elapsed: seen.append(state)  # noqa: E731 - one line, the same for every step
    creates = step in (lifecycle.ensure, lifecycle.recreate)  # their terms are one value (creating.Terms)
    result = step(*args, progress, Terms(sleep=no_sleep)) if creates else step(*args, progress, sleep=no_sleep)
    return result, seen


def test_create_follows_the_node_to_ready_and_saves_the_spec() -> None:
    api = FakeApi()
    ensured, seen = _run(lifecycle.ensure, api, SPEC)
    assert ensured.created and ensured.node.ready and ensured.node.accelerator == "v4-8"
    assert seen == ["CREATING", "READY"]
    assert nodespec.load(SPEC.project, ZONE, SPEC.name) == SPEC
    assert api.calls == ["create my-tpu"]


def test_an_existing_node_with_the_same_spec_is_reused_and_a_different_one_refused() -> None:
    api = FakeApi()
    api.add("my-tpu", "READY", **SPEC.resource())
    ensured, _ = _run(lifecycle.ensure, api, SPEC)
    assert not ensured.created and api.calls == []
    other = NodeSpec(**{**SPEC.__dict__, "accelerator_type": "v4-16"})
    with pytest.raises(TpuctlError, match="accelerator type: 'v4-8' != 'v4-16'"):
        _run(lifecycle.ensure, api, other)


def test_a_preempted_node_is_not_reused() -> None:
    api = FakeApi()
    api.add("my-tpu", "PREEMPTED", **SPEC.resource())
    with pytest.raises(TpuctlError, match="exists but is PREEMPTED") as err:
        _run(lifecycle.ensure, api, SPEC)
    assert "tpuctl recreate" in (err.value.hint or "")


def test_ready_but_unhealthy_is_still_waited_for() -> None:
    api = FakeApi()
    api.add("my-tpu", "READY", health="UNHEALTHY_MAINTENANCE", **SPEC.resource())
    api.script["my-tpu"] = ["READY"]
    node = api.nodes["my-tpu"]

    def heal(state: str, elapsed: float) -> None:
        node["health"] = "HEALTHY"

    ready = lifecycle.wait_ready(api, SPEC, None, heal, sleep=no_sleep)
    assert ready.ready


def test_a_failed_operation_ends_the_wait_with_its_reason() -> None:
    api = FakeApi(failed_operation=(7, "Permission 'tpu.nodes.create' denied"))
    with pytest.raises(TpuctlError, match=r"permission denied: create node my-tpu needs tpu\.nodes\.create in project tpuctl-test"):
        _run(lifecycle.ensure, api, SPEC)


CODE_8 = 'There is no more capacity in the zone "us-central2-b"; you can try in another zone where Cloud TPU Nodes are offered'


def test_a_stockout_deletes_what_the_try_left_and_takes_back_its_spec() -> None:
    """Issue 36: the node left CREATING is deleted, the spec saved before the wait is removed, the line says so."""
    api = FakeApi(failed_operation=(8, CODE_8))
    with pytest.raises(CapacityError) as caught:
        _run(lifecycle.ensure, api, SPEC)
    assert caught.value.kind is Stockout.ZONE
    assert caught.value.message == "us-central2-b: no capacity for v4-8 (code 8); the CREATING node it left was deleted, nothing was left behind"
    assert api.calls == ["create my-tpu", "delete my-tpu"] and "my-tpu" not in api.nodes
    assert nodespec.load(SPEC.project, ZONE, SPEC.name) is None


def test_a_stockout_keeps_a_spec_an_earlier_create_saved() -> None:
    """recreate and babysit need the spec of a node they could not bring back."""
    nodespec.save(SPEC)
    api = FakeApi(failed_operation=(8, CODE_8))
    with pytest.raises(CapacityError):
        _run(lifecycle.recreate, api, SPEC)
    assert nodespec.load(SPEC.project, ZONE, SPEC.name) == SPEC


def test_one_internal_error_is_tried_once_more_two_are_a_stockout() -> None:
    once = FakeApi(failed_operation=(13, "an internal error has occurred"))
    ensured, _ = _run(lifecycle.ensure, once, SPEC)
    assert ensured.node.ready and once.calls == ["create my-tpu", "delete my-tpu", "create my-tpu"]
    twice = FakeApi(failed_operation=(13, "an internal error has occurred"), then_failed=[(13, "an internal error has occurred")])
    with pytest.raises(CapacityError) as caught:
        _run(lifecycle.ensure, twice, SPEC)
    assert caught.value.kind is Stockout.INTERNAL and "my-tpu" not in twice.nodes


def test_a_node_preempted_or_stuck_while_created_is_a_stockout() -> None:
    preempted = FakeApi()
    preempted.script["my-tpu"] = ["GONE", "CREATING", "PREEMPTED", "PREEMPTED"]  # none before the create
    with pytest.raises(CapacityError) as caught:
        _run(lifecycle.ensure, preempted, SPEC)
    assert caught.value.kind is Stockout.PREEMPTED and preempted.calls == ["create my-tpu", "delete my-tpu"]
    stuck = FakeApi()
    stuck.script["my-tpu"] = ["GONE", *["CREATING"] * 3]
    with pytest.raises(CapacityError) as caught:
        lifecycle.ensure(stuck, SPEC, lambda state, elapsed: None, Terms(deadline_s=0.0, sleep=no_sleep))
    assert caught.value.kind is Stockout.STUCK and "my-tpu" not in stuck.nodes


def test_a_node_that_vanishes_while_created_is_an_error() -> None:
    api = FakeApi()
    api.script["my-tpu"] = ["CREATING", "GONE", "GONE"]
    api.add("my-tpu", "CREATING", **SPEC.resource())
    with pytest.raises(TpuctlError, match="disappeared while it was being created"):
        lifecycle.wait_ready(api, SPEC, None, lambda state, elapsed: None, sleep=no_sleep)


def test_queued_request_waits_for_capacity_then_for_the_node() -> None:
    api = FakeApi()
    spec = NodeSpec(**{**SPEC.__dict__, "queued": True, "spot": True})
    ensured, seen = _run(lifecycle.ensure, api, spec)
    assert ensured.created and "queued: WAITING_FOR_RESOURCES" in seen and "queued: ACTIVE" in seen
    assert api.calls == ["queue my-tpu"]


def test_remove_waits_until_gone_forgets_the_spec_and_a_gone_node_is_a_no_op() -> None:
    api = FakeApi()
    api.add("my-tpu", "READY")
    nodespec.save(SPEC)
    removed, seen = _run(lifecycle.remove, api, ZONE, "my-tpu")
    assert (removed.node, removed.queued) == ("READY", None) and seen == ["DELETING"] and "my-tpu" not in api.nodes
    assert removed.line() == f"deleted node my-tpu (READY) in {ZONE}" and nodespec.load(SPEC.project, ZONE, "my-tpu") is None
    again, _ = _run(lifecycle.remove, api, ZONE, "my-tpu")
    assert not again.found and again.line() == f"my-tpu does not exist in {ZONE}; nothing to delete"


def test_remove_takes_the_queued_resource_that_made_the_node_and_one_that_outlived_it() -> None:
    """Deleting a queued resource's node alone leaves the request SUSPENDED, holding quota: remove deletes it too."""
    api = FakeApi()
    api.add("my-tpu", "READY", queuedResource=f"projects/tpuctl-test/locations/{ZONE}/queuedResources/my-tpu")
    api.queued["my-tpu"] = ["ACTIVE"]
    removed, _ = _run(lifecycle.remove, api, ZONE, "my-tpu")
    assert api.calls == ["delete queued my-tpu"] and "my-tpu" not in api.nodes and not api.queued
    assert removed.line() == f"deleted node my-tpu (READY) and its queued resource my-tpu (ACTIVE) in {ZONE}"
    api.queued["left"] = ["SUSPENDED"]  # its node gone (a flex-start's run ended, a node deleted by hand)
    removed, _ = _run(lifecycle.remove, api, ZONE, "left")
    assert api.calls[-1] == "delete queued left" and not api.queued
    assert removed.line() == f"deleted queued resource left (SUSPENDED), which had outlived its node left, in {ZONE}"


def test_remove_leaves_a_queued_resource_that_asks_for_other_nodes_too() -> None:
    api = FakeApi()
    api.add("slice-0", "READY", queuedResource=f"projects/tpuctl-test/locations/{ZONE}/queuedResources/multi")
    api.queued["multi"] = [Queued("ACTIVE", node_ids=("slice-0", "slice-1"))]
    removed, _ = _run(lifecycle.remove, api, ZONE, "slice-0")
    assert api.calls == ["delete slice-0"] and api.queued["multi"]
    assert removed.line().endswith("; queued resource multi asks for other nodes too and is left as it is")


def test_remove_gives_up_at_its_deadline_naming_what_is_left_and_how_to_delete_it() -> None:
    api = FakeApi()
    api.add("my-tpu", "READY")
    api.delete_node = lambda zone, name: api.script.__setitem__(name, ["DELETING"]) or "operations/delete"  # type: ignore[method-assign]
    with pytest.raises(TpuctlError) as stuck:
        lifecycle.remove(api, ZONE, "my-tpu", lambda state, elapsed: None, deadline_s=0.0, sleep=lambda s: None)
    assert stuck.value.message == f"my-tpu in {ZONE} is still there after 0 s (node DELETING); the service goes on deleting it"
    assert stuck.value.hint == f"`tpuctl delete my-tpu --zone {ZONE}` deletes it (it waits again)"


def test_stop_and_start_wait_for_the_end_state_and_repeat_as_no_ops() -> None:
    api = FakeApi()
    api.add("my-tpu", "READY")
    assert _run(lifecycle.change_power, api, ZONE, "my-tpu", True)[0] is True
    assert _run(lifecycle.change_power, api, ZONE, "my-tpu", True)[0] is False
    assert _run(lifecycle.change_power, api, ZONE, "my-tpu", False)[0] is True
    assert api.calls == ["stop my-tpu", "start my-tpu"]
    with pytest.raises(TpuctlError, match="no node other"):
        _run(lifecycle.change_power, api, ZONE, "other", True)


def test_recreate_replaces_a_lost_node_and_keeps_a_live_one() -> None:
    api = FakeApi()
    api.add("my-tpu", "READY", **SPEC.resource())
    kept, _ = _run(lifecycle.recreate, api, SPEC)
    assert not kept.created and api.calls == []
    api.nodes["my-tpu"]["state"] = "PREEMPTED"
    api.script["my-tpu"] = ["PREEMPTED"]
    again, seen = _run(lifecycle.recreate, api, SPEC)
    assert again.created and seen[0] == "deleting PREEMPTED node"
    assert api.calls == ["delete my-tpu", "create my-tpu"]


def test_recreate_of_a_queued_node_clears_the_old_queued_resource_first() -> None:
    api = FakeApi()
    spec = NodeSpec(**{**SPEC.__dict__, "queued": True})
    api.queued["my-tpu"] = ["ACTIVE"]
    _run(lifecycle.recreate, api, spec)
    assert api.calls[:2] == ["delete queued my-tpu", "queue my-tpu"]


# The spec's request and the comparison read the same JSON shape as everything else.


def test_a_spec_has_no_differences_from_its_own_request() -> None:
    full = NodeSpec(
        **{**SPEC.__dict__, "spot": True, "labels": {"a": "b"}, "network": "default", "service_account": "sa@p.iam", "startup_script": "#!/bin/sh\n"}
    )
    assert full.differences(Node(full.resource(), ZONE)) == []
    seen = {**full.resource(), "runtimeVersion": "tpu-vm-base", "schedulingConfig": {}, "labels": {"x": "y"}}
    assert full.differences(Node(seen, ZONE))[:2] == ["runtime version: 'tpu-vm-base' != 'tpu-ubuntu2204-base'", "spot: False != True"]


def test_networks_compare_by_name_not_url_form() -> None:
    spec = NodeSpec(**{**SPEC.__dict__, "network": "default"})
    seen = {**spec.resource(), "networkConfig": {"network": "projects/tpuctl-test/global/networks/default"}}
    assert spec.differences(Node(seen, ZONE)) == []


def test_queued_request_carries_spot_and_deadline_outside_the_node() -> None:
    spec = NodeSpec(**{**SPEC.__dict__, "spot": True, "queued": True, "valid_until": "6h"})
    resource = spec.queued_resource()
    assert resource["spot"] == {} and resource["queueingPolicy"] == {"validUntilDuration": "21600s"}
    node_spec = resource["tpu"]["nodeSpec"][0]
    assert "schedulingConfig" not in node_spec["node"] and node_spec["parent"] == f"projects/tpuctl-test/locations/{ZONE}"
    at = NodeSpec(**{**spec.__dict__, "valid_until": "2026-12-01T01:00:00+01:00"}).queued_resource()
    assert at["queueingPolicy"] == {"validUntilTime": "2026-12-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("fields", "error", "kind"),
    [
        ({"flex_start": True, "max_run_duration": "2d"}, (8, f'There is no more capacity in the zone "{ZONE}"; try another zone'), Stockout.ZONE),
        ({"reserved": True, "reservation": "team-res"}, (9, "Insufficient reserved capacity. Contact customer support."), Stockout.RESERVED),
    ],
)
def test_a_queued_resource_that_fails_for_capacity_is_a_stockout_and_leaves_nothing(
    fields: dict[str, object], error: tuple[int, str], kind: Stockout
) -> None:
    api = FakeApi()
    spec = NodeSpec(**{**SPEC.__dict__, **fields})  # type: ignore[arg-type]
    api.queued["my-tpu"] = ["ACCEPTED", "WAITING_FOR_RESOURCES", Queued("FAILED", *error)]
    api.script["my-tpu"] = ["GONE", "GONE"]  # no node before the create, none when the failed try is cleaned up
    with pytest.raises(CapacityError) as caught:
        _run(lifecycle.ensure, api, spec)
    assert caught.value.kind == kind and "the FAILED queued resource it left was deleted" in caught.value.message
    assert api.calls == ["queue my-tpu", "delete queued my-tpu"]
    assert nodespec.load(spec.project, spec.zone, spec.name) is None


def test_a_create_that_fails_after_it_was_accepted_for_another_reason_deletes_what_it_made() -> None:
    """Not a stockout, not a quota: the node it made turns TERMINATED. Left in place it would bill; it is deleted, and
    the error keeps its kind with what the clean-up did added."""
    api = FakeApi()
    accept = api.create_node

    def create(zone: str, name: str, resource: dict[str, Any]) -> str | None:
        operation = accept(zone, name, resource)
        api.script[name] = ["CREATING", "TERMINATED"]
        return operation

    api.create_node = create  # type: ignore[method-assign]
    with pytest.raises(TpuctlError) as failed:
        _run(lifecycle.ensure, api, SPEC)
    assert failed.value.message == "node my-tpu became TERMINATED while starting; the TERMINATED node it left was deleted, nothing was left behind"
    assert api.calls == ["create my-tpu", "delete my-tpu"] and "my-tpu" not in api.nodes
    assert nodespec.load(SPEC.project, ZONE, "my-tpu") is None


def test_a_create_that_met_someone_elses_node_leaves_it_when_it_fails() -> None:
    api = FakeApi()

    def raced(zone: str, name: str, resource: dict[str, Any]) -> str | None:
        api.add(name, "CREATING", health="", **resource)  # someone's create got there first: ours meets 409
        api.script[name] = ["CREATING", "TERMINATED"]
        return None

    api.create_node = raced  # type: ignore[method-assign]
    with pytest.raises(TpuctlError, match="became TERMINATED") as failed:
        _run(lifecycle.ensure, api, SPEC)
    assert "deleted" not in failed.value.message and "my-tpu" in api.nodes

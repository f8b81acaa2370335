"""The capacity hunt (tpuctl/cloud/capacity/hunt.py) against a fake of Google's TPU API across zones.

The fake scripts, per zone, how the next create's operation ends — as the TPU API ends a stockout (code 8 with
its capacity message, code 9, code 3 naming PREEMPTED, code 13) or a quota refusal (code 8 naming a quota) —
and what the node looks like meanwhile. tpuctl's lifecycle, NodeSpec, stockout memory and hunt are the real ones.
Nothing sleeps: the hunt's clock is a counter the fake's polls advance.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.standins.tpu_fakes import BASE, FLEX, FLEX_BASE, ON_DEMAND, PROJECT, RESERVATION, SPOT, ZonedApi, memory, no_sleep, saved, zones
from tpuctl.cloud.capacity.hunt import Candidate, HuntStopped, HuntTerms, hunt
from tpuctl.cloud.nodes import lifecycle
from tpuctl.cloud.nodes.creating import Terms
from tpuctl.endings import INTERRUPTED
from tpuctl.inputs.errors import FAILED, CapacityError, TpuctlError
from tpuctl.tpu import stockouts
from tpuctl.tpu.capacity import Capacity

pytestmark = pytest.mark.usefixtures("private_dirs")


def run(api: ZonedApi, candidates: list[Candidate], **extra: Any) -> tuple[Any, list[str]]:
    said: list[str] = []
    options: dict[str, Any] = {"runtime_given": False, "sleep": no_sleep, "clock": lambda: api.clock[0], **extra}
    base = options.pop("base", BASE)
    return hunt(api, base, candidates, lambda state, elapsed: None, HuntTerms(**options), say=said.append), said


def test_each_stockout_moves_on_leaves_nothing_and_is_remembered(tmp_path: Path) -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"], "z2-west1-a": ["reserved"], "z3-west1-a": ["preempted"], "z4-west1-a": ["internal", "internal"]})
    candidates = zones("z1-west1-a", "z2-west1-a", "z3-west1-a", "z4-west1-a", "z5-west1-a")
    done, said = run(api, candidates)
    assert done.candidate == candidates[4] and done.ensured.created and done.ensured.node.ready
    assert [t.why for t in done.tried] == [
        "no capacity (code 8)", "no capacity (code 9)", "no capacity (preempted while being created)", "no capacity (code 13 twice)",
    ]  # fmt: skip
    assert said[0] == "z1-west1-a v5litepod-16 spot: no capacity (code 8), next: z2-west1-a"
    assert said[3] == "z4-west1-a v5litepod-16 spot: no capacity (code 13 twice), next: z5-west1-a"
    assert list(api.nodes) == [("z5-west1-a", "hunt")]  # every try's leftovers deleted
    assert [z for z in ("z1-west1-a", "z2-west1-a", "z3-west1-a", "z4-west1-a", "z5-west1-a") if saved(z)] == ["z5-west1-a"]
    assert [(r["zone"], r["kind"], r["why"]) for r in memory(tmp_path)] == [
        ("z1-west1-a", "spot", "zone"), ("z2-west1-a", "spot", "reserved"), ("z3-west1-a", "spot", "preempted"), ("z4-west1-a", "spot", "internal"),
    ]  # fmt: skip


def test_a_permission_refusal_stops_at_once_saying_what_was_tried(tmp_path: Path) -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"], "z2-west1-a": ["permission"]})
    with pytest.raises(HuntStopped) as stopped:
        run(api, zones("z1-west1-a", "z2-west1-a", "z3-west1-a"))
    assert stopped.value.exit_code == FAILED and [t.candidate.zone for t in stopped.value.tried] == ["z1-west1-a"]
    assert stopped.value.message.endswith("tried before: z1-west1-a v5litepod-16 spot (no capacity (code 8))")
    assert type(stopped.value).__name__ == "HuntStopped" and "tpu.nodes.create" in stopped.value.message
    assert not any(call.startswith("create z3") for call in api.calls) and api.nodes == {} and saved("z2-west1-a") is None
    assert [r["zone"] for r in memory(tmp_path)] == ["z1-west1-a"]  # a permission refusal is no stockout


def test_a_quota_refusal_leaves_out_its_zone_says_so_and_the_hunt_goes_on(tmp_path: Path) -> None:
    """Issue 45: quota is per zone (and region): another zone may have it. The refused zone's later candidates on the
    same quota are left out, another type's stay; nothing is remembered as a stockout."""
    api = ZonedApi(endings={"z1-west1-a": ["quota"], "z2-west1-a": ["ok"]})
    candidates = [*zones("z1-west1-a"), *zones("z1-west1-a", accelerator_type="v5litepod-32"), *zones("z1-west1-a", accelerator_type="v6e-8"),
                  *zones("z2-west1-a")]  # fmt: skip
    api.endings["z1-west1-a"] += ["capacity"]  # the v6e-8 try there
    done, said = run(api, candidates)
    assert done.candidate == candidates[3]
    quota = "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI in zone z1-west1-a"
    assert [(t.candidate.accelerator_type, t.why) for t in done.tried] == [
        ("v5litepod-16", f"quota refused ({quota})"), ("v5litepod-32", f"skipped: {quota} refused z1-west1-a"), ("v6e-8", "no capacity (code 8)"),
    ]  # fmt: skip
    assert said[0] == f"z1-west1-a v5litepod-16 spot: quota refused ({quota}); leaving out zone z1-west1-a for this quota, next: z1-west1-a"
    assert not any("v5litepod-32" in call for call in api.calls) and "--spot" not in " ".join(said)
    assert [r["zone"] for r in memory(tmp_path)] == ["z1-west1-a"] and memory(tmp_path)[0]["type"] == "v6e-8"  # the quota refusal: no stockout


def test_a_region_quota_refusal_leaves_out_the_whole_region() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["region-quota"]})
    done, said = run(api, zones("z1-west1-a", "z1-west1-b", "z2-west1-a"))
    assert done.candidate.zone == "z2-west1-a" and [c.split()[1] for c in api.calls if c.startswith("create")] == ["z1-west1-a", "z2-west1-a"]
    quota = "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI in region z1-west1"
    assert [t.why for t in done.tried] == [f"quota refused ({quota})", f"skipped: {quota} refused z1-west1-a"]
    assert "leaving out region z1-west1 for this quota, next: z2-west1-a" in said[0]


def test_the_first_try_failing_otherwise_is_its_own_error_as_in_one_zone() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["permission"], "z2-west1-a": ["quota"]})
    with pytest.raises(TpuctlError) as failed:
        run(api, zones("z1-west1-a", "z2-west1-a"))
    assert type(failed.value).__name__ == "AccessDenied"
    with pytest.raises(TpuctlError) as refused:  # a quota refusal that leaves nothing else to try is the create's own error
        run(api, zones("z2-west1-a"))
    assert type(refused.value).__name__ == "QuotaError" and "nothing was left behind" in refused.value.message


def test_all_stocked_out_is_one_line_with_every_zone_and_why() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"], "z2-west1-a": ["stuck"]})
    with pytest.raises(HuntStopped) as stopped:
        run(api, zones("z1-west1-a", "z2-west1-a"), create_deadline_s=0.0)
    message = stopped.value.message
    assert message.startswith("no capacity in any of 2 candidates; tried before: z1-west1-a v5litepod-16 spot (no capacity (code 8)), ")
    assert message.endswith("z2-west1-a v5litepod-16 spot (no capacity (stuck in CREATING))") and api.nodes == {}


def test_the_hunt_timeout_caps_each_try_and_ends_the_hunt(tmp_path: Path) -> None:
    """A zone that leaves the create CREATING gets what is left of the hunt, not the whole create-deadline; it took the
    whole budget, so it is remembered as slow (and a rerun ranks it last, as a stockout: test_hunt_candidates)."""
    api = ZonedApi(endings={"z1-west1-a": ["stuck"], "z2-west1-a": ["stuck"]})
    began = time.monotonic()
    said: list[str] = []
    with pytest.raises(HuntStopped, match=r"^no capacity found within --hunt-timeout 0.3 s; tried before: z1-west1-a ") as stopped:
        terms = HuntTerms(runtime_given=False, timeout_s=0.3, clock=time.monotonic, sleep=lambda s: time.sleep(0.02), create_deadline_s=3600.0)
        hunt(api, BASE, zones("z1-west1-a", "z2-west1-a"), lambda state, elapsed: None, terms, say=said.append)
    assert 0.3 <= time.monotonic() - began < 5.0
    assert [t.why for t in stopped.value.tried] == ["no capacity (stuck in CREATING)"] and api.nodes == {}
    assert [(r["zone"], r["why"]) for r in memory(tmp_path)] == [("z1-west1-a", stockouts.SLOW)]  # no stockout: slow
    assert said == ["z1-west1-a v5litepod-16 spot: stuck in CREATING when --hunt-timeout ran out; remembered as slow, a rerun tries it last"]
    assert stockouts.recent(PROJECT, "z1-west1-a", "v5litepod-16", "spot") is not None  # what ranks it last next time


def test_types_then_kinds_in_the_given_order_and_a_fallback_says_what_changed() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity", "capacity"]})
    candidates = [*zones("z1-west1-a"), *zones("z1-west1-a", kind=ON_DEMAND), *zones("z2-east1-d", accelerator_type="v6e-8")]
    done, said = run(api, candidates)
    assert api.calls[0] == "create z1-west1-a v5litepod-16 spot=True" and api.calls[2] == "create z1-west1-a v5litepod-16 spot=False"
    assert api.calls[-1] == "create z2-east1-d v6e-8 spot=True"
    assert done.ensured.spec.runtime_version == "v2-alpha-tpuv6e" and done.ensured.spec.accelerator_type == "v6e-8"
    assert done.changed == ["type v5litepod-16 -> v6e-8", "hosts 4 -> 1", "runtime tpu-vm-tf-2.16.1-pod-pjrt -> v2-alpha-tpuv6e"]
    assert said[1].startswith("z1-west1-a v5litepod-16 on-demand: no capacity (code 8), next: z2-east1-d")


def test_a_named_runtime_is_kept_for_every_type() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"]})
    done, _ = run(api, [*zones("z1-west1-a"), *zones("z2-east1-d", accelerator_type="v6e-8")], runtime_given=True)
    assert done.ensured.spec.runtime_version == BASE.runtime_version and done.changed == ["type v5litepod-16 -> v6e-8", "hosts 4 -> 1"]


def test_an_image_chosen_for_a_type_is_its_own_and_a_fallback_type_keeps_its_default() -> None:
    """launch --new-tpu picks each type's image (tfpair/choice.py); a type it chose none for gets tpuctl's default."""
    api = ZonedApi(endings={"z1-west1-a": ["capacity"]})
    chosen = {"v5litepod-16": "tpu-vm-tf-2.15.1-pod-pjrt"}
    done, _ = run(api, [*zones("z1-west1-a"), *zones("z2-east1-d", accelerator_type="v6e-8")], images=chosen)
    assert done.ensured.spec.runtime_version == "v2-alpha-tpuv6e"
    assert done.changed == ["type v5litepod-16 -> v6e-8", "hosts 4 -> 1", "runtime tpu-vm-tf-2.15.1-pod-pjrt -> v2-alpha-tpuv6e"]
    first, _ = run(ZonedApi(), zones("z1-west1-a"), images=chosen)
    assert first.ensured.spec.runtime_version == "tpu-vm-tf-2.15.1-pod-pjrt"


def test_a_rerun_reuses_the_node_an_earlier_hunt_made() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"]})
    first, _ = run(api, zones("z1-west1-a", "z2-west1-a"))
    again, said = run(api, zones("z1-west1-a", "z2-west1-a"))
    assert first.candidate.zone == again.candidate.zone == "z2-west1-a" and not again.ensured.created and said == []
    assert [call for call in api.calls if call.startswith("create")] == ["create z1-west1-a v5litepod-16 spot=True", "create z2-west1-a v5litepod-16 spot=True"]


def test_ctrl_c_mid_try_deletes_the_try_and_exits_130(tmp_path: Path) -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"], "z2-west1-a": ["interrupt"]})
    with pytest.raises(HuntStopped) as stopped:
        run(api, zones("z1-west1-a", "z2-west1-a", "z3-west1-a"))
    assert stopped.value.exit_code == INTERRUPTED
    assert stopped.value.message.startswith(
        "interrupted while creating hunt in z2-west1-a; the CREATING node it had made was deleted, nothing was left behind; tried before: z1-"
    )
    assert api.nodes == {} and saved("z2-west1-a") is None and "delete z2-west1-a" in api.calls


def test_a_second_ctrl_c_names_what_is_left_and_how_to_delete_it() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["interrupt"]}, interrupt_deletes=True)
    with pytest.raises(HuntStopped) as stopped:
        run(api, zones("z1-west1-a", "z2-west1-a"))
    assert stopped.value.exit_code == INTERRUPTED
    assert stopped.value.message == (
        "interrupted while creating hunt in z1-west1-a; it may be left: `tpuctl delete hunt --zone z1-west1-a` deletes it; "
        "no other candidate was tried"
    )


def test_ctrl_c_leaves_a_node_that_was_there_before() -> None:
    api = ZonedApi()
    path = "projects/tpuctl-test/locations/z1-west1-a/nodes/hunt"
    api.nodes[("z1-west1-a", "hunt")] = {"name": path, "state": "CREATING", **BASE.with_capacity(SPOT).resource()}
    api.pending[("z1-west1-a", "x")] = "stuck"

    def interrupt(state: str, elapsed: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(HuntStopped, match="was there before and is left as it is") as stopped:
        hunt(api, BASE, zones("z1-west1-a"), interrupt, HuntTerms(runtime_given=False, sleep=no_sleep), say=print)
    assert stopped.value.exit_code == INTERRUPTED and ("z1-west1-a", "hunt") in api.nodes


def test_a_type_without_a_known_image_is_refused_before_any_create() -> None:
    api = ZonedApi()
    with pytest.raises(TpuctlError, match="no TensorFlow runtime image for v9-8"):
        run(api, [*zones("z1-west1-a"), *zones("z2-west1-a", accelerator_type="v9-8")])
    assert api.calls == []
    with pytest.raises(TpuctlError, match="no candidate to try"):
        run(api, [])


@pytest.mark.parametrize("kind", [FLEX, RESERVATION])
def test_ctrl_c_while_queued_deletes_the_queued_resource(kind: Capacity) -> None:
    """flex-start and reserved=NAME queue (NodeSpec.queues) though --queued was not given: the request is deleted."""
    api = ZonedApi(queue_endings={"z1-west1-a": ["interrupt"]})
    with pytest.raises(HuntStopped) as stopped:
        run(api, zones("z1-west1-a", "z2-west1-a", kind=kind), base=FLEX_BASE)
    assert stopped.value.exit_code == INTERRUPTED and "nothing was left behind" in stopped.value.message
    assert api.queued == {} and "delete queued z1-west1-a" in api.calls and saved("z1-west1-a") is None


def test_ctrl_c_while_queued_names_the_queued_resource_delete_when_it_fails() -> None:
    api = ZonedApi(queue_endings={"z1-west1-a": ["interrupt"]}, queued_deletes_fail=True)
    with pytest.raises(HuntStopped) as stopped:
        run(api, zones("z1-west1-a", kind=FLEX), base=FLEX_BASE)
    assert "it may be left: `tpuctl delete hunt --zone z1-west1-a` deletes it" in stopped.value.message  # the queued resource too


def test_a_queued_try_still_waiting_past_the_try_deadline_moves_on_to_the_next_kind(tmp_path: Path) -> None:
    api = ZonedApi(queue_endings={"z1-west1-a": ["waiting"]})
    done, said = run(api, [*zones("z1-west1-a", kind=FLEX), *zones("z1-west1-a")], base=FLEX_BASE, create_deadline_s=0.0)
    assert done.candidate.capacity == SPOT and [t.why for t in done.tried] == ["no capacity (still queued)"]
    assert said[0] == "z1-west1-a v5litepod-16 flex-start: no capacity (still queued), next: z1-west1-a"
    assert api.queued == {} and list(api.nodes) == [("z1-west1-a", "hunt")]  # the request was deleted
    assert [(r["kind"], r["why"]) for r in memory(tmp_path)] == [("flex-start", "queued")]


def test_a_plain_queued_create_keeps_waiting_past_create_deadline() -> None:
    """Without a hunt, a queued request waits as long as the queue keeps it, as `create --queued` always has."""
    api = ZonedApi(queue_endings={"z1-west1-a": ["waiting"]})
    spec = replace(FLEX_BASE.with_capacity(FLEX), zone="z1-west1-a")
    with pytest.raises(AssertionError, match="the wait never ended"):
        lifecycle.ensure(api, spec, lambda state, elapsed: None, Terms(deadline_s=0.0, sleep=no_sleep))


def test_a_rerun_asking_elsewhere_stops_rather_than_make_a_second_node() -> None:
    api = ZonedApi(endings={"z1-west1-a": ["capacity"]})
    run(api, zones("z1-west1-a", "z2-west1-a"))
    with pytest.raises(TpuctlError) as stopped:
        run(api, zones("z3-west1-a", "z1-west1-a", kind=ON_DEMAND))
    assert stopped.value.exit_code == FAILED
    assert stopped.value.message == (
        "node hunt already exists in zone z2-west1-a with a different spec: v5litepod-16 spot in z2-west1-a is none of this hunt's candidates"
    )
    assert list(api.nodes) == [("z2-west1-a", "hunt")] and len([c for c in api.calls if c.startswith("create")]) == 2


def test_a_queued_try_failing_otherwise_leaves_no_spec_and_no_queued_resource() -> None:
    api = ZonedApi(queue_endings={"z1-west1-a": ["permission"]})
    with pytest.raises(TpuctlError) as failed:
        run(api, zones("z1-west1-a", "z2-west1-a", kind=RESERVATION))
    assert not isinstance(failed.value, CapacityError) and "FAILED queued resource it left was deleted" in failed.value.message
    assert api.queued == {} and saved("z1-west1-a") is None


def test_the_internal_error_retry_gets_only_the_time_left() -> None:
    """A second create after an opaque INTERNAL is bounded by what the first left of the try's deadline."""
    api = ZonedApi(endings={"z1-west1-a": ["late-internal", "stuck"]})
    seen: list[str] = []
    spec = replace(BASE.with_capacity(SPOT), zone="z1-west1-a")
    with pytest.raises(CapacityError, match="stuck in CREATING"):
        lifecycle.ensure(api, spec, lambda state, elapsed: seen.append(state), Terms(deadline_s=1.0, sleep=lambda s: time.sleep(0.01)))
    retried = seen[seen.index("internal error; trying once more") + 1 :]
    assert retried.count("CREATING") <= 2  # the full deadline again polls for a second (~30 polls)

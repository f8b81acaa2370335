"""Babysit's recovery policies (tpuctl/cloud/capacity/recovery.py) against test_hunt's fake of the TPU API across zones.

The fake scripts how each zone's next create ends, as the TPU API ends a stockout or a refusal; recreate, the hunt,
NodeSpec, the stockout memory and the babysit loop are tpuctl's own.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.standins.scripted_workers import FakeCommand, Runs
from tests.standins.tpu_fakes import BASE, ON_DEMAND, PROJECT, ZonedApi, memory, no_sleep, saved, zones
from tpuctl.cloud.capacity.hunt import Candidate, HuntStopped
from tpuctl.cloud.capacity.recovery import STRATEGIES, ElsewhereFirst, Lost, Recovered, SameZoneFirst, Tries, own_capacity, recover, strategy
from tpuctl.cloud.nodes import babysit, nodespec
from tpuctl.cloud.nodes.babysit import BabysitTerms
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.inputs.errors import CapacityError, TpuctlError
from tpuctl.tpu.capacity import Recovery

OWN = "z0-west1-a"
LOST = replace(BASE, zone=OWN, spot=True)  # a spot node babysat in its own zone, its spec saved by create
ELSEWHERE = "z1-west1-a"

pytestmark = pytest.mark.usefixtures("private_dirs")


@pytest.fixture
def api() -> ZonedApi:
    nodespec.save(LOST)
    fake = ZonedApi()
    fake.nodes[(OWN, "hunt")] = {"name": LOST.path(), "state": "PREEMPTED", **LOST.resource()}
    return fake


class Asked:
    """The hunt's candidates, counting how often they were gathered (offers read every zone: only when needed)."""

    def __init__(self, candidates: list[Candidate]) -> None:
        self.candidates, self.times = candidates, 0

    def __call__(self) -> list[Candidate]:
        self.times += 1
        return self.candidates


def back(api: ZonedApi, asked: Asked | None, recovery: Recovery | None = Recovery.SAME_ZONE_FIRST) -> tuple[Recovered, list[str]]:
    said: list[str] = []
    return recover(Lost(api, LOST, asked), Tries(lambda state, elapsed: None, said.append, sleep=no_sleep), recovery), said


def creates(api: ZonedApi) -> list[str]:
    return [call.split()[1] for call in api.calls if call.startswith("create")]


def test_each_recovery_setting_names_one_strategy_class_and_none_takes_the_node_s_kind_default() -> None:
    """The strategies are classes registered under the recovery setting's names, as SkyPilot registers its own
    (sky/jobs/recovery_strategy.py); elsewhere-first is a same-zone-first that goes elsewhere first, as EAGER_NEXT_REGION is a FAILOVER."""
    assert {name: type(each) for name, each in STRATEGIES.items()} == {Recovery.SAME_ZONE_FIRST: SameZoneFirst, Recovery.ELSEWHERE_FIRST: ElsewhereFirst}
    assert issubclass(ElsewhereFirst, SameZoneFirst) and all(each.name is name for name, each in STRATEGIES.items())
    assert [type(strategy(None, replace(LOST, spot=spot))) for spot in (True, False)] == [ElsewhereFirst, SameZoneFirst]
    assert type(strategy(Recovery.SAME_ZONE_FIRST, LOST)) is SameZoneFirst


def test_the_own_zone_comes_first_and_gathers_no_offers(api: ZonedApi) -> None:
    asked = Asked(zones("z1-west1-a"))
    done, said = back(api, asked)
    assert done.ensured.spec.zone == OWN and done.line == f"recreated in its own zone {OWN}"
    assert api.calls == [f"delete {OWN}", f"create {OWN} v5litepod-16 spot=True"] and asked.times == 0 and said == []


def test_a_stocked_out_own_zone_hunts_the_others_and_moves_the_saved_spec(api: ZonedApi, tmp_path: Path) -> None:
    api.endings = {OWN: ["capacity"], "z1-west1-a": ["reserved"]}
    asked = Asked([*zones(OWN, "z1-west1-a", "z2-west1-a"), Candidate("v5litepod-16", ON_DEMAND, "z3-west1-a")])
    done, said = back(api, asked)
    assert done.ensured.spec.zone == "z2-west1-a" and done.ensured.spec.spot and done.ensured.node.ready
    assert done.line == f"recreated in z2-west1-a as spot: {OWN} has no capacity (code 8) after 1 more stocked-out candidate"
    creates = [call for call in api.calls if call.startswith("create")]
    assert creates == [f"create {z} v5litepod-16 spot=True" for z in (OWN, "z1-west1-a", "z2-west1-a")]  # the own zone once
    assert said[0] == f"{OWN} has no capacity (code 8); hunting over 3 other candidates, next: z1-west1-a"
    assert said[1] == "z1-west1-a v5litepod-16 spot: no capacity (code 9), next: z2-west1-a"
    assert list(api.nodes) == [("z2-west1-a", "hunt")]
    assert saved(OWN) is None and saved("z2-west1-a") == done.ensured.spec  # describe, ssh, delete find it alone
    assert nodespec.saved_zones(PROJECT, "hunt") == ["z2-west1-a"]
    assert [(r["zone"], r["why"]) for r in memory(tmp_path)] == [(OWN, "zone"), ("z1-west1-a", "reserved")]


def test_without_zones_to_hunt_a_stockout_ends_as_today_and_keeps_the_spec(api: ZonedApi) -> None:
    api.endings = {OWN: ["capacity"]}
    with pytest.raises(CapacityError) as ended:
        back(api, None)
    assert ended.value.message.startswith(f"{OWN}: no capacity for v5litepod-16 (code 8); ")
    assert saved(OWN) == LOST and not api.nodes


def test_a_failure_other_than_a_stockout_stops_at_once(api: ZonedApi) -> None:
    api.endings = {OWN: ["permission"]}
    asked = Asked(zones("z1-west1-a"))
    with pytest.raises(TpuctlError) as ended:
        back(api, asked)
    assert "tpu.nodes.create" in ended.value.message and not isinstance(ended.value, CapacityError)
    assert asked.times == 0 and saved(OWN) == LOST


def test_a_hunt_with_nowhere_left_keeps_the_nodes_own_spec(api: ZonedApi) -> None:
    """A try of another kind in the own zone saves its spec over the node's; the node's own is put back."""
    api.endings = {OWN: ["capacity", "capacity"], "z1-west1-a": ["capacity"]}
    asked = Asked([Candidate("v5litepod-16", ON_DEMAND, OWN), *zones("z1-west1-a")])
    with pytest.raises(HuntStopped) as ended:
        back(api, asked)
    assert ended.value.message.startswith("no capacity in any of 2 candidates; ")
    assert saved(OWN) == LOST and nodespec.saved_zones(PROJECT, "hunt") == [OWN] and not api.nodes


class Preempting(FakeCommand):
    """A training the node is taken from: its first look preempts the node, and it runs on until stopped."""

    def __init__(self, api: ZonedApi) -> None:
        super().__init__(None)
        self.api = api

    def poll(self) -> int | None:
        self.api.nodes[(OWN, "hunt")]["state"] = "PREEMPTED"
        return None


def test_babysit_reruns_the_command_against_the_node_in_its_new_zone(api: ZonedApi) -> None:
    api.nodes[(OWN, "hunt")].update(state="READY", health="HEALTHY")
    api.endings = {OWN: ["capacity"]}
    notes: list[str] = []
    runs = Runs(Preempting(api), FakeCommand(0))
    watch = BabysitTerms(("train",), 0.01, note=notes.append, start=runs, pause=no_sleep, candidates=Asked(zones(ELSEWHERE)), recovery=Recovery.SAME_ZONE_FIRST)
    assert babysit.babysit(api, LOST, watch) == 0
    assert notes[notes.index("hunt is PREEMPTED; stopping the command") :] == [
        "hunt is PREEMPTED; stopping the command",
        "hunt is PREEMPTED; recreating it (1/10)",
        f"{OWN} has no capacity (code 8); hunting over 1 other candidate, next: {ELSEWHERE}",
        f"hunt is READY again: recreated in {ELSEWHERE} as spot: {OWN} has no capacity (code 8)",
        "running train",
        "the command finished",
    ]
    assert runs.started[0].stopped and len(runs.started) == 2
    assert list(api.nodes) == [(ELSEWHERE, "hunt")] and nodespec.saved_zones(PROJECT, "hunt") == [ELSEWHERE]


@pytest.mark.parametrize("kind", ["flex-start", "reserved"])
def test_a_queued_node_comes_back_in_its_own_zone_only(api: ZonedApi, kind: str) -> None:
    """flex-start and a named reservation queue (NodeSpec.queues), as --queued does: the request waits where it was."""
    spec = replace(BASE, zone=OWN, flex_start=True, max_run_duration="2h") if kind == "flex-start" else replace(BASE, zone=OWN, reserved=True, reservation="r1")
    nodespec.save(spec)
    api.nodes.clear()
    api.queue_endings = {OWN: ["capacity"]}
    asked = Asked(zones("z1-west1-a"))
    with pytest.raises(CapacityError):
        recover(Lost(api, spec, asked), Tries(lambda state, elapsed: None, print, sleep=no_sleep))
    assert asked.times == 0 and not any(call.startswith("create z1") for call in api.calls)


@pytest.mark.parametrize(
    ("recovery", "order"),
    [(Recovery.SAME_ZONE_FIRST, [OWN, ELSEWHERE, "z2-west1-a"]), (Recovery.ELSEWHERE_FIRST, [ELSEWHERE, "z2-west1-a"])],
)
def test_same_zone_first_tries_the_preempted_zone_first_and_elsewhere_first_last(api: ZonedApi, recovery: Recovery, order: list[str]) -> None:
    """Both zones stocked out: same-zone-first meets its own zone first; elsewhere-first never gets that far."""
    api.endings = {OWN: ["capacity"], ELSEWHERE: ["capacity"]}
    done, said = back(api, Asked(zones(OWN, ELSEWHERE, "z2-west1-a")), recovery)
    assert creates(api) == order and done.ensured.spec.zone == "z2-west1-a" and list(api.nodes) == [("z2-west1-a", "hunt")]
    assert api.calls[0] == f"delete {OWN}"  # the lost node goes first either way
    if recovery is Recovery.ELSEWHERE_FIRST:
        assert said[0] == f"elsewhere-first: hunting over 2 other candidates before {OWN}, next: {ELSEWHERE}"
        assert done.line == f"recreated in z2-west1-a as spot: elsewhere-first ({OWN} last) after 1 stocked-out candidate"
    assert saved(OWN) is None and nodespec.saved_zones(PROJECT, "hunt") == ["z2-west1-a"]


def test_elsewhere_first_comes_back_to_the_own_zone_last(api: ZonedApi, tmp_path: Path) -> None:
    api.endings = {ELSEWHERE: ["capacity"], "z2-west1-a": ["reserved"]}
    asked = Asked(zones(ELSEWHERE, "z2-west1-a"))
    done, _ = back(api, asked, Recovery.ELSEWHERE_FIRST)
    assert creates(api) == [ELSEWHERE, "z2-west1-a", OWN] and asked.times == 1
    assert done.ensured.spec == LOST and done.ensured.node.ready and list(api.nodes) == [(OWN, "hunt")]
    assert done.line == f"recreated in {OWN} as spot: elsewhere-first ({OWN} last) after 2 stocked-out candidates"
    assert nodespec.saved_zones(PROJECT, "hunt") == [OWN] and saved(OWN) == LOST
    assert [r["zone"] for r in memory(tmp_path)] == [ELSEWHERE, "z2-west1-a"]


def test_elsewhere_first_with_nowhere_else_is_the_own_zone_and_a_live_node_is_kept(api: ZonedApi) -> None:
    done, said = back(api, Asked([]), Recovery.ELSEWHERE_FIRST)
    assert creates(api) == [OWN] and done.line == f"recreated in its own zone {OWN}" and said == []
    asked = Asked(zones(ELSEWHERE))
    again, _ = back(api, asked, Recovery.ELSEWHERE_FIRST)  # READY again: nothing to move, no offers gathered
    assert creates(api) == [OWN] and again.ensured.node.ready and not again.ensured.created and asked.times == 0


@pytest.mark.parametrize(
    ("spec", "first"),
    [
        (LOST, ELSEWHERE),  # spot: taken back by its zone
        (replace(LOST, spot=False, preemptible=True), ELSEWHERE),
        (replace(LOST, spot=False), OWN),  # on-demand
        (replace(LOST, spot=False, reserved=True), OWN),  # any reservation of the project: no queued resource
    ],
)
def test_the_default_follows_the_kind(api: ZonedApi, spec: NodeSpec, first: str) -> None:
    """Elsewhere first for spot and preemptible (SkyPilot's default, EAGER_NEXT_REGION), the own zone first otherwise."""
    nodespec.save(spec)
    api.nodes[(OWN, "hunt")] = {"name": spec.path(), "state": "PREEMPTED", **spec.resource()}
    kind = own_capacity(spec)
    recover(Lost(api, spec, Asked(zones(OWN, ELSEWHERE, kind=kind))), Tries(lambda state, elapsed: None, print, sleep=no_sleep))
    assert creates(api)[0] == first
    assert Recovery.default_for(spec.capacity()) is (Recovery.ELSEWHERE_FIRST if first == ELSEWHERE else Recovery.SAME_ZONE_FIRST)
    assert Recovery.default_for("flex-start") is Recovery.SAME_ZONE_FIRST


@pytest.mark.parametrize(("spot", "bounded"), [(True, True), (False, False)])
def test_same_zone_first_gives_a_spot_node_s_own_zone_a_third_of_the_deadline_while_others_wait(
    api: ZonedApi, tmp_path: Path, spot: bool, bounded: bool
) -> None:
    """A zone that just took a spot node back, stuck CREATING, holds the others back a third of create-deadline, and is
    not remembered as stocked out (its own deadline did not end it); an on-demand node's own zone keeps the whole."""
    spec = replace(LOST, spot=spot)
    nodespec.save(spec)
    api.endings = {OWN: ["stuck"]}
    said: list[str] = []
    began = time.monotonic()
    tries = Tries(lambda state, elapsed: None, said.append, deadline_s=1.5, sleep=lambda s: time.sleep(min(s, 0.01)))
    done = recover(Lost(api, spec, Asked(zones(ELSEWHERE, kind=own_capacity(spec)))), tries, Recovery.SAME_ZONE_FIRST)
    took = time.monotonic() - began
    assert creates(api) == [OWN, ELSEWHERE] and done.ensured.spec.zone == ELSEWHERE
    if bounded:
        assert 0.5 <= took < 1.5, took  # a third of the deadline, then a hunt elsewhere that takes milliseconds
        look = "same-zone-first's look at a spot node's own zone"
        assert said[0] == f"{OWN} did not make it READY within 0.5 s ({look}); hunting over 1 other candidate, next: {ELSEWHERE}"
        assert memory(tmp_path) == []
    else:
        assert took >= 1.5
        assert said[0].startswith(f"{OWN} has no capacity (stuck in CREATING); hunting") and [r["zone"] for r in memory(tmp_path)] == [OWN]

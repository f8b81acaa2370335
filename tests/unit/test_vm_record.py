"""Issue 47: a run's VM state is a value. `VmRecord` moves only by its transitions (an illegal one raises), a record
file written before it reads into it as it always read, and the launch's provisioning step is the one writer of it:
the provisioner's typed events land in the run's record and timeline (launch/provisioning.py)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tpuctl.cloud.capacity.hunt import Candidate, Tried
from tpuctl.cloud.capacity.run_vm import Creating, Ended, Hunting, Provisioned, Recreated, Recreating
from tpuctl.cloud.nodes.creating import Naming
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.launch.console import logs
from tpuctl.launch.provisioning import VmJournal
from tpuctl.launch.runner import RunContext
from tpuctl.runs import records
from tpuctl.runs import timeline as tl
from tpuctl.runs.recorded import Keeper
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import NODE_DELETE, NODE_KEEP, IllegalTransition, NodeState, VmRecord
from tpuctl.tpu.capacity import Capacity

pytestmark = pytest.mark.usefixtures("private_dirs")

RUN = "20261128-142640-train-ab12"
NOW = 1_790_000_000.0
SPEC = NodeSpec("r-node", "proj", "us-central2-b", "tpu-vm-tf-2.16.1-pjrt", "v4-8")
MOVED = dataclasses.replace(SPEC, zone="us-central2-a", spot=True)


def _ready() -> VmRecord:
    return VmRecord().naming("r-node", "proj", "us-central2-b", NODE_DELETE).priced("v4-8", "us-central2-b", "on-demand", 3.2, "list").ready()


def test_the_vm_goes_through_its_life_one_value_at_a_time() -> None:
    named = VmRecord().naming("r-node", "proj", "us-central2-b", NODE_KEEP)
    assert (named.state, named.node_fate, named.bills, named.tpu) == (NodeState.CREATING, "live", True, None)  # may exist, not priced yet
    ready = named.priced("v4-8", "us-central2-b", "on-demand", 3.2, "list").ready()
    lost = ready.recreating(3.2, NOW)
    assert (lost.state, lost.cost_before, lost.priced_since) == (NodeState.RECREATING, 3.2, NOW)
    moved = lost.naming("r-node", "proj", "us-central2-a", NODE_KEEP)
    assert (moved.state, moved.zone) == (NodeState.RECREATING, "us-central2-a")  # a recreate's try names its zone, still recreating
    back = moved.priced("v4-8", "us-central2-a", "spot", 1.0, "list").ready()
    assert (back.state, back.capacity, back.price_per_hour, ready.state) == (NodeState.READY, "spot", 1.0, NodeState.READY)  # each a new value
    for end, fate in ((NodeState.DELETED, "deleted"), (NodeState.KEPT, "kept"), (NodeState.LOST, "deleted")):
        done = back.ended(end)
        assert (done.state, done.node_fate, done.bills) == (end, fate, False)


@pytest.mark.parametrize(
    "step",
    [
        lambda vm: vm.ready(),  # a READY VM is not made READY again
        lambda vm: vm.naming("r-node", "proj", "z", NODE_DELETE),  # nor named for a create
        lambda vm: vm.priced("v4-8", "z", "spot", 1.0, ""),
        lambda vm: vm.ended(NodeState.DELETED).recreating(None, NOW),  # a deleted VM is not recreated
        lambda vm: vm.ended(NodeState.KEPT).ended(NodeState.DELETED),  # nor ended twice
        lambda vm: vm.ended(NodeState.READY),  # READY is no end
        lambda vm: VmRecord().ready(),  # nothing named: nothing to be READY
        lambda vm: VmRecord().ended(NodeState.LOST),
        lambda vm: vm.recreating(None, NOW).recreating(None, NOW),
    ],
)
def test_an_illegal_transition_raises(step: Callable[[VmRecord], VmRecord]) -> None:
    with pytest.raises(IllegalTransition):
        step(_ready())


def test_the_values_are_frozen() -> None:
    record = RunRecord(RUN, "ssh", "t.py", "/logs", NOW, 1, "h", vm=_ready())
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.vm.state = NodeState.DELETED  # type: ignore[misc, union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.vm = None  # type: ignore[misc]


def _old(**fields: object) -> dict[str, object]:
    """A record file as tpuctl wrote it before issue 47: the VM's fields flat, no node_state, no kind."""
    return {"run_id": RUN, "backend": "ssh", "script": "train.py", "log_dir": "/logs/r", "started": NOW, "pid": 42, "host": "h", "detached": False,
            "state": "succeeded", "ended": NOW + 60, "exit_code": 0, "job": None, "answers_stacks": False, "goodput": None, "tpu": None, "zone": None,
            "capacity": None, "price_per_hour": None, "price_note": None, "created_node": None, "project": None, "node_fate": None, "node_end": None,
            "cost_before": None, "priced_since": None, "pid_start": None, **fields}  # fmt: skip


@pytest.mark.parametrize(("fate", "state"), [("live", NodeState.READY), ("deleted", NodeState.DELETED), ("kept", NodeState.KEPT)])
def test_an_old_record_file_reads_into_the_value(fate: str, state: NodeState) -> None:
    vm_fields = {"tpu": "v4-8", "zone": "z", "capacity": "spot", "price_per_hour": 2.0, "price_note": "list", "created_node": "r-node",
                 "project": "p", "node_fate": fate, "node_end": "delete", "cost_before": 1.5, "priced_since": NOW + 10}  # fmt: skip
    record = RunRecord.from_json(_old(**vm_fields))
    assert record.vm == VmRecord("v4-8", "z", "spot", 2.0, "list", "r-node", "p", state, "delete", 1.5, NOW + 10)
    assert (record.kind, record.bills) == ("launch", fate == "live") and record.cost() == pytest.approx(1.5 + 50 / 3600 * 2.0)  # ended at NOW + 60
    again = record.to_json()
    assert {key: again[key] for key in vm_fields} == vm_fields and again["node_state"] == state.value  # its fields as they were
    plain = RunRecord.from_json(_old(tpu="v4-8", zone="z", capacity="on-demand", price_per_hour=3.2, price_note="list"))  # --tpu NAME
    assert plain.vm is not None and (plain.vm.state, plain.vm.created_node, plain.bills) == (None, None, False)
    assert RunRecord.from_json(_old()).vm is None  # most runs: no VM at all


def test_an_old_babysit_record_reads_as_babysit_s_kind_not_a_backend() -> None:
    record = RunRecord.from_json(_old(backend="babysit", job="my-tpu"))
    assert (record.backend, record.kind) == (None, "babysit")
    written = RunRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert written == record and record.to_json()["backend"] is None
    with pytest.raises(ValueError, match="kind"):
        RunRecord.from_json({**record.to_json(), "backend": "babysit"})  # a backend holds launch backends only


def test_a_node_state_that_disagrees_with_its_fate_is_refused() -> None:
    raw = {**_old(created_node="r-node", project="p", zone="z", node_fate="live"), "node_state": "deleted"}
    with pytest.raises(ValueError, match="node_state"):
        RunRecord.from_json(raw)


def test_the_provisioning_step_writes_each_event_into_the_record_and_the_timeline(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    first = RunRecord(RUN, "ssh", "train.py", str(folder), time.time() - 7200, os.getpid(), socket.gethostname())
    written: list[VmRecord | None] = []

    class Watched(Keeper):
        """The run's keeper, each write it makes read back from the records folder."""

        def amend(self, **fields: Any) -> None:
            super().amend(**fields)
            written.append(records.read_all(print)[0].vm)

    timeline = tl.Timeline(folder / "timeline.jsonl")
    context = RunContext(RUN, folder, logs.LineWriter(io.StringIO()), print, False, timeline=timeline, keeper=Watched(first, print))
    journal = VmJournal(context, NODE_DELETE)
    tried = Tried(Candidate("v4-8", Capacity("spot"), "us-central2-c", 1.0), "no capacity (stockout)", 12.5)
    for event in (
        Hunting(("v4-8",), (tried.candidate, Candidate("v4-8", Capacity("on-demand"), SPEC.zone, 3.2))),
        Naming(SPEC),
        Creating(SPEC, 3.2, "list"),
        Provisioned(SPEC, (tried,), 3.2),
        Recreating(SPEC, "PREEMPTED"),
        Naming(MOVED),
        Recreated(MOVED, 1.0, "list"),
        Ended(MOVED, "deleted"),
    ):
        journal.hear(event)
    timeline.close()
    states = [vm.state if vm is not None else None for vm in written]
    assert states == [NodeState.CREATING, NodeState.CREATING, NodeState.READY, NodeState.RECREATING, NodeState.RECREATING, NodeState.READY, NodeState.DELETED]
    final = records.read_all(print)[0]
    assert final.vm is not None and (final.vm.created_node, final.vm.zone, final.vm.capacity, final.vm.price_per_hour) == ("r-node", MOVED.zone, "spot", 1.0)
    assert final.vm.cost_before == pytest.approx(2 * 3.2, rel=0.01) and not final.bills  # two hours on the first VM at its price
    lines = tl.read((folder / "timeline.jsonl").read_text().splitlines()).events
    assert [e.event for e in lines] == [tl.PROVISION_BEGIN, tl.NODE_CREATE, tl.PROVISION_END, tl.RECREATE_BEGIN, tl.RECREATE_END, tl.NODE_DELETE]
    assert lines[2].fields["tried"] == ["us-central2-c v4-8 spot: no capacity (stockout)"] and lines[2].fields["hunting_s"] == 12.5
    assert (lines[4].fields["zone"], lines[4].fields["capacity"], lines[5].fields["fate"]) == (MOVED.zone, "spot", "deleted")

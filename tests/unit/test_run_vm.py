"""launch --new-tpu's own rules, without a launch: the VM's name from a run id (hostile ids too), when the VM outlives
its run (--keep, --keep-on-failure), and the guard before any delete or recreate (the record's node AND the run's label),
against the in-memory fake of the TPU API the lifecycle tests use."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.standins.tpu_fakes import RUN, ZONE, FakeApi, run_vm
from tpuctl.cloud.capacity.run_vm import node_name
from tpuctl.cloud.nodes import nodespec
from tpuctl.cloud.nodes.nodespec import NODE_ID
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value
from tpuctl.endings import Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.provisioning import keeps

pytestmark = pytest.mark.usefixtures("private_dirs")


@given(st.text(min_size=1, max_size=300))
def test_any_run_id_gives_a_valid_node_name_that_is_its_label(run_id: str) -> None:
    name = node_name(run_id)
    assert NODE_ID.match(name) and len(name) <= 63
    assert name == label_value(run_id)


def test_a_long_run_id_keeps_its_time_and_names_one_run_alone() -> None:
    long = "20261128-142640-" + "a_very_long_script_name" * 5 + "-9f3c"
    twin = long[:-4] + "77aa"
    assert len(node_name(long)) <= 63 and node_name(long).startswith("r20261128-142640-a-very-long") and node_name(long) != node_name(twin)
    assert node_name(RUN).startswith("r" + RUN + "-")


@pytest.mark.parametrize(
    ("ended", "keep", "on_failure", "kept"),
    [
        (Kind.SUCCEEDED, False, False, False),
        (Kind.FAILED, False, False, False),
        (Kind.STOPPED, False, True, False),  # a Ctrl-C is no failure: the VM goes
        (Kind.SUCCEEDED, False, True, False),
        (Kind.FAILED, False, True, True),
        (Kind.HANG, False, True, True),
        (Kind.PREEMPTED, False, True, True),  # preemptions past --max-preemptions: the run failed
        (None, False, True, True),  # the launch failed before any worker said how it went
        (Kind.SUCCEEDED, True, False, True),
        (Kind.STOPPED, True, False, True),
    ],
)
def test_when_the_vm_outlives_its_run(ended: Kind | None, keep: bool, on_failure: bool, kept: bool) -> None:
    assert keeps(ended, keep, on_failure) is kept


def test_the_run_s_own_node_is_deleted_and_its_fate_logged() -> None:
    api = FakeApi()
    vm, log = run_vm(api)
    api.add(vm.name, "READY", labels={LABEL_KEY: label_value(RUN)})
    line = vm.delete(vm.name)
    assert line == f"deleting TPU VM {vm.name} in {ZONE}: the service accepted the delete"
    assert api.calls == [f"delete {vm.name}"] and log.said == [("ended", "deleted")]
    assert nodespec.load(api.project, ZONE, vm.name) is None


@pytest.mark.parametrize(
    ("labels", "recorded"),
    [
        ({}, "mine"),  # a node of that name the user made: no label
        ({LABEL_KEY: label_value("20261128-142640-train-ffff")}, "mine"),  # another run's
        ({LABEL_KEY: label_value(RUN)}, None),  # the record names no node
        ({LABEL_KEY: label_value(RUN)}, "another-node"),  # the record names another one
    ],
)
def test_a_node_that_is_not_the_run_s_is_never_deleted(labels: dict[str, str], recorded: str | None) -> None:
    api = FakeApi()
    vm, log = run_vm(api)
    api.add(vm.name, "READY", labels=labels)
    line = vm.delete(vm.name if recorded == "mine" else recorded)
    assert "is not this run's to delete" in line and "left as it is" in line
    assert api.calls == [] and vm.name in api.nodes
    # A node the record names but without the run's label is another's: the run's own VM is gone, as `stop` writes it.
    assert log.said == ([("ended", "lost")] if recorded == "mine" else [])


def test_a_node_gone_already_is_said_and_kept_says_how_to_delete() -> None:
    api = FakeApi()
    vm, log = run_vm(api)
    assert vm.delete(vm.name) == f"TPU VM {vm.name} in {ZONE} is gone already" and api.calls == []
    assert vm.keep("--keep") == f"TPU VM {vm.name} in {ZONE} is gone already: nothing to keep"  # never "kept" what is not there
    api.add(vm.name, "READY", labels={LABEL_KEY: label_value(RUN)})
    kept = vm.keep("--keep-on-failure: the run failed")
    assert kept.endswith(f"it bills until deleted: tpuctl delete {vm.name} --zone {ZONE}")
    assert log.said == [("ended", "lost"), ("ended", "lost"), ("ended", "kept")]


def test_a_lost_node_that_is_not_the_run_s_is_not_recreated() -> None:
    api = FakeApi()
    vm, log = run_vm(api)
    api.add(vm.name, "PREEMPTED", labels={LABEL_KEY: "someone-else"})
    with pytest.raises(TpuctlError, match="does not carry this run's label; tpuctl leaves it alone"):
        vm.recreate("PREEMPTED")
    assert api.calls == [] and log.said == []


def test_the_run_s_preempted_node_is_recreated_with_its_label_as_often_as_max_preemptions_allows() -> None:
    """--max-preemptions is the one budget: the supervisor counts the preemptions, RunVm keeps no limit of its own (it
    once stopped at babysit's 10, so a run with --max-preemptions 20 died at its 11th preemption)."""
    api = FakeApi()
    said: list[str] = []
    vm, log = run_vm(api, max_preemptions=20, say=said.append)
    api.add(vm.name, "PREEMPTED", labels={LABEL_KEY: label_value(RUN)})
    node = vm.recreate("PREEMPTED")
    assert node.ready and api.calls == [f"delete {vm.name}", f"create {vm.name}"]
    assert api.nodes[vm.name]["labels"] == {LABEL_KEY: label_value(RUN)}  # the saved spec's label: still the run's node
    assert log.said == [("recreating", "PREEMPTED"), ("naming", ZONE), ("recreated", ZONE)]  # named before the create is sent
    for _ in range(11):
        api.nodes[vm.name]["state"] = "PREEMPTED"
        assert vm.recreate("PREEMPTED").ready
    assert vm.recreated == 12 and api.calls.count(f"create {vm.name}") == 12
    assert f"TPU VM {vm.name} is PREEMPTED; recreating it (12/20)" in said

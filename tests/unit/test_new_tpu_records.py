"""`launch --new-tpu`'s records without a launch: what a review of issue 38 found wrong (a lost run's billing VM pruned
with its record; a label mismatch at the end that kept saying the VM bills), kept as tests.

The records are what a `launch --new-tpu` writes while it runs (state running, its VM named and live); a run whose folder
lock nobody holds is lost, as a SIGKILLed launcher leaves it. The VM rules run against the lifecycle tests' fake TPU API."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.cli_calls import invoke
from tests.standins.tpu_fakes import RUN, FakeApi, run_vm
from tpuctl.cloud.nodes.run_nodes import label_value
from tpuctl.runs import records
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import NODE_LIVE

DAY = 86400.0


@pytest.fixture(autouse=True)
def _private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "config.toml"))
    yield


def _lost_run_with_its_vm(tmp_path: Path, started: float) -> RunRecord:
    """The record a SIGKILLed `launch --new-tpu` leaves: running, its VM named and live, its folder's lock free."""
    record = RunRecord.from_json({
        "run_id": RUN, "backend": "ssh", "script": "train.py", "log_dir": str(tmp_path / "logs" / RUN), "started": started, "pid": 4242,
        "host": socket.gethostname(), "tpu": "v4-16", "zone": "us-central2-a", "capacity": "on-demand", "price_per_hour": 27.2,
        "price_note": "list price", "created_node": label_value(RUN), "project": "tpuctl-test", "node_fate": NODE_LIVE,
    })  # fmt: skip
    records.write(record)
    return record


def test_prune_keeps_the_record_of_a_lost_run_whose_vm_still_bills(tmp_path: Path) -> None:
    _lost_run_with_its_vm(tmp_path, started=time.time() - 30 * DAY)  # a laptop shut a month ago; the VM bills on
    listed = invoke(["runs", "--json"])
    assert listed.crash is None and [(r["run_id"], r["vm_orphaned"]) for r in json.loads(listed.out)] == [(RUN, True)], listed.out
    pruned = invoke(["runs", "--prune", "7"])
    assert pruned.crash is None, pruned.err
    after = invoke(["runs", "--json"])
    assert [(r["run_id"], r["vm_orphaned"]) for r in json.loads(after.out)] == [(RUN, True)], (pruned.out, after.out)


def test_the_end_of_a_launch_whose_named_node_is_not_the_run_s_stops_saying_it_bills() -> None:
    api = FakeApi()
    vm, log = run_vm(api)
    api.add(vm.name, "READY", labels={"team": "ml"})  # a node of that name the user made: the run's own VM is gone
    line = vm.delete(vm.name)
    assert "is not this run's to delete" in line and vm.name in api.nodes  # left alone: right
    assert ("ended", "lost") in log.said  # and the record no longer says the run's VM may bill

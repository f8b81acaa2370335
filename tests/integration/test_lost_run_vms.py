"""A lost run's TPU VM, from its record alone: `runs` says it bills, `stop RUN` and `runs --delete-lost-vms` delete it,
and no node the run did not create is ever deleted. Real CLI, real google-cloud-tpu client, the TPU stand-in.

A lost run is what a SIGKILLed `launch --new-tpu` leaves: a record that says running, written through records.write,
whose run folder's lock nobody holds, and whose created_node exists with the run's label."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuctl
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value
from tpuctl.runs import records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import NODE_DELETED, NODE_LIVE

ZONE = "us-central2-b"
HOUR = 3600.0


class Cli:
    def __init__(self, g: GoogleStandin, tmp_path: Path) -> None:
        self.env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": ZONE, "XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "400"}

    def __call__(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = run_tpuctl(*args, env=self.env, timeout=120)
        assert result.returncode == code, f"tpuctl {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr
        return result


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    made = Cli(google_standin, tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", made.env["XDG_STATE_HOME"])  # records.write here, read by the CLI there
    return made


def _record(tmp_path: Path, run_id: str, node: str, **fields: Any) -> RunRecord:
    """A `launch --new-tpu` run's record as the launch writes it while it runs: state running, the node live."""
    values: dict[str, Any] = {
        "backend": "ssh", "script": "train.py", "started": time.time() - HOUR, "pid": 4242, "host": socket.gethostname(),
        "tpu": "v4-8", "zone": ZONE, "capacity": "spot", "price_per_hour": 2.0, "price_note": "list price",
        "created_node": node, "project": "tpuctl-test", "node_fate": NODE_LIVE,
    }  # fmt: skip
    record = RunRecord.from_json({"run_id": run_id, "log_dir": str(tmp_path / "runs" / run_id), **(values | fields)})  # as a record file spells it
    records.write(record)
    return record


def _create(cli: Cli, name: str, run_id: str | None) -> None:
    """A node made through the real API: labelled for `run_id` as the launch labels its node, or the user's own."""
    labels = ["--labels", f"{LABEL_KEY}={label_value(run_id)}"] if run_id else ["--labels", "team=ml"]
    cli("create", name, "--accelerator-type", "v4-8", *labels)


def _nodes(g: GoogleStandin) -> set[str]:
    return {node["name"].rsplit("/", 1)[-1] for node in g.nodes(ZONE)}


def _fate(run_id: str) -> tuple[str, str | None]:
    record = records.find(run_id, lambda line: None)[0]
    return record.state, record.vm.node_fate if record.vm is not None else None


def test_lost_runs_vms_bill_until_deleted_and_nothing_else_is_ever_deleted(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    g = google_standin
    for name, owner in (("lost-a", "run-a"), ("lost-b", "run-b"), ("user-node", None), ("other-run", "run-x"), ("live-node", "run-e"), ("ended-g", "run-g")):
        _create(cli, name, owner)
    _record(tmp_path, "run-a", "lost-a")
    _record(tmp_path, "run-b", "lost-b", price_per_hour=None, capacity="reserved", price_note="billed by its reservation")
    _record(tmp_path, "run-c", "user-node")  # names the user's node, which lacks the label
    _record(tmp_path, "run-d", "other-run")  # names a node labelled for another run
    _record(tmp_path, "run-f", "gone-node")  # its node was deleted by hand since
    _record(tmp_path, "run-g", "ended-g", state="failed", ended=time.time() - 60, exit_code=1)  # its launcher died before the delete
    running = _record(tmp_path, "run-e", "live-node")
    claim = RunFolder(Path(running.log_dir)).claim(running.run_id)  # run-e's launcher is alive: its lock is held
    try:
        _scenario(g, cli)
    finally:
        os.close(claim)
    assert _nodes(g) == {"user-node", "other-run", "live-node"}


def _scenario(g: GoogleStandin, cli: Cli) -> None:
    listed = cli("runs")
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert "VM" in listed.stdout.splitlines()[0] and "KIND" in listed.stdout.splitlines()[0]
    assert " lost " in rows["run-a"] and "lost-a (BILLING)" in rows["run-a"] and ZONE in rows["run-a"] and "spot" in rows["run-a"]
    assert "$2.00" in rows["run-a"]  # an hour at 2 USD/h so far
    assert "no list price" in rows["run-b"] and "reserved" in rows["run-b"]
    assert " failed " in rows["run-g"] and "ended-g (BILLING)" in rows["run-g"]
    assert " running " in rows["run-e"] and "live-node" in rows["run-e"] and "BILLING" not in rows["run-e"]
    assert f"run run-g (failed) left its TPU VM ended-g in {ZONE} billing: `tpuctl stop run-g` deletes it" in listed.stderr
    assert "... and 1 more run(s) that left a VM billing" in listed.stderr  # six: five named, newest first
    assert "--delete-lost-vms" in listed.stderr

    as_json = {entry["run_id"]: entry for entry in json.loads(cli("runs", "--json").stdout)}
    assert as_json["run-a"]["state"] == "lost" and as_json["run-a"]["vm_orphaned"] and as_json["run-a"]["vm_billing"]
    assert (as_json["run-a"]["created_node"], as_json["run-a"]["zone"]) == ("lost-a", ZONE)
    assert as_json["run-e"]["vm_billing"] and not as_json["run-e"]["vm_orphaned"]

    stopped = cli("stop", "run-a")
    assert stopped.stdout == f"deleted TPU VM lost-a in {ZONE} (run run-a, lost); its record says so\n"
    assert "lost-a" not in _nodes(g) and _fate("run-a") == ("lost", NODE_DELETED)
    assert cli("stop", "run-a").stdout.startswith("run run-a already ended: lost")  # again: nothing left to delete

    refused = cli("stop", "run-c", code=1)
    assert refused.stderr.splitlines()[-1].startswith(f"Error: TPU VM user-node in {ZONE} does not carry run run-c's label")
    assert "user-node" in _nodes(g) and _fate("run-c") == ("lost", NODE_DELETED)  # the run's own VM is gone: no longer billing

    unasked = cli("runs", "--delete-lost-vms", code=2)  # no terminal, no --yes: nothing deleted
    assert "pass --yes" in unasked.stderr and "lost-b" in _nodes(g)

    swept = cli("runs", "--delete-lost-vms", "--yes", code=1)  # run-c's and run-d's nodes are refused: exit 1
    assert f"deleted TPU VM lost-b in {ZONE} (run run-b, lost)" in swept.stdout
    assert f"TPU VM gone-node in {ZONE} was already gone (run run-f, lost)" in swept.stdout
    assert f"deleted TPU VM ended-g in {ZONE} (run run-g, failed)" in swept.stdout
    assert "run run-d: TPU VM other-run" in swept.stderr and "run-c" not in swept.stdout + swept.stderr
    assert "live-node" not in swept.stdout + swept.stderr  # a running run's VM is its launcher's to delete
    assert _fate("run-b") == ("lost", NODE_DELETED) and _fate("run-f") == ("lost", NODE_DELETED)
    assert _fate("run-d") == ("lost", NODE_DELETED) and _fate("run-e") == ("running", NODE_LIVE)
    assert _fate("run-g") == ("failed", NODE_DELETED)  # an ended run keeps how it ended

    after = cli("runs")
    assert "lost-b (deleted)" in after.stdout and "BILLING" not in after.stdout and "left its" not in after.stderr
    assert cli("runs", "--delete-lost-vms").stdout == "no lost run has a TPU VM that still bills\n"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"created_node": "Bad_Name;rm -rf"}, "names 'Bad_Name;rm -rf' as its TPU VM, which is no TPU node name"),
        ({"created_node": "x" * 64}, "which is no TPU node name"),
        ({"project": "Not A Project"}, "names project 'Not A Project', which is no project id"),
        ({"project": None}, "names project '', which is no project id"),
        ({"zone": "../../etc"}, "names zone '../../etc', which is no zone"),
    ],
)
def test_a_hostile_record_is_one_line_and_touches_nothing(google_standin: GoogleStandin, cli: Cli, tmp_path: Path, fields: dict[str, Any], says: str) -> None:
    _record(tmp_path, "run-h", "lost-h", **fields)
    listed = cli("runs")
    assert "run-h" in listed.stdout
    for args in (("stop", "run-h"), ("runs", "--delete-lost-vms", "--yes")):
        result = cli(*args, code=2 if args[0] == "stop" else 1)
        assert says in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not any(method == "DELETE" for method, _, _ in google_standin.requests)


def test_a_run_launched_on_another_machine_is_not_judged_lost_from_here(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """Its lock is on that machine: from here (a shared home folder) a live launch there looks lost."""
    _create(cli, "elsewhere", "run-o")
    _record(tmp_path, "run-o", "elsewhere", host="another-laptop")
    refused = cli("stop", "run-o", code=1)
    assert "was launched on 'another-laptop', not on this machine" in refused.stderr and refused.stderr.count("\n") == 1
    assert _nodes(google_standin) == {"elsewhere"}


def test_two_run_ids_that_clean_up_alike_never_delete_each_others_vm(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """The field's collision: lowercased and cleaned, `...-Train-3f2a` and `...-train-3f2a` (or `train.v2` and
    `train-v2`) were one label value, and a lost record of one deleted the other's VM."""
    for mine, theirs in (("20261201-120000-Train-3f2a", "20261201-120000-train-3f2a"), ("20261201-120000-train.v2-3f2a", "20261201-120000-train-v2-3f2a")):
        node = f"vm-{len(_nodes(google_standin))}"
        _create(cli, node, theirs)  # the other run's VM, live
        _record(tmp_path, mine, node)  # a lost record naming it
        refused = cli("stop", mine, code=1)
        assert f"Error: TPU VM {node} in {ZONE} does not carry run {mine}'s label" in refused.stderr, refused.stderr
        assert node in _nodes(google_standin)
    assert not any(method == "DELETE" for method, _, _ in google_standin.requests)


def test_a_record_in_a_folder_others_can_write_deletes_nothing(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """A record carrying one of your run ids, planted in a records folder others can write: refused before any DELETE
    is sent (the label alone proves nothing once a record can be planted)."""
    _create(cli, "mine", "run-p")
    planted = _record(tmp_path, "run-p", "mine")
    records.folder().chmod(0o777)  # anyone may write here now
    refused = cli("stop", planted.run_id, code=2)
    assert "tpuctl writes only into folders of yours that others cannot write" in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert "mine" in _nodes(google_standin) and not any(method == "DELETE" for method, _, _ in google_standin.requests)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a record file to another user needs root (CI and these machines run the tests as root)")
def test_a_record_file_of_another_users_deletes_nothing(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    _create(cli, "mine", "run-p")
    planted = _record(tmp_path, "run-p", "mine")
    os.chown(records.folder() / f"{planted.run_id}.json", 65534, 65534)
    refused = cli("runs", "--delete-lost-vms", "--yes", code=1)
    assert f"run {planted.run_id}'s record" in refused.stderr and "is not a file of yours that only you can write; nothing deleted" in refused.stderr
    assert "mine" in _nodes(google_standin) and not any(method == "DELETE" for method, _, _ in google_standin.requests)

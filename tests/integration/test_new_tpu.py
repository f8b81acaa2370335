"""`tpuctl launch --new-tpu TYPE`: the run's own TPU VM made in the TPU stand-in, its hosts real sshd servers (the
stand-in's host IPs mapped to them in an ssh config, as test_tpu_ssh.py does), and deleted when the run ends.

These scenarios are about the VM's life, so the workers are plain Python (no TensorFlow): a full run whose first zone
stocks out, a failed script (deleted; kept with --keep-on-failure), a Ctrl-C. The preemption that resumes TensorFlow
from its checkpoint on a new VM is test_new_tpu_preemption.py. In every scenario a node the user made and one
labelled for another run are in the stand-in before the launch and are still there after it.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl, wait_for
from tests.integration.sshd import SshCluster
from tests.standins import catalog
from tests.standins.new_tpu_cloud import (
    ZONES,
    Cloud,
    Launch,
    just_after_a_backup,
    preempt_the_run_s_vm,
    preempted_where_no_capacity_is_left,
    ranked,
)
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value
from tpuctl.launch.tfpair.here import this_interpreter
from tpuctl.tpu.software import image_for_tensorflow


def test_a_run_hunts_past_a_stockout_labels_its_vm_runs_on_every_host_and_deletes_it(cloud: Cloud) -> None:
    order = ranked(cloud)
    cloud.g.faults.stockout(order[0], "capacity")
    launch = cloud.launch("--zones", ",".join(order))
    cloud.started(launch)
    (node,) = cloud.ours()  # while the run goes: its VM, named and labelled for it, in the zone that held
    record = cloud.record()
    run_id = record["run_id"]
    name = label_value(run_id)
    assert node["name"].endswith(f"/locations/{order[1]}/nodes/{name}")
    assert node["labels"] == {LABEL_KEY: label_value(run_id)} and node["description"] == f"tpuctl run {run_id}"
    assert (record["created_node"], record["node_fate"], record["zone"], record["tpu"]) == (name, "live", order[1], "v4-16")
    assert record["project"] == cloud.g.project and record["price_per_hour"] == pytest.approx(3.40 * 8)  # 8 v4 chips
    (cloud.flags / "go").write_text("")
    assert launch.finish() == 0, launch.stderr
    notices = [line for line in launch.lines if line.startswith("tpuctl: ")]
    prices = next(i for i, line in enumerate(notices) if "candidate(s), best first, at list price" in line)
    creating = [i for i, line in enumerate(notices) if line.startswith(f"tpuctl: creating TPU VM {name}: ")]
    assert prices < creating[0] and "$27.20/h" in notices[prices], launch.stderr
    assert any(f"{order[0]} v4-16 on-demand: no capacity (code 8), next: {order[1]}" in line for line in notices), launch.stderr
    assert f"tpuctl: deleting TPU VM {name} in {order[1]}: the service accepted the delete" in notices
    logs = cloud.tmp / "logs"
    ips = [endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
    assert [w["host"] for w in json.loads((logs / "attempt-1" / "plan.json").read_text())["workers"]] == ips  # every host of the VM
    assert all(f"worker {i} of run {run_id}" in (logs / "attempt-1" / f"worker-{i}@{ip}.log").read_text() for i, ip in enumerate(ips))
    wait_for(lambda: not cloud.ours(), timeout=30)
    cloud.assert_bystanders_survive()
    ended = cloud.record()
    assert (ended["state"], ended["node_fate"], ended["created_node"]) == ("succeeded", "deleted", name)
    categories = json.loads((logs / "outcome.json").read_text())["goodput"]["categories"]
    assert categories["stockout hunting"] > 0 and categories["provisioning"] > 0
    events = [json.loads(line)["event"] for line in (logs / "timeline.jsonl").read_text().splitlines()]
    node_events = [e for e in events if e in ("provision_begin", "node_create", "provision_end", "node_delete")]
    assert node_events == ["provision_begin", "node_create", "node_create", "provision_end", "node_delete"], events
    assert "Traceback" not in launch.stderr


def test_a_failed_run_s_vm_is_deleted_and_kept_with_keep_on_failure(cloud: Cloud) -> None:
    (cloud.flags / "go").write_text("")
    failed = cloud.launch("--zone", ZONES[0], "--env", "EXIT=3")
    assert failed.finish() == 3, failed.stderr
    name = cloud.record()["created_node"]
    assert f"tpuctl: deleting TPU VM {name} in {ZONES[0]}: the service accepted the delete" in failed.lines
    wait_for(lambda: not cloud.ours(), timeout=30)
    assert cloud.record()["node_fate"] == "deleted"
    for path in (Path(cloud.env["HOME"]) / ".local" / "state" / "tpuctl" / "records").glob("*.json"):
        path.unlink()  # the next run's record is the only one
    kept = cloud.launch("--zone", ZONES[0], "--keep-on-failure", "--log-dir", str(cloud.tmp / "logs2"), "--env", "EXIT=3")
    assert kept.finish() == 3, kept.stderr
    record = cloud.record()
    name = record["created_node"]
    assert (record["state"], record["node_fate"]) == ("failed", "kept")
    assert (
        f"tpuctl: kept TPU VM {name} in {ZONES[0]} (--keep-on-failure: the run failed); "
        f"it bills until deleted: tpuctl delete {name} --zone {ZONES[0]}"
    ) in kept.lines, kept.stderr
    (node,) = cloud.ours()
    assert node["state"] == "READY" and node["name"].endswith(f"/nodes/{name}")
    cloud.assert_bystanders_survive()


def test_ctrl_c_stops_the_workers_deletes_the_vm_and_exits_130(cloud: Cloud) -> None:
    launch = cloud.launch("--zone", ZONES[1])
    cloud.started(launch)
    launch.proc.send_signal(signal.SIGINT)
    assert launch.finish(timeout=60) == 130, launch.stderr
    record = cloud.record()
    name = record["created_node"]
    assert f"tpuctl: deleting TPU VM {name} in {ZONES[1]}: the service accepted the delete" in launch.lines, launch.stderr
    wait_for(lambda: not cloud.ours(), timeout=30)
    assert (record["state"], record["node_fate"]) == ("stopped", "deleted")
    cloud.assert_bystanders_survive()
    assert "Traceback" not in launch.stderr


def test_a_sigkilled_launcher_leaves_a_lost_run_whose_billing_vm_tpuctl_stop_deletes(cloud: Cloud) -> None:
    """The laptop gone mid-run: the record, written as the VM was made, still names it; `runs` shows the run lost with
    its VM billing and nobody left to delete it; `tpuctl stop RUN` deletes that VM, and only that one."""
    launch = cloud.launch("--zone", ZONES[1])
    cloud.started(launch)
    launch.proc.kill()
    launch.finish(timeout=30)
    (cloud.flags / "go").write_text("")  # the hosts' workers, cut off from their launcher, may end
    run_id = cloud.record()["run_id"]
    listed = run_tpuctl("runs", "--json", env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert listed.returncode == 0, listed.stderr
    (run,) = [r for r in json.loads(listed.stdout) if r["run_id"] == run_id]
    assert (run["state"], run["vm_billing"], run["vm_orphaned"]) == ("lost", True, True), run
    table = run_tpuctl("runs", env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert f"{label_value(run_id)} (BILLING)" in table.stdout, table.stdout
    assert [node["labels"][LABEL_KEY] for node in cloud.ours()] == [label_value(run_id)]
    stopped = run_tpuctl("stop", run_id, env=cloud.env, cwd=cloud.tmp, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "Traceback" not in stopped.stderr
    wait_for(lambda: not cloud.ours(), timeout=30)
    record = cloud.record()
    assert (record["created_node"], record["node_fate"]) == (label_value(run_id), "deleted")
    cloud.assert_bystanders_survive()


def test_a_detached_run_makes_its_vm_and_tpuctl_stop_deletes_it(cloud: Cloud) -> None:
    """--detach: the detached process hunts, creates, runs and, stopped by `tpuctl stop`, deletes the VM."""
    args = [str(cloud.script), "--new-tpu", "v4-16", "--zone", ZONES[1], "--ssh-config", str(cloud.config), "--strategy", "none",
            "--log-dir", str(cloud.tmp / "logs"), "--env", f"FLAGS={cloud.flags}", "--detach"]  # fmt: skip
    started = run_tpuctl("launch", *args, env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for(lambda: all((cloud.flags / f"started-{i}").exists() for i in range(2)), timeout=90)
    assert [node["labels"][LABEL_KEY] for node in cloud.ours()] == [label_value(run_id)]
    listed = run_tpuctl("runs", "--json", env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
    stopped = run_tpuctl("stop", run_id, env=cloud.env, cwd=cloud.tmp, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    record = cloud.record()
    assert (record["state"], record["node_fate"], record["created_node"]) == ("stopped", "deleted", label_value(run_id))
    console = (cloud.tmp / "logs" / "console.log").read_text()
    assert f"tpuctl: deleting TPU VM {label_value(run_id)} in {ZONES[1]}: the service accepted the delete" in console, console
    wait_for(lambda: not cloud.ours(), timeout=30)
    cloud.assert_bystanders_survive()


def test_a_launch_whose_hosts_never_answer_still_deletes_the_vm(cloud: Cloud, cluster: SshCluster) -> None:
    """Between the create and the first worker: ssh to the new VM's hosts fails (every address sent to a port nothing
    listens on); the launch fails in one line and the VM goes all the same."""
    base = catalog.cidr_block(ZONES[0]).split("/")[0].rsplit(".", 1)[0]
    dead = cloud.tmp / "dead_config"
    dead.write_text("".join(f"Host {base}.{n + 2}\n  HostName 127.0.0.1\n  Port {cluster.dead_port}\n\n" for n in range(24)) + cluster.config.read_text())
    launch = cloud.launch("--zone", ZONES[0], "--ssh-config", str(dead))
    assert launch.finish() not in (0, 130), launch.stderr
    # Before anything was created: the TensorFlow pair, naming the image picked for this machine's TensorFlow.
    picked = image_for_tensorflow("v4-16", this_interpreter().tensorflow_version or (2, 21, 0))
    assert picked is not None
    pair = next(i for i, line in enumerate(launch.lines) if line.startswith("tpuctl: TensorFlow: here "))
    assert launch.lines[pair].endswith(f"({picked.image}: picked: {picked.why})")
    assert pair < next(i for i, line in enumerate(launch.lines) if line.startswith("tpuctl: creating TPU VM "))
    record = cloud.record()
    assert f"tpuctl: deleting TPU VM {record['created_node']} in {ZONES[0]}: the service accepted the delete" in launch.lines, launch.stderr
    assert (record["state"], record["node_fate"]) == ("failed", "deleted")
    wait_for(lambda: not cloud.ours(), timeout=30)
    cloud.assert_bystanders_survive()
    assert "Traceback" not in launch.stderr


def test_ctrl_c_while_the_vm_is_being_created_deletes_it_and_exits_130(cloud: Cloud) -> None:
    """The create sits in CREATING (a zone that neither makes the node nor says no): Ctrl-C deletes what it made."""
    cloud.g.faults.stockout(ZONES[0], "stuck")
    launch = cloud.launch("--zone", ZONES[0])
    launch.wait_line("tpuctl: creating TPU VM ")
    (node,) = cloud.ours()
    assert node["state"] == "CREATING"
    record = cloud.record()
    name = record["created_node"]
    assert record["node_fate"] == "live" and node["name"].endswith(f"/nodes/{name}")
    launch.proc.send_signal(signal.SIGINT)
    assert launch.finish(timeout=60) == 130, launch.stderr
    assert f"Error: interrupted while creating TPU VM {name} for the run" in launch.lines, launch.stderr
    assert f"tpuctl: deleting TPU VM {name} in {ZONES[0]}: the service accepted the delete" in launch.lines, launch.stderr
    wait_for(lambda: not cloud.ours(), timeout=30)
    assert (cloud.record()["state"], cloud.record()["node_fate"]) == ("stopped", "deleted")
    assert not list((cloud.flags).glob("started-*")) and "Traceback" not in launch.stderr
    cloud.assert_bystanders_survive()


def test_a_preempted_vm_whose_zone_has_no_capacity_comes_back_in_another_and_the_record_follows(cloud: Cloud) -> None:
    """Babysit's recovery: the own zone first; it stocks out, so the hunt over the run's zones makes the VM in the
    other one; the record follows it there (zone, price), and the VM is deleted there at the end."""
    launch, run_id, name, order = preempted_where_no_capacity_is_left(cloud)
    assert launch.finish() == 0, launch.stderr
    notices = [line for line in launch.lines if line.startswith("tpuctl: ")]
    assert any(f"{order[0]} has no capacity (code 8); hunting over 1 other candidate, next: {order[1]}" in line for line in notices), launch.stderr
    assert any(f"TPU VM {name} is READY again: recreated in {order[1]} as on-demand" in line for line in notices), launch.stderr
    assert f"tpuctl: deleting TPU VM {name} in {order[1]}: the service accepted the delete" in notices
    ended = cloud.record()
    assert (ended["zone"], ended["node_fate"], ended["state"], ended["price_per_hour"]) == (order[1], "deleted", "succeeded", pytest.approx(27.2))
    report = run_tpuctl("report", run_id, env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert report.returncode == 0, report.stderr
    assert f"attempt 1 on TPU VM {name} ({order[0]})" in report.stdout and f"attempt 2 on TPU VM {name} ({order[1]})" in report.stdout, report.stdout
    wait_for(lambda: not cloud.ours(), timeout=30)
    cloud.assert_bystanders_survive()


def test_recovery_elsewhere_first_moves_a_preempted_vm_though_its_own_zone_has_capacity(cloud: Cloud) -> None:
    """--recovery elsewhere-first on an on-demand run (whose default is same-zone-first): the other zone first, so the
    preempted zone, which has capacity, is never asked again."""
    launch, _, name, order = preempted_where_no_capacity_is_left(cloud, stocked_out=False, extra=("--recovery", "elsewhere-first"))
    assert launch.finish() == 0, launch.stderr
    notices = [line for line in launch.lines if line.startswith("tpuctl: ")]
    assert f"tpuctl: elsewhere-first: hunting over 1 other candidate before {order[0]}, next: {order[1]}" in notices, launch.stderr
    assert f"tpuctl: TPU VM {name} is READY again: recreated in {order[1]} as on-demand: elsewhere-first ({order[0]} last)" in notices
    made = [op["metadata"]["target"] for op in cloud.g.tpu.operations.values() if op["metadata"]["verb"] == "create" and name in op["metadata"]["target"]]
    assert [target.split("/")[3] for target in made] == order[:2], made  # one create in each zone: the preempted one never again
    wait_for(lambda: not cloud.ours(), timeout=30)
    cloud.assert_bystanders_survive()


def test_a_preempted_vm_is_recreated_and_tensorflow_resumes_from_its_checkpoint(cloud: Cloud, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Keras fit with BackupAndRestore (tests/integration/scripts/fit_preempted_once.py, saving every 4 steps) on a
    one-host v4-8, its model dir in Cloud Storage (the GCS emulator). Mid-run the stand-in's node goes PREEMPTED and
    its host goes down with the worker (the agent is killed, as a preempted Cloud TPU VM's host takes its ssh session
    and its disk): the VM is recreated, attempt 2 restores the backup from the bucket and goes on from there, and the
    VM is deleted at the end.

    TensorFlow's own GCS filesystem calls https://www.googleapis.com whatever STORAGE_EMULATOR_HOST says, so the
    worker reaches the emulator through tests/standins/gcs_proxy.py (https_proxy, a test CA); tpuctl's own reads of
    the bucket (google-cloud-storage) go to it through STORAGE_EMULATOR_HOST."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.conftest import ROOT
    from tests.standins.gcs_proxy import keep_gcs_upload_contract, start_gcs_proxy

    keep_gcs_upload_contract()
    proxy = start_gcs_proxy(cloud.tmp, gcs_emulator)
    env = {**cloud.env, "STORAGE_EMULATOR_HOST": gcs_emulator, "TPUCTL_STORAGE_ENDPOINT": gcs_emulator}  # the hunt reads the bucket's region
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials()).create_bucket("run-models")
    script = ROOT / "tests" / "integration" / "scripts" / "fit_preempted_once.py"
    to_workers = [arg for name, value in proxy.env.items() for arg in ("--env", f"{name}={value}")]
    args = [str(script), "--new-tpu", "v4-8", "--zone", ZONES[0], "--ssh-config", str(cloud.config), "--model-dir", "gs://run-models/run",
            "--python", str(cloud.host_python), "--log-dir", str(cloud.tmp / "logs"), *to_workers,
            "--", "--steps", "60", "--save-every", "4", "--step-time", "0.2"]  # fmt: skip
    launch = Launch.start(args, env, cloud.tmp)
    timeline = cloud.tmp / "logs" / "timeline.jsonl"
    just_after_a_backup(launch, timeline)
    backups = [blob.name for blob in bucket.list_blobs(prefix="run/backup/")]
    assert [name for name in backups if not name.endswith("/")], backups  # in the bucket, not on the host that goes down
    name = preempt_the_run_s_vm(cloud)
    assert launch.finish(timeout=240) == 0, launch.stderr
    notices = [line for line in launch.lines if line.startswith("tpuctl: ")]
    assert any(f"TPU VM {name} is PREEMPTED; recreating it (1/10)" in line for line in notices), launch.stderr
    assert any(f"TPU VM {name} is READY again: recreated in its own zone {ZONES[0]}" in line for line in notices), launch.stderr
    logs = cloud.tmp / "logs"
    outcome = json.loads((logs / "outcome.json").read_text())
    assert (outcome["exit_code"], outcome["attempts"], outcome["preemptions"]) == (0, 2, 1)
    events = [json.loads(line) for line in (logs / "timeline.jsonl").read_text().splitlines()]
    firsts = {e["attempt"]: e.get("step") for e in events if e["event"] == "first_step"}
    assert firsts[1] == 1 and firsts[2] > 4, firsts  # attempt 2 began past the first backup, not from step 1
    assert [e["event"] for e in events if e["event"] in ("recreate_begin", "recreate_end")] == ["recreate_begin", "recreate_end"]
    assert outcome["goodput"]["categories"]["preemption recovery"] > 0
    plans = [json.loads((logs / f"attempt-{n}" / "plan.json").read_text())["workers"][0]["host"] for n in (1, 2)]
    assert plans[0] != plans[1]  # the new VM's host, read afresh
    wait_for(lambda: not cloud.ours(), timeout=30)
    ended = cloud.record()
    assert (ended["state"], ended["node_fate"], ended["zone"]) == ("succeeded", "deleted", ZONES[0])
    cloud.assert_bystanders_survive()
    assert "Traceback" not in launch.stderr

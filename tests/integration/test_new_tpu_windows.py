"""`launch --new-tpu` at its awkward moments, against the TPU stand-in and real sshd hosts: a stop or a SIGKILL while the
create is answered or a preempted VM is recreated elsewhere, a stop just after READY, hunts that find nothing, prices per
attempt, the --keep report line. A review of issue 38 found each of them wrong; the scenarios share test_new_tpu.py's
cloud (tests/standins/new_tpu_cloud.py: plain-Python workers, two hosts)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import pytest

from tests.conftest import run_tpuctl, wait_for
from tests.standins.new_tpu_cloud import ZONES, Cloud, Launch, agent_of_worker, preempted_where_no_capacity_is_left, ranked


def _recreating_elsewhere(cloud: Cloud) -> tuple[Launch, str, str, list[str]]:
    """A run on its own VM in the first zone; the VM is preempted, its zone has no capacity, so babysit's recovery
    creates it in the second zone, where the create sits in CREATING: the moment returned."""
    launch, run_id, name, order = preempted_where_no_capacity_is_left(cloud, then="stuck")  # the other zone's create hangs
    wait_for(lambda: cloud.g.node(order[1], name) is not None or launch.proc.poll() is not None, timeout=90)
    assert launch.proc.poll() is None, launch.stderr
    return launch, run_id, name, order


def _nothing_left(cloud: Cloud, said: str) -> None:
    """No node of the run's in the stand-in (a delete's end given its time), else which are left and what was said."""
    try:
        wait_for(lambda: not cloud.ours(), timeout=30)
    except AssertionError:
        left = [(node["name"], node["state"]) for node in cloud.ours()]
        raise AssertionError(f"left billing: {left}\n{said}") from None


def test_a_stop_while_the_vm_is_recreated_in_another_zone_leaves_nothing_billing(cloud: Cloud) -> None:
    launch, _, _, _ = _recreating_elsewhere(cloud)
    launch.proc.send_signal(signal.SIGTERM)  # what `tpuctl stop` sends
    assert launch.finish(timeout=90) == 130, launch.stderr
    record = cloud.record()
    assert record["node_fate"] == "deleted"
    _nothing_left(cloud, launch.stderr)  # the record says deleted: nothing of the run's may bill
    cloud.assert_bystanders_survive()


def test_a_launcher_killed_while_the_vm_is_recreated_elsewhere_leaves_a_record_stop_can_delete_it_by(cloud: Cloud) -> None:
    launch, run_id, _, order = _recreating_elsewhere(cloud)
    launch.proc.kill()
    launch.finish(timeout=30)
    (cloud.flags / "go").write_text("")  # the hosts' workers, cut off from their launcher, may end
    stopped = run_tpuctl("stop", run_id, env=cloud.env, cwd=cloud.tmp, timeout=120)
    assert stopped.returncode == 0 and "Traceback" not in stopped.stderr, stopped.stderr
    assert cloud.record()["node_fate"] == "deleted"
    _nothing_left(cloud, stopped.stdout + stopped.stderr)  # the VM being created in the other zone is deleted too
    assert cloud.record()["zone"] == order[1]
    cloud.assert_bystanders_survive()


def test_each_attempt_is_priced_at_the_list_price_of_the_vm_it_ran_on(cloud: Cloud) -> None:
    """--capacity spot,on-demand: attempt 1 on a spot VM; preempted, its zone and the other zone's spot stock out, so
    babysit's recovery brings it back on demand. The report's attempt 1 ran on spot: its cost is at spot's list price."""
    order = list(dict.fromkeys(ranked(cloud)))  # offers lists a zone once per kind
    launch = cloud.launch("--zones", ",".join(order), "--capacity", "spot,on-demand")
    cloud.started(launch)
    record = cloud.record()
    run_id, name, spot_price = record["run_id"], record["created_node"], record["price_per_hour"]
    assert record["capacity"] == "spot" and spot_price is not None
    agent = agent_of_worker(run_id, 1)
    assert agent is not None
    for zone in order:
        cloud.g.faults.stockout(zone, "capacity")  # the own zone's spot, then the other zone's: on demand holds
    cloud.g.preempt(record["zone"], name)
    os.kill(agent, signal.SIGKILL)
    assert launch.finish() == 0, launch.stderr
    ended = cloud.record()
    assert ended["capacity"] == "on-demand" and ended["price_per_hour"] != spot_price, ended
    result = run_tpuctl("report", run_id, "--json", env=cloud.env, cwd=cloud.tmp, timeout=60)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    first = body["attempts"][0]["wall_s"]
    assert body["cost_by_attempt"]["1"] == pytest.approx(first / 3600 * spot_price, abs=1e-4), (body["cost_by_attempt"], spot_price)
    _nothing_left(cloud, launch.stderr)


def test_a_hunt_with_no_capacity_anywhere_fails_in_one_line(cloud: Cloud) -> None:
    for zone in ZONES:
        cloud.g.faults.stockout(zone, "capacity")
    launch = cloud.launch("--zones", ",".join(ZONES))
    code = launch.finish()
    assert "Traceback" not in launch.stderr, launch.stderr
    assert code == 1 and launch.lines[-1].startswith("Error: no capacity in any of 2 candidates"), launch.stderr
    assert cloud.record()["state"] == "failed" and not cloud.ours()
    cloud.assert_bystanders_survive()


def test_a_one_zone_run_whose_vm_cannot_come_back_fails_in_one_line(cloud: Cloud) -> None:
    zone = ZONES[0]
    launch = cloud.launch("--zone", zone)
    cloud.started(launch)
    record = cloud.record()
    agent = agent_of_worker(record["run_id"], 1)
    assert agent is not None
    cloud.g.faults.stockout(zone, "capacity")
    cloud.g.preempt(zone, record["created_node"])
    os.kill(agent, signal.SIGKILL)  # the preempted host takes worker 0's session with it
    code = launch.finish()
    assert "Traceback" not in launch.stderr, launch.stderr
    assert code == 1 and launch.lines[-1].startswith(f"Error: {zone}: no capacity for v4-16"), launch.stderr
    assert cloud.record()["state"] == "failed"
    _nothing_left(cloud, launch.stderr)
    cloud.assert_bystanders_survive()


def _slow_create_reply(cloud: Cloud) -> threading.Event:
    """The stand-in makes the node on a create as the service does, then takes 3 s to answer: the returned event is
    set once the node exists and the launch still waits for the reply (the moment a signal may come)."""
    made = threading.Event()
    create = cloud.g.tpu.create_node

    def slow_reply(params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        reply = create(params, query, body)
        made.set()
        time.sleep(3)
        return reply

    cloud.g.tpu.create_node = slow_reply  # type: ignore[method-assign]
    return made


def test_a_stop_while_the_create_is_answered_leaves_nothing_billing(cloud: Cloud) -> None:
    made = _slow_create_reply(cloud)
    launch = cloud.launch("--zone", ZONES[0])
    assert made.wait(90), launch.stderr
    launch.proc.send_signal(signal.SIGTERM)
    assert launch.finish(timeout=60) == 130, launch.stderr
    _nothing_left(cloud, launch.stderr)
    cloud.assert_bystanders_survive()


def test_a_launcher_killed_while_the_create_is_answered_leaves_a_record_naming_the_vm(cloud: Cloud) -> None:
    made = _slow_create_reply(cloud)
    launch = cloud.launch("--zone", ZONES[0])
    assert made.wait(90), launch.stderr
    launch.proc.kill()
    launch.finish(timeout=30)
    run_id = cloud.record()["run_id"]
    stopped = run_tpuctl("stop", run_id, env=cloud.env, cwd=cloud.tmp, timeout=120)
    assert stopped.returncode == 0 and "Traceback" not in stopped.stderr, stopped.stderr
    _nothing_left(cloud, stopped.stdout + stopped.stderr)
    cloud.assert_bystanders_survive()


def test_the_report_of_a_running_keep_run_does_not_say_its_vm_will_be_deleted(cloud: Cloud) -> None:
    launch = cloud.launch("--zone", ZONES[0], "--keep")
    cloud.started(launch)
    run_id = cloud.record()["run_id"]
    report = run_tpuctl("report", run_id, env=cloud.env, cwd=cloud.tmp, timeout=60)
    (cloud.flags / "go").write_text("")
    assert launch.finish() == 0, launch.stderr
    assert cloud.record()["node_fate"] == "kept" and len(cloud.ours()) == 1  # what the launch did with it
    assert report.returncode == 0 and "created for this run:" in report.stdout, report.stderr
    assert "deleted as the run ends" not in report.stdout, report.stdout


def test_a_stop_just_after_the_vm_is_ready_still_deletes_it(cloud: Cloud) -> None:
    launch = cloud.launch("--zone", ZONES[0])  # before the fix, 3 of 3 such runs died by SIGTERM's default action
    launch.wait_line(" is READY in ")
    launch.proc.send_signal(signal.SIGTERM)
    code = launch.finish(timeout=120)
    (cloud.flags / "go").write_text("")
    assert code == 130, (code, launch.stderr)
    _nothing_left(cloud, launch.stderr)
    cloud.assert_bystanders_survive()

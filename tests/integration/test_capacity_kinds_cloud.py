"""Reserved and flex-start TPUs through the real CLI, google-cloud-tpu (v2) and plain HTTP (v2alpha1) against the
TPU stand-in (issue 36): the requests land as the API's REST contract has them, a flex-start request waits in its
queue and its node is deleted when its run ends, a reservation or a flex-start that finds no capacity leaves nothing
behind, `list`/`describe` name the kind and price neither."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.standins.cloud_cli import OTHER_ZONE as ZONE
from tests.standins.cloud_cli import Cli, error_line
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.nodes import lifecycle
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import TpuApi
from tpuctl.settings import cloud as settings

TYPE = "v5litepod-16"


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    google_standin.create_delay_s = 0.05
    return Cli(google_standin, tmp_path)


def test_a_reserved_node_is_made_from_the_reservation_listed_as_such_and_unpriced(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    made = cli("create", "held", "--zone", ZONE, "--accelerator-type", TYPE, "--reserved")
    assert f"{TYPE} in {ZONE}, reserved: no list price" in made.stderr
    node = g.node(ZONE, "held")
    assert node is not None and node["schedulingConfig"] == {"reserved": True} and node["state"] == "READY"
    [row] = [line for line in cli("list", "--zone", ZONE).stdout.splitlines() if line.startswith("held ")]
    assert " reserved " in row and row.rstrip().endswith(" reserved")  # the price column: billed by the reservation
    assert re.search(r"^capacity +reserved$", cli("describe", "held", "--zone", ZONE).stdout, re.M)
    again = cli("create", "held", "--zone", ZONE, "--accelerator-type", TYPE, code=1)
    assert "reserved: True != False" in error_line(again)


def test_a_named_reservation_without_room_fails_with_code_9_and_leaves_nothing(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.stockout(ZONE, "reserved")
    failed = cli("create", "held", "--zone", ZONE, "--accelerator-type", TYPE, "--reserved", "--reservation", "team-res", code=1)
    line = error_line(failed)
    assert line.startswith(f"Error: {ZONE}: no capacity for {TYPE} (code 9); ") and "queued resource it left was deleted" in line, line
    assert g.node(ZONE, "held") is None and g.queued_resource(ZONE, "held") is None and not cli.spec_file("held").exists()
    body = [r for r in g.requests if r[0] == "POST" and "/queuedResources" in r[1]]
    assert body and body[0][1].startswith("/v2/"), body


def test_flex_start_queues_runs_for_its_duration_and_is_then_deleted(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    made = cli("create", "burst", "--zone", ZONE, "--accelerator-type", TYPE, "--flex-start", "--max-run-duration", "10s")
    path = ["ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]
    with g._lock:
        assert g.tpu.queue.records[(ZONE, "burst")].history == path
    seen = [line.split("queued: ")[1].split(" ")[0] for line in made.stderr.splitlines() if "queued: " in line]
    assert seen[-1] == "ACTIVE" and seen == [state for state in path if state in seen], made.stderr  # polls may miss a short state
    assert f"{TYPE} in {ZONE}, flex-start: no list price" in made.stderr
    queued = g.queued_resource(ZONE, "burst")
    assert queued is not None and queued["provisioningModel"] == "FLEX_START" and queued["runDuration"] == {"maxRunDuration": "10s"}
    assert [r[1][: len("/v2alpha1/")] for r in g.requests if r[0] == "POST" and "/queuedResources" in r[1]] == ["/v2alpha1/"]
    shown = cli("describe", "burst").stdout  # the zone from the saved spec
    assert re.search(r"^capacity +flex-start$", shown, re.M), shown
    assert re.search(r"^ends +\S+Z \(in 0m [0-9]+s\); the service deletes the node then$", shown, re.M), shown
    [row] = [line for line in cli("list", "--zone", ZONE).stdout.splitlines() if line.startswith("burst ")]
    assert " flex-start " in row and row.rstrip().endswith("no list price")
    g.faults.denied_permissions.add("tpu.queuedresources.list")  # v2alpha1 unreadable: the kind v2 shows, no failure
    [row] = [line for line in cli("list", "--zone", ZONE).stdout.splitlines() if line.startswith("burst ")]
    assert " on-demand " in row
    g.faults.denied_permissions.clear()
    deadline = time.monotonic() + 30
    while (g.queued_resource(ZONE, "burst") or {}).get("state", {}).get("state") != "SUSPENDED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert g.node(ZONE, "burst") is None and g.queued_resource(ZONE, "burst")["state"]["state"] == "SUSPENDED"  # type: ignore[index]


def test_flex_start_without_capacity_fails_with_code_8_and_leaves_nothing(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.stockout(ZONE, "capacity")
    failed = cli("create", "burst", "--zone", ZONE, "--accelerator-type", TYPE, "--flex-start", "--max-run-duration", "2d", code=1)
    line = error_line(failed)
    assert line.startswith(f"Error: {ZONE}: no capacity for {TYPE} (code 8); ") and "FAILED queued resource" in line, line
    assert g.node(ZONE, "burst") is None and g.queued_resource(ZONE, "burst") is None and not cli.spec_file("burst").exists()
    assert [(m["zone"], m["kind"], m["why"]) for m in cli.memory()] == [(ZONE, "flex-start", "zone")]


def test_a_flex_start_node_whose_run_ended_is_queued_again_by_recreate(
    google_standin: GoogleStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `tpuctl babysit` does when the service deleted a flex-start node at the end of its run (babysit.bring_back)."""
    g = google_standin
    g.create_delay_s = 0.05
    for name, value in standin_env(g, tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    api = TpuApi.connect(settings.resolve())
    spec = NodeSpec(name="burst", project=g.project, zone=ZONE, runtime_version="tpu-vm-tf-2.16.1-pod-pjrt", accelerator_type=TYPE,
                    flex_start=True, max_run_duration="1s")  # fmt: skip
    lifecycle.ensure(api, spec, lambda state, elapsed: None)
    deadline = time.monotonic() + 30
    while g.node(ZONE, "burst") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert g.node(ZONE, "burst") is None and g.queued_resource(ZONE, "burst")["state"]["state"] == "SUSPENDED"  # type: ignore[index]
    seen: list[str] = []
    again = lifecycle.recreate(api, spec, lambda state, elapsed: seen.append(state))
    assert again.created and again.node.ready and seen[-1].startswith("READY")
    with g._lock:
        assert g.tpu.queue.records[(ZONE, "burst")].history[:2] == ["ACCEPTED", "WAITING_FOR_RESOURCES"]  # a new request

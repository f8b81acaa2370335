"""Nothing tpuctl makes is left billing or holding quota, and no rerun waits without end, through the real CLI,
google-cloud-tpu and plain HTTP against the TPU stand-in (issue 45).

A queued resource outlives its node when only the node is deleted (SUSPENDED, still counted against quota; FIELD-NOTES,
Cloud TPU docs: queued-resources): `delete` takes both, `list` shows one left alone and `delete` takes it. A rerun meets
what an interrupted create or delete left: a node DELETING is waited for and made anew, one stuck CREATING is waited for
no longer than the create deadline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.standins.cloud_cli import OTHER_ZONE as ZONE
from tests.standins.cloud_cli import Cli, error_line
from tests.standins.google_apis import GoogleStandin

TYPE = "v5litepod-16"
# Each kind that makes its node through a queued resource (NodeSpec.queues).
QUEUED_KINDS = [("--queued",), ("--reserved", "--reservation", "myres"), ("--flex-start", "--max-run-duration", "2h")]


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    google_standin.create_delay_s = 0.05
    return Cli(google_standin, tmp_path)


def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


@pytest.mark.parametrize("flags", QUEUED_KINDS, ids=["queued", "reservation", "flex-start"])
def test_delete_takes_the_queued_resource_that_made_the_node(google_standin: GoogleStandin, cli: Cli, flags: tuple[str, ...]) -> None:
    g = google_standin
    cli("create", "held", "--zone", ZONE, "--accelerator-type", TYPE, *flags)
    assert g.node(ZONE, "held") is not None and g.queued_resource(ZONE, "held") is not None
    deleted = cli("delete", "held", "--yes")
    assert deleted.stdout == f"deleted node held (READY) and its queued resource held (ACTIVE) in {ZONE}\n"
    assert g.node(ZONE, "held") is None and g.queued_resource(ZONE, "held") is None and not cli.spec_file("held").exists()


def test_list_shows_a_queued_resource_that_outlived_its_node_and_delete_takes_it(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    cli("create", "held", "--zone", ZONE, "--accelerator-type", TYPE, "--reserved", "--reservation", "myres")
    g.vanish(ZONE, "held")  # the node deleted by another hand (gcloud, the console): its request stays, SUSPENDED
    listed = cli("list", "--zone", ZONE)
    [row] = [line for line in listed.stdout.splitlines() if line.startswith("held ")]
    assert "queued: SUSPENDED, no node" in row and TYPE in row
    assert (
        f"tpuctl: queued resource held in {ZONE} is SUSPENDED with no node; it still counts against TPU quota: `tpuctl delete held --zone {ZONE}` deletes it"
    ) in listed.stderr.splitlines()
    deleted = cli("delete", "held", "--yes")
    assert deleted.stdout == f"deleted queued resource held (SUSPENDED), which had outlived its node held, in {ZONE}\n"
    assert g.queued_resource(ZONE, "held") is None
    assert "held" not in cli("list", "--zone", ZONE).stdout + cli("list", "--zone", ZONE).stderr


def test_a_rerun_waits_for_a_deleting_node_and_makes_it_anew(google_standin: GoogleStandin, cli: Cli) -> None:
    """An interrupted `delete` leaves the node DELETING: the rerun of its create waits for it to go, then creates."""
    g = google_standin
    cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE)
    g.create_delay_s = 5.0  # the node is DELETING that long: the rerun's first look comes after its start (3 s seen under load)
    g.faults.untyped_delete_replies = True  # and a DELETE answered as a lost-typed reply does: nothing trips over it
    with g._lock:  # the DELETE a killed `tpuctl delete` sent before it died
        g.tpu.delete_node({"p": g.project, "z": ZONE, "n": "hunt"}, {}, {})
    assert g.node(ZONE, "hunt")["state"] == "DELETING"  # type: ignore[index]
    again = cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE)
    assert again.stdout.startswith(f"created hunt ({TYPE}, ") and g.node(ZONE, "hunt")["state"] == "READY"  # type: ignore[index]
    assert "DELETING" in again.stderr


def test_a_rerun_on_a_node_stuck_creating_ends_at_the_create_deadline(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.stockout(ZONE, "stuck")
    cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE, "--async")  # left CREATING, as a killed create leaves it
    began = time.monotonic()
    rerun = cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE, code=1, TPUCTL_CREATE_DEADLINE="1")
    assert time.monotonic() - began < 30
    assert error_line(rerun) == (
        f"Error: node hunt in {ZONE} was there already and is still CREATING after 1 s "
        f"(wait and run this again; `tpuctl delete hunt --zone {ZONE}` deletes it, and a rerun then makes it anew)"
    )
    assert g.node(ZONE, "hunt")["state"] == "CREATING"  # type: ignore[index]  # not this run's to delete


def test_a_delete_answered_with_an_untyped_operation_still_deletes(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE)
    g.faults.untyped_delete_replies = True
    assert cli("delete", "hunt", "--yes").stdout == f"deleted node hunt (READY) in {ZONE}\n"
    assert g.node(ZONE, "hunt") is None

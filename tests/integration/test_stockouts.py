"""Stockouts through the real CLI and google-cloud-tpu against the TPU stand-in (issue 36): each kind told apart,
nothing left behind (no node, no saved spec), the stockout remembered, and a node found later without --zone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.standins.cloud_cli import OTHER_ZONE as ZONE
from tests.standins.cloud_cli import Cli, error_line
from tests.standins.google_apis import GoogleStandin

TYPE = "v5litepod-16"


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    google_standin.create_delay_s = 0.05
    return Cli(google_standin, tmp_path)


# (stockout kind in the stand-in, times, extra create flags, what the line says, remembered as)
KINDS = [
    ("capacity", 1, (), "(code 8)", "zone"),
    ("reserved", 1, (), "(code 9)", "reserved"),
    ("preempted", 1, ("--spot",), "(preempted while being created)", "preempted"),
    ("internal", 2, (), "(code 13 twice)", "internal"),
    ("refused", 1, (), "(refused at once)", "refused"),
    ("stuck", 1, (), "(stuck in CREATING)", "stuck"),
]


@pytest.mark.parametrize(("kind", "times", "flags", "words", "remembered"), KINDS, ids=[k[0] for k in KINDS])
def test_each_stockout_is_one_line_leaves_nothing_and_is_remembered(
    google_standin: GoogleStandin, cli: Cli, kind: str, times: int, flags: tuple[str, ...], words: str, remembered: str
) -> None:
    g = google_standin
    g.faults.stockout(ZONE, kind, times)
    result = cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE, *flags, code=1, TPUCTL_CREATE_DEADLINE="1")
    line = error_line(result)
    assert line.startswith(f"Error: {ZONE}: no capacity for {TYPE} {words}; "), line
    assert "nothing was left behind" in line
    assert g.node(ZONE, "hunt") is None and not cli.spec_file("hunt").exists()
    capacity = "spot" if "--spot" in flags else "on-demand"
    [record] = cli.memory()
    assert {k: record[k] for k in ("project", "zone", "type", "kind", "why")} == {
        "project": "tpuctl-test", "zone": ZONE, "type": TYPE, "kind": capacity, "why": remembered
    }
    # The zone is free again: the next create there succeeds, under the same name.
    cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE, *flags)
    assert cli.spec_file("hunt").exists()


def test_one_internal_error_is_tried_again_not_a_stockout(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.stockout(ZONE, "internal", 1)
    created = cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE)
    assert created.stdout.startswith(f"created hunt ({TYPE}, ") and g.node(ZONE, "hunt") is not None
    assert cli.memory() == []


def test_quota_in_code_8_is_a_quota_error_not_a_stockout(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.stockout(ZONE, "quota", 1)
    line = error_line(cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE, code=1))
    assert line.startswith(f"Error: quota exceeded in project tpuctl-test, zone {ZONE}: Quota '") and "nothing was left behind" in line
    assert g.node(ZONE, "hunt") is None and not cli.spec_file("hunt").exists() and cli.memory() == []


def test_a_stocked_out_start_leaves_the_node_stopped(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE)
    cli("stop-vm", "hunt", "--zone", ZONE)
    g.faults.stockout(ZONE, "capacity", 1)
    line = error_line(cli("start", "hunt", "--zone", ZONE, code=1))
    assert line.startswith(f"Error: no TPU capacity in project tpuctl-test, zone {ZONE}: There is no more capacity in the zone"), line
    assert (g.node(ZONE, "hunt") or {}).get("state") == "STOPPED"


def test_the_zone_a_node_landed_in_is_found_without_zone(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    g = google_standin
    cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE)
    ips = [e["ipAddress"] for e in (g.node(ZONE, "hunt") or {})["networkEndpoints"]]
    assert len(ips) == 4 and not cli.spec_file("hunt", "us-central2-b").exists()
    described = cli("describe", "hunt")
    assert ZONE in described.stdout and "READY" in described.stdout
    assert ZONE in cli("describe", "hunt", TPUCTL_ZONE="us-central2-b").stdout  # the saved spec outranks the zone setting
    cli("describe", "hunt", "--zone", "us-central2-b", code=1)  # ... but not --zone
    assert ips[0] in cli("ssh", "hunt", "--dry-run", "--", "hostname").stdout
    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\n\nresolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu='local')\n")
    launched = cli("launch", "--tpu", "hunt", "--dry-run", str(script))
    assert all(ip in launched.stdout for ip in ips), launched.stdout
    assert cli("babysit", "hunt", "--", "true").returncode == 0
    assert cli("delete", "hunt", "--yes").stdout.startswith(f"deleted node hunt (READY) in {ZONE}")
    assert g.node(ZONE, "hunt") is None


def test_a_damaged_memory_is_one_note_and_replaced(google_standin: GoogleStandin, cli: Cli) -> None:
    memory = cli.home / ".local" / "state" / "tpuctl" / "stockouts.json"
    memory.parent.mkdir(parents=True, mode=0o700)
    memory.write_bytes(b"\x00[{garbage")
    google_standin.faults.stockout(ZONE, "capacity")
    result = cli("create", "hunt", "--zone", ZONE, "--accelerator-type", TYPE, code=1)
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ignoring the stockout memory")]
    assert len(notes) == 1 and error_line(result).startswith(f"Error: {ZONE}: no capacity for {TYPE} (code 8)")
    assert [r["why"] for r in cli.memory()] == ["zone"]

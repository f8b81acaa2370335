"""gcloud itself against the Google stand-in: the stand-in speaks the TPU API well enough for Google's own CLI.

gcloud builds its requests from Google's discovery documents, so a create,
list, describe and delete that work here mean the stand-in's URLs, bodies,
operations and error shapes match what the real service accepts and returns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.standins.gcloud import Gcloud
from tests.standins.google_apis import GoogleStandin

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")

ZONE = "us-central2-b"


def tpu_vm(gcloud: Gcloud, *args: str) -> subprocess.CompletedProcess[str]:
    return gcloud.run("compute", "tpus", "tpu-vm", *args)


def test_gcloud_tpu_vm_create_list_describe_delete(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.create_delay_s = 0.1
    gcloud = Gcloud(g, tmp_path, ["tpu"], ["--zone", ZONE])

    created = tpu_vm(gcloud, "create", "fidelity", "--accelerator-type", "v4-8", "--version", "tpu-ubuntu2204-base", "--labels", "team=ml")
    assert created.returncode == 0, created.stderr
    assert "Created tpu [fidelity]" in created.stderr
    stored = g.node(ZONE, "fidelity")
    assert stored is not None and stored["state"] == "READY" and stored["labels"] == {"team": "ml"}

    listed = tpu_vm(gcloud, "list", "--format=json")
    assert listed.returncode == 0, listed.stderr
    assert [n["name"] for n in json.loads(listed.stdout)] == [stored["name"]]

    described = tpu_vm(gcloud, "describe", "fidelity", "--format=json")
    assert described.returncode == 0, described.stderr
    node = json.loads(described.stdout)
    assert node["state"] == "READY" and node["health"] == "HEALTHY" and node["acceleratorType"] == "v4-8"
    assert node["networkEndpoints"][0]["port"] == 8470 and node["id"] == stored["id"]

    deleted = tpu_vm(gcloud, "delete", "fidelity", "--quiet")
    assert deleted.returncode == 0, deleted.stderr
    assert g.node(ZONE, "fidelity") is None

    missing = tpu_vm(gcloud, "describe", "fidelity")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr

    calls = [(m, p.split("?")[0]) for m, p, _ in g.requests]
    base = f"/v2/projects/{g.project}/locations/{ZONE}"
    assert calls[0] == ("POST", f"{base}/nodes")
    assert ("DELETE", f"{base}/nodes/fidelity") in calls
    assert all(p.startswith(f"{base}/") for _, p in calls)
    assert all("alt=json" in p for _, p, _ in g.requests)  # gcloud's apitools asks for JSON explicitly


def test_gcloud_shows_google_shaped_errors(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.create_delay_s = 0.05
    gcloud = Gcloud(g, tmp_path, ["tpu"], ["--zone", ZONE])
    g.faults.capacity_zones.add(ZONE)
    stockout = tpu_vm(gcloud, "create", "stockout", "--accelerator-type", "v4-8", "--version", "tpu-ubuntu2204-base")
    assert stockout.returncode == 1
    assert f'There is no more capacity in the zone \\"{ZONE}\\"' in stockout.stderr and '"code": 8' in stockout.stderr
    assert g.node(ZONE, "stockout") is None
    g.faults.denied_permissions.add("tpu.nodes.list")
    denied = tpu_vm(gcloud, "list")
    assert denied.returncode == 1 and "PERMISSION_DENIED: Permission 'tpu.nodes.list' denied" in denied.stderr
    assert "reason: IAM_PERMISSION_DENIED" in denied.stderr


STOCKOUTS = [
    ("capacity", 8, "There is no more capacity in the zone"),
    ("reserved", 9, "Insufficient reserved capacity"),
    ("preempted", 3, "not supported while in state PREEMPTED"),
]


@pytest.mark.parametrize(("kind", "code", "words"), STOCKOUTS)
def test_gcloud_reports_each_scripted_stockout_as_tpuctl_reads_it(google_standin: GoogleStandin, tmp_path: Path, kind: str, code: int, words: str) -> None:
    """The stockouts tpuctl tells apart (issue 36) are, for gcloud too, the create operation's error with that code."""
    g = google_standin
    g.create_delay_s = 0.05
    gcloud = Gcloud(g, tmp_path, ["tpu"], ["--zone", ZONE])
    g.faults.stockout(ZONE, kind)
    spot = ["--spot"] if kind == "preempted" else []
    stockout = tpu_vm(gcloud, "create", "stockout", "--accelerator-type", "v4-8", "--version", "tpu-ubuntu2204-base", *spot)
    assert stockout.returncode == 1
    assert f'"code": {code}' in stockout.stderr and words in stockout.stderr, stockout.stderr
    assert [m for m, p, _ in g.requests if p.split("?")[0].endswith("/nodes")].count("POST") == 1  # in the operation, not the call

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

from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")

ZONE = "us-central2-b"


class Gcloud:
    """Runs gcloud with a private config directory, a token file and the stand-in as TPU endpoint."""

    def __init__(self, g: GoogleStandin, tmp_path: Path) -> None:
        self.env = standin_env(g, tmp_path) | {
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
        }
        self.flags = ["--access-token-file", self.env["TPUCTL_ACCESS_TOKEN_FILE"], "--project", g.project, "--zone", ZONE]
        # gcloud insists on the trailing slash; without it `config set` fails and every later call
        # would go to the real tpu.googleapis.com.
        configured = self.run("config", "set", "api_endpoint_overrides/tpu", g.url + "/", flags=False)
        assert configured.returncode == 0, configured.stderr

    def run(self, *args: str, flags: bool = True) -> subprocess.CompletedProcess[str]:
        argv = ["gcloud", *args, *(self.flags if flags else [])]
        return subprocess.run(argv, check=False, env=self.env, capture_output=True, text=True, timeout=60)

    def tpu_vm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("compute", "tpus", "tpu-vm", *args)


def test_gcloud_tpu_vm_create_list_describe_delete(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.create_delay_s = 0.1
    gcloud = Gcloud(g, tmp_path)

    created = gcloud.tpu_vm("create", "fidelity", "--accelerator-type", "v4-8", "--version", "tpu-ubuntu2204-base", "--labels", "team=ml")
    assert created.returncode == 0, created.stderr
    assert "Created tpu [fidelity]" in created.stderr
    stored = g.node(ZONE, "fidelity")
    assert stored is not None and stored["state"] == "READY" and stored["labels"] == {"team": "ml"}

    listed = gcloud.tpu_vm("list", "--format=json")
    assert listed.returncode == 0, listed.stderr
    assert [n["name"] for n in json.loads(listed.stdout)] == [stored["name"]]

    described = gcloud.tpu_vm("describe", "fidelity", "--format=json")
    assert described.returncode == 0, described.stderr
    node = json.loads(described.stdout)
    assert node["state"] == "READY" and node["health"] == "HEALTHY" and node["acceleratorType"] == "v4-8"
    assert node["networkEndpoints"][0]["port"] == 8470 and node["id"] == stored["id"]

    deleted = gcloud.tpu_vm("delete", "fidelity", "--quiet")
    assert deleted.returncode == 0, deleted.stderr
    assert g.node(ZONE, "fidelity") is None

    missing = gcloud.tpu_vm("describe", "fidelity")
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
    gcloud = Gcloud(g, tmp_path)
    g.faults.capacity_zones.add(ZONE)
    stockout = gcloud.tpu_vm("create", "stockout", "--accelerator-type", "v4-8", "--version", "tpu-ubuntu2204-base")
    assert stockout.returncode == 1
    assert f'There is no more capacity in the zone \\"{ZONE}\\"' in stockout.stderr and '"code": 8' in stockout.stderr
    assert g.node(ZONE, "stockout") is None
    g.faults.denied_permissions.add("tpu.nodes.list")
    denied = gcloud.tpu_vm("list")
    assert denied.returncode == 1 and "PERMISSION_DENIED: Permission 'tpu.nodes.list' denied" in denied.stderr
    assert "reason: IAM_PERMISSION_DENIED" in denied.stderr

"""gcloud and tpuctl ask for a reservation and for flex-start alike (issue 36): both against the same stand-in,
their requests land with the same fields, and the stand-in takes gcloud's (its v2alpha1 routes follow Google's
discovery document, as gcloud's generated client does)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.standins.fixtures import standin_env
from tests.standins.gcloud import Gcloud
from tests.standins.google_apis import GoogleStandin

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")

ZONE = "us-west4-a"
TYPE = "v5litepod-16"
RUNTIME = "v2-alpha-tpuv5-lite"


def tpuctl(g: GoogleStandin, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    where = ("--zone", ZONE, "--accelerator-type", TYPE, "--runtime-version", RUNTIME)
    result = run_tpuctl(*args, *where, env=standin_env(g, tmp_path), cwd=tmp_path, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result


def test_reserved_and_flex_start_requests_match_gcloud(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.create_delay_s = 0.05
    gcloud = Gcloud(g, tmp_path / "gcloud", ["tpu"], ["--zone", ZONE])

    made = gcloud.run("compute", "tpus", "tpu-vm", "create", "by-gcloud", "--accelerator-type", TYPE, "--version", RUNTIME, "--reserved")
    assert made.returncode == 0, made.stderr
    tpuctl(g, tmp_path, "create", "by-tpuctl", "--reserved")
    theirs, ours = g.node(ZONE, "by-gcloud"), g.node(ZONE, "by-tpuctl")
    assert theirs is not None and ours is not None and theirs["schedulingConfig"] == ours["schedulingConfig"] == {"reserved": True}

    queued = ["compute", "tpus", "queued-resources", "create"]
    common = ["--accelerator-type", TYPE, "--runtime-version", RUNTIME, "--async"]
    made = gcloud.run(*queued, "any-gcloud", "--node-id", "any-gcloud", *common, "--reserved")
    assert made.returncode == 0, made.stderr
    tpuctl(g, tmp_path, "create", "any-tpuctl", "--reserved", "--queued", "--async")
    theirs, ours = g.queued_resource(ZONE, "any-gcloud"), g.queued_resource(ZONE, "any-tpuctl")
    assert theirs is not None and ours is not None
    assert theirs["reservationName"] == ours["reservationName"] == f"projects/{g.project}/locations/{ZONE}/reservations/-"

    flex = ["--provisioning-model", "flex-start", "--max-run-duration", "2d"]
    made = gcloud.run("alpha", *queued, "flex-gcloud", "--node-id", "flex-gcloud", *common, *flex)
    assert made.returncode == 0, made.stderr
    tpuctl(g, tmp_path, "create", "flex-tpuctl", "--flex-start", "--max-run-duration", "2d", "--async")
    theirs, ours = g.queued_resource(ZONE, "flex-gcloud"), g.queued_resource(ZONE, "flex-tpuctl")
    assert theirs is not None and ours is not None
    for field in ("provisioningModel", "runDuration"):
        assert theirs[field] == ours[field], (field, theirs, ours)
    assert ours["runDuration"] == {"maxRunDuration": "172800s"}
    posts = [(m, p.split("?")[0]) for m, p, _ in g.requests if m == "POST" and "/queuedResources" in p]
    assert [p.split("/")[1] for _, p in posts] == ["v2", "v2", "v2alpha1", "v2alpha1"]

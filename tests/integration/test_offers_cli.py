"""`tpuctl offers` through the real CLI against the stand-in's TPU API, Billing Catalog, Cloud Quotas and Storage.

The stand-in's zones are deliberately uneven (tests/standins/catalog.py): v5litepod-16 is offered in
us-central1-a, us-west4-a and europe-west4-a only, so a zone that does not offer it showing up is a bug.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.integration.test_cloud_nodes import Cli, error_line
from tests.standins.gcloud import Gcloud
from tests.standins.google_apis import GoogleStandin

TYPE = "v5litepod-16"  # 16 chips, 4 hosts
ON_DEMAND_QUOTA = "TPUV5sLitepodPerProjectPerZoneForTPUAPI"
SPOT_QUOTA = "TPUV5sLitepodPreemptiblePerProjectPerZoneForTPUAPI"
OFFERING = {"us-central1-a", "us-west4-a", "europe-west4-a"}  # the zones of the stand-in's catalogue that offer TYPE


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    g = google_standin
    g.projects.tpu_quotas = {
        ON_DEMAND_QUOTA: {"us-west4-a": 64, "us-central1-a": 8, "europe-west4-a": 32},
        SPOT_QUOTA: {"us-west4-a": 16},
        "TPUV4PodPerProjectPerZoneForTPUAPI": {"us-central2-b": 32},  # sorted first: v5e's spot quota is on page 2
    }
    g.projects.add_bucket("models", "EUROPE-WEST4")
    made = Cli(g, tmp_path)
    made.env["TPUCTL_STORAGE_ENDPOINT"] = g.url
    return made


def rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    assert lines[0].split()[:4] == ["TYPE", "ZONE", "REGION", "CAPACITY"]
    return [line.split("  ") for line in lines[1:] if line.startswith(TYPE)]


def test_offers_lists_only_the_zones_that_offer_the_type_ranked_and_explained(google_standin: GoogleStandin, cli: Cli) -> None:
    google_standin.add_ready_nodes("us-west4-a", 1, prefix="mine", accelerator_type="v5litepod-8")  # holds 8 of the 64 chips
    google_standin.tpu.empty_type_lists["us-west4-a"] = 1  # an enabled zone answering an empty list once
    result = cli("offers", TYPE, "--model-dir", "gs://models/run1")
    order = [(line.split()[1], line.split()[3]) for line in result.stdout.splitlines()[1:] if line.startswith(TYPE)]
    assert order == [
        ("europe-west4-a", "on-demand"),  # quota, the bucket's region
        ("us-west4-a", "on-demand"),  # quota, elsewhere, cheaper than us-central1-a would not matter: its quota is short
        ("us-central1-a", "on-demand"),  # 8 chips of quota: too little for 16, last of its kind
        ("us-west4-a", "spot"),
        ("europe-west4-a", "spot"),  # no spot quota in the reply: unknown, after the known-good
        ("us-central1-a", "spot"),
    ]
    lines = result.stdout.splitlines()
    by_zone = {(line.split()[1], line.split()[3]): line for line in lines[1:7]}
    assert "$25.76" in by_zone[("europe-west4-a", "on-demand")] and "same region" in by_zone[("europe-west4-a", "on-demand")]
    assert "56 chips" in by_zone[("us-west4-a", "on-demand")] and "elsewhere" in by_zone[("us-west4-a", "on-demand")]
    assert "unknown" in by_zone[("europe-west4-a", "spot")] and "no list price" in by_zone[("europe-west4-a", "spot")]
    assert lines[7].startswith("sorted by: your order of types, then of capacity kinds")
    assert "Cloud Billing Catalog" in lines[8] and lines[-1] == "the model dir's bucket is in EUROPE-WEST4"
    assert google_standin.count("GET", "/quotaInfos") == 2 and google_standin.count("GET", "/storage/v1/b/models") == 1


def test_a_recent_stockout_goes_last_and_is_shown(google_standin: GoogleStandin, cli: Cli) -> None:
    memory = Path(cli.env["HOME"]) / ".local" / "state" / "tpuctl" / "stockouts.json"
    memory.parent.mkdir(parents=True)
    record = {"project": google_standin.project, "zone": "europe-west4-a", "type": TYPE, "kind": "on-demand", "why": "code 8", "when": time.time() - 600}
    memory.write_text(json.dumps([record]))
    offered = json.loads(cli("offers", TYPE, "--capacity", "on-demand", "--json").stdout)
    assert [(o["zone"], o["stockedOutAt"] is not None) for o in offered] == [("us-west4-a", False), ("europe-west4-a", True), ("us-central1-a", False)]
    table = cli("offers", TYPE, "--capacity", "on-demand").stdout
    assert "stocked out 10m ago" in next(line for line in table.splitlines() if "europe-west4-a" in line)


def test_without_quota_access_headroom_is_unknown_never_a_guess(google_standin: GoogleStandin, cli: Cli) -> None:
    google_standin.faults.disabled_apis.add("cloudquotas.googleapis.com")
    result = cli("offers", TYPE, "--capacity", "spot")
    assert {line.split("  ")[0] for line in result.stdout.splitlines()} >= {TYPE}
    assert all("unknown" in line for line in result.stdout.splitlines()[1:4])
    assert "\nquota unknown: " in result.stdout and "cloudquotas.googleapis.com" in result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["offers", "v9z-8"], "v9z"),
        (["offers", TYPE, "--zones", "us-west4-a,us-east1-d"], "us-east1-d does not offer v5litepod-16"),
        (["offers", TYPE, "--zones", "us-west4-a,$(reboot)"], "is not a zone"),
        (["offers", TYPE, "--zones", "mars-north1-a"], "not a Cloud TPU zone of project"),
        (["offers", TYPE, "--capacity", "spot,free"], "is not a capacity kind"),
        (["offers", TYPE, "--model-dir", "/local/dir"], "is not a gs:// path"),
        (["offers", "v4-8", "--zones", "all", "--zone", "us-west4-a"], "not both"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, args: list[str], says: str) -> None:
    result = cli(*args, code=2)
    assert says in error_line(result) and result.stdout == ""


def test_accelerators_is_the_same_command_with_a_notice(cli: Cli) -> None:
    old = cli("accelerators", "--zone", "us-west4-a")
    new = cli("offers", "--zone", "us-west4-a")
    assert old.stdout == new.stdout and "v5litepod-16" in new.stdout and "v6e-8" not in new.stdout
    assert old.stderr == "note: `tpuctl accelerators` is now `tpuctl offers`; the same options work there\n" and new.stderr == ""


def test_list_zones_all_is_all_zones(google_standin: GoogleStandin, cli: Cli) -> None:
    google_standin.add_ready_nodes("us-east5-a", 1, prefix="far", accelerator_type="v5p-8")
    names = lambda *args: [line.split()[:2] for line in cli("list", *args).stdout.splitlines()[1:-1]]  # noqa: E731
    assert names("--zones", "all") == names("--all-zones") and len(names("--all-zones")) == 1
    assert "far-0000" in cli("list", "--zones", "us-east5-a,us-west4-a").stdout


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_agrees_zone_by_zone(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """Google's CLI, one zone at a time as public scripts ask it, names the same zones for the type.

    The stand-in keeps the three zones that offer the type and two that offer only its near kin (v4, v6e): each
    gcloud call costs about a CPU-second, and the other default zones, offering v2/v3/v5p only, add nothing."""
    google_standin.tpu.zones = {z: o for z, o in google_standin.tpu.zones.items() if z in {*OFFERING, "us-east1-d", "us-central2-b"}}
    ours = {o["zone"] for o in json.loads(cli("offers", TYPE, "--capacity", "on-demand", "--json").stdout)}
    gcloud = Gcloud(google_standin, tmp_path / "gcloud", ["tpu"])
    theirs = set()
    for zone in google_standin.zones:
        listed = gcloud.run("compute", "tpus", "tpu-vm", "accelerator-types", "list", f"--zone={zone}", "--format=value(type)")
        assert listed.returncode == 0, listed.stderr
        if TYPE in listed.stdout.split():
            theirs.add(zone)
    assert len(google_standin.zones) == 5 and ours == theirs == OFFERING

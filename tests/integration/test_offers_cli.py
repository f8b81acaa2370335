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

from tests.standins.cloud_cli import ZONE, Cli, error_line
from tests.standins.gcloud import Gcloud
from tests.standins.google_apis import GoogleStandin

TYPE = "v5litepod-16"  # 16 chips, 4 hosts
ON_DEMAND_QUOTA = "TPUV5sLitepodPerProjectPerZoneForTPUAPI"
SPOT_QUOTA = "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"
OFFERING = {"us-central1-a", "us-west4-a", "europe-west4-a"}  # the zones of the stand-in's catalogue that offer TYPE


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    g = google_standin
    g.projects.tpu_quotas = {
        ON_DEMAND_QUOTA: {"us-west4-a": 64, "us-central1-a": 8, "europe-west4-a": 32},
        SPOT_QUOTA: {"us-west4-a": 16},
        "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI": {"us-central2-b": 32},  # sorted first: v5e's spot quota is on page 2
    }
    g.projects.add_bucket("models", "EUROPE-WEST4")
    made = Cli(g, tmp_path, zone=ZONE)
    made.env["TPUCTL_STORAGE_ENDPOINT"] = g.url
    return made


def rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    assert lines[0].split()[:4] == ["TYPE", "ZONE", "REGION", "CAPACITY"]
    return [line.split("  ") for line in lines[1:] if line.startswith(TYPE)]


def test_offers_lists_only_the_zones_that_offer_the_type_ranked_and_explained(google_standin: GoogleStandin, cli: Cli) -> None:
    google_standin.add_ready_nodes("us-west4-a", 1, prefix="mine", accelerator_type="v5litepod-16")  # holds 16 of the 64 chips
    google_standin.add_ready_nodes("us-west4-a", 1, prefix="serving", accelerator_type="v5litepod-8")  # one host: the serving quota's
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
    assert "48 chips" in by_zone[("us-west4-a", "on-demand")] and "elsewhere" in by_zone[("us-west4-a", "on-demand")]
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


def _headroom(cli: Cli, types: str, *args: str) -> dict[tuple[str, str, str], int | None]:
    offered = json.loads(cli("offers", types, "--capacity", "on-demand,spot", "--json", *args).stdout)
    return {(o["acceleratorType"], o["zone"], o["capacity"]): o["quotaHeadroomChips"] for o in offered}


def test_each_quota_is_read_under_googles_id_and_in_its_unit(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """Issue 45: one-host v5e draws on the serving quotas, larger v5e on the training ones; v5e preemptible is
    TPUV5sPreemptibleLitepod..., v6e TPUV6E..., v4 and v5p count TensorCores (2 per chip); a node holds its own
    quota only. A quota with no id tpuctl can cite reads unknown (v4 on-demand), never 0."""
    g = google_standin
    g.projects.tpu_quotas = {
        "TPUV5sLitepodServingPerProjectPerZoneForTPUAPI": {"us-west4-a": 8},
        "TPUV5sLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 64},
        "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 32},
        "TPUV6EPerProjectPerZoneForTPUAPI": {"us-east1-d": 16},
        "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI": {"us-east1-d": 24},
        "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI": {"us-central2-b": 32},
        "TPUV5PPerProjectPerZoneForTPUAPI": {"us-east5-a": 128},
    }
    g.add_ready_nodes("us-west4-a", 1, prefix="serve", accelerator_type="v5litepod-4")  # 4 of the serving quota's 8
    [v4] = g.add_ready_nodes("us-central2-b", 1, prefix="spot", accelerator_type="v4-8")  # 8 TensorCores of the 32
    g.tpu.nodes[("us-central2-b", v4)]["schedulingConfig"] = {"spot": True}
    g.add_ready_nodes("us-east5-a", 1, prefix="big", accelerator_type="v5p-8")  # 8 TensorCores of the 128
    zones = "us-west4-a,us-east1-d,us-central2-b,us-east5-a"
    headroom = _headroom(Cli(g, tmp_path, zone=ZONE), "v5litepod-4,v5litepod-16,v6e-8,v4-16,v5p-16", "--zones", zones)
    assert headroom == {
        ("v5litepod-4", "us-west4-a", "on-demand"): 4, ("v5litepod-4", "us-west4-a", "spot"): None,  # serving: no serving spot quota read
        ("v5litepod-16", "us-west4-a", "on-demand"): 64, ("v5litepod-16", "us-west4-a", "spot"): 32,
        ("v6e-8", "us-east1-d", "on-demand"): 16, ("v6e-8", "us-east1-d", "spot"): 24,
        ("v4-16", "us-central2-b", "on-demand"): None, ("v4-16", "us-central2-b", "spot"): 12,  # (32 - 8) TensorCores: 12 chips
        ("v5p-16", "us-east5-a", "on-demand"): 60, ("v5p-16", "us-east5-a", "spot"): None,  # (128 - 8) TensorCores: 60 chips
    }  # fmt: skip


def test_the_default_dimensions_info_and_the_region_quota_bound_every_zone_without_its_own(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """The DimensionsInfo without dimensions is the quota of every zone (or region) with no entry of its own; a zone's
    headroom is the smaller of its zone's and its region's, and a zero (`details: {}`) is 0, not unknown."""
    g = google_standin
    g.projects.tpu_quotas = {"TPUV5sLitepodPerProjectPerZoneForTPUAPI": {"us-west4-a": 0}, "TPUV5sLitepodPerProjectPerRegionForTPUAPI": {"europe-west4": 16}}
    g.projects.tpu_quota_defaults = {"TPUV5sLitepodPerProjectPerZoneForTPUAPI": 32, "TPUV5sLitepodPerProjectPerRegionForTPUAPI": 64}
    g.add_ready_nodes("us-central1-a", 1, prefix="mine", accelerator_type="v5litepod-16")  # 16 of us-central1's 64, of us-central1-a's 32
    headroom = _headroom(Cli(g, tmp_path, zone=ZONE), TYPE)
    assert {zone: h for (_, zone, kind), h in headroom.items() if kind == "on-demand"} == {"us-west4-a": 0, "us-central1-a": 16, "europe-west4-a": 16}
    table = Cli(g, tmp_path, zone=ZONE)("offers", TYPE, "--capacity", "on-demand").stdout
    assert "16 chips" in next(line for line in table.splitlines() if "europe-west4-a" in line)


def test_a_create_that_puts_a_dearer_zone_first_for_the_bucket_says_so(google_standin: GoogleStandin, cli: Cli) -> None:
    """Issue 45: the model dir's bucket ranks its region first even when another zone is cheaper; the create says so in
    one line (which zone, its price against the cheapest, and that it is nearer the bucket) before it creates."""
    (cli.cwd / "tpuctl.toml").write_text('[cloud]\nmodel-dir = "gs://models/run1"\n')
    priced = {o["zone"]: o["listPrice"]["usdPerHour"] for o in json.loads(cli("offers", TYPE, "--capacity", "on-demand", "--json").stdout)}
    assert priced["europe-west4-a"] > priced["us-west4-a"]
    made = cli("create", "near", "--accelerator-type", TYPE, "--zones", "us-west4-a,europe-west4-a", "--json")
    assert json.loads(made.stdout)["zone"] == "europe-west4-a"
    assert (
        f"tpuctl: note: europe-west4-a goes first at ${priced['europe-west4-a']:,.2f}/h, dearer than the cheapest, us-west4-a at "
        f"${priced['us-west4-a']:,.2f}/h: it is nearer the model dir's bucket in EUROPE-WEST4 (same region; us-west4-a: elsewhere)"
    ) in made.stderr.splitlines()
    cheap = cli("create", "far", "--accelerator-type", TYPE, "--zones", "us-west4-a,us-central1-a", "--json")  # the cheapest goes first: no line
    assert "goes first" not in cheap.stderr


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

"""`tpuctl create --zones ...` hunting through the real CLI and google-cloud-tpu against the TPU stand-in (issue 36).

Ten zones offer v5litepod-16, two others do not; stockouts of each kind are scripted in the zones `tpuctl offers`
ranks first, so the hunt must try them in offers' order, move past each, and leave nothing behind but the winner.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import tpuctl_cmd
from tests.standins import catalog
from tests.standins.cloud_cli import Cli, error_line
from tests.standins.gcloud import Gcloud
from tests.standins.google_apis import GoogleStandin

TYPE = "v5litepod-16"
TEN = [
    "us-west4-a", "us-west4-b", "us-central1-a", "us-central1-b", "us-east1-c",
    "us-east1-d", "us-east5-a", "europe-west4-a", "europe-west4-b", "asia-southeast1-b",
]  # fmt: skip
ELSEWHERE = {"us-central2-b": ("v4-8",), "asia-east1-c": ("v2-8",)}  # zones that never offer v5e: never tried


def _hunting_ground(g: GoogleStandin, tmp_path: Path) -> Cli:
    g.create_delay_s = 0.05
    g.tpu.zones = {z: catalog.full_offer(z, ("v5litepod-8", "v5litepod-16", "v6e-8")) for z in TEN}
    g.tpu.zones |= {z: catalog.full_offer(z, types) for z, types in ELSEWHERE.items()}
    return Cli(g, tmp_path)


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    return _hunting_ground(google_standin, tmp_path)


def ranked(cli: Cli, kind: str) -> list[str]:
    """The zones in the order `tpuctl offers` prints them: the order the hunt must try."""
    offers = json.loads(cli("offers", TYPE, "--capacity", kind, "--json").stdout)
    return [o["zone"] for o in offers]


@pytest.fixture(scope="module")
def first_ranked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """`ranked` for each kind on a stand-in and a home set up as every test's are, before any test scripts a stockout
    or remembers one: the order a hunt must try in a fresh test. Asked once per kind (each ask is a tpuctl process)
    for the tests that read it before they change anything; a test that checks how its own stockouts re-rank the
    zones asks its own stand-in."""
    with GoogleStandin(project="tpuctl-test", seed=0) as g:  # as the google_standin fixture makes it
        cli = _hunting_ground(g, tmp_path_factory.mktemp("first-ranked"))
        return {kind: ranked(cli, kind) for kind in ("spot", "on-demand")}


def creates(g: GoogleStandin) -> list[str]:
    """The zones a node create was sent to, in order."""
    return [path.split("/locations/")[1].split("/")[0] for method, path, _ in g.requests if method == "POST" and "/nodes?" in path]


def specs(cli: Cli) -> list[Path]:
    return sorted((cli.home / ".local" / "share" / "tpuctl" / "nodes").rglob("*.json"))


def test_a_hunt_tries_offers_order_past_each_stockout_kind_and_leaves_only_the_winner(
    google_standin: GoogleStandin, cli: Cli, first_ranked: dict[str, list[str]]
) -> None:
    g = google_standin
    order = first_ranked["spot"]
    assert sorted(order) == sorted(TEN)  # the zones without v5e are not offers
    kinds = ["capacity", "refused", "preempted", "stuck", "reserved"]
    for zone, kind in zip(order, kinds, strict=False):
        g.faults.stockout(zone, kind)
    g.faults.stockout(order[5], "internal", 2)
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "auto", "--capacity", "spot", "--json", TPUCTL_CREATE_DEADLINE="2")
    report = json.loads(result.stdout)
    assert report["zone"] == order[6] and report["capacity"] == "spot" and report["created"] and report["state"] == "READY"
    whys = [t["result"] for t in report["hunt"]["tries"]]
    assert whys == [
        "no capacity (code 8)", "no capacity (refused at once)", "no capacity (preempted while being created)",
        "no capacity (stuck in CREATING)", "no capacity (code 9)", "no capacity (code 13 twice)", "created",
    ]  # fmt: skip
    assert [t["zone"] for t in report["hunt"]["tries"]] == order[:7]
    progress = [line for line in result.stderr.splitlines() if ": no capacity (" in line]
    assert progress[0] == f"tpuctl: {order[0]} {TYPE} spot: no capacity (code 8), next: {order[1]}"
    assert len(progress) == 6 and progress[5].endswith(f"next: {order[6]}")
    assert set(creates(g)) == set(order[:7]) and not set(creates(g)) & set(ELSEWHERE)
    assert [(z, n) for (z, n) in g.tpu.nodes] == [(order[6], "hunt")]  # nothing left in the six stocked-out zones
    assert specs(cli) == [cli.spec_file("hunt", order[6])]
    assert sorted(r["zone"] for r in cli.memory()) == sorted(order[:6])
    # The next hunt finds the node where the last one left it, and tries the stocked-out zones last.
    again = json.loads(cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "auto", "--capacity", "spot", "--json").stdout)
    assert again["zone"] == order[6] and not again["created"]
    now = ranked(cli, "spot")  # asked live: this stand-in's memory of the six stockouts re-ranks them
    assert now[-6:] == sorted(order[:6], key=now.index) and now[0] == order[6]


def test_a_fallback_type_says_what_changed(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    for zone in TEN:
        g.faults.stockout(zone, "capacity")
    result = cli("create", "hunt", "--accelerator-type", f"{TYPE},v6e-8", "--zones", "all")
    node = next(iter(g.tpu.nodes.values()))
    assert node["acceleratorType"] == "v6e-8" and node["runtimeVersion"] == "v2-alpha-tpuv6e"
    assert "fallback to v6e-8: type v5litepod-16 -> v6e-8, hosts 4 -> 1, runtime tpu-vm-tf-2.16.1-pod-pjrt -> v2-alpha-tpuv6e" in result.stdout
    assert result.stdout.count("  tried ") == 10


def test_a_quota_refusal_leaves_out_its_zone_and_the_hunt_goes_on(google_standin: GoogleStandin, cli: Cli, first_ranked: dict[str, list[str]]) -> None:
    """Issue 45: quota is per zone and region, so a refusal in one zone leaves that zone out, says so, and the hunt goes on;
    with spot asked there is no "try --spot" (spot has its own quota), and the refusal is no stockout to remember."""
    g = google_standin
    order = first_ranked["spot"]
    g.faults.quota_zones.add(order[0])
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zones", ",".join(order[:3]), "--capacity", "spot", "--json")
    report = json.loads(result.stdout)
    quota = f"TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI in zone {order[0]}"
    assert report["zone"] == order[1] and report["created"]
    assert [(t["zone"], t["result"]) for t in report["hunt"]["tries"]] == [(order[0], f"quota refused ({quota})"), (order[1], "created")]
    assert f"tpuctl: {order[0]} {TYPE} spot: quota refused ({quota}); leaving out zone {order[0]} for this quota, next: {order[1]}" in result.stderr
    assert "--spot" not in result.stderr and cli.memory() == []
    assert creates(g) == order[:2] and list(g.tpu.nodes) == [(order[1], "hunt")] and specs(cli) == [cli.spec_file("hunt", order[1])]


def test_a_region_quota_refusal_leaves_out_every_zone_of_the_region(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.quota_zones.add("us-west4")  # the region's quota spent: the zone quotas of us-west4-a and -b are not the limit
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "us-west4-a,us-west4-b,us-east1-c", "--capacity", "spot", "--json")
    report = json.loads(result.stdout)
    first = report["hunt"]["tries"][0]["zone"]
    quota = "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI in region us-west4"
    assert first.startswith("us-west4-") and report["zone"] == "us-east1-c"
    other = ({"us-west4-a", "us-west4-b"} - {first}).pop()
    assert [(t["zone"], t["result"]) for t in report["hunt"]["tries"]] == [
        (first, f"quota refused ({quota})"), (other, f"skipped: {quota} refused {first}"), ("us-east1-c", "created"),
    ]  # fmt: skip
    assert "leaving out region us-west4 for this quota, next: us-east1-c" in result.stderr and creates(g) == [first, "us-east1-c"]


def test_a_zone_answering_empty_type_lists_twice_is_left_out_with_a_line(google_standin: GoogleStandin, cli: Cli) -> None:
    """Issue 45: an enabled zone that answers acceleratorTypes.list empty twice says nothing of what it offers: it is
    left out of the hunt with a line, not taken for a zone that offers none of the types (which refuses the create)."""
    g = google_standin
    g.tpu.empty_type_lists[TEN[0]] = 2
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zones", f"{TEN[0]},{TEN[1]}", "--json")
    assert f"tpuctl: note: left out {TEN[0]}: acceleratorTypes.list answered an empty list twice" in result.stderr
    assert json.loads(result.stdout)["zone"] == TEN[1] and creates(g) == [TEN[1]]
    g.tpu.empty_type_lists[TEN[0]] = 2
    table = cli("offers", TYPE, "--zones", f"{TEN[0]},{TEN[1]}").stdout
    assert f"note: left out {TEN[0]}: acceleratorTypes.list answered an empty list twice" in table.splitlines() and f" {TEN[0]} " not in table


def test_the_hunt_timeout_bounds_the_whole_hunt(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    for zone in TEN:
        g.faults.stockout(zone, "stuck")
    began = time.monotonic()
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "all", "--hunt-timeout", "3", "--json", code=1)
    assert time.monotonic() - began < 60
    assert error_line(result).startswith("Error: no capacity found within --hunt-timeout 3 s; tried before: ")
    tries = json.loads(result.stdout)["hunt"]["tries"]
    assert 1 <= len(tries) < 10 and {t["result"] for t in tries} == {"no capacity (stuck in CREATING)"}
    assert g.tpu.nodes == {} and specs(cli) == []


def test_ctrl_c_mid_hunt_deletes_the_try_in_flight_and_exits_130(google_standin: GoogleStandin, cli: Cli, first_ranked: dict[str, list[str]]) -> None:
    g = google_standin
    order = first_ranked["on-demand"]
    g.faults.stockout(order[0], "capacity")
    g.faults.stockout(order[1], "stuck")
    command = tpuctl_cmd("create", "hunt", "--accelerator-type", TYPE, "--zones", "all")
    with subprocess.Popen(command, env=cli.env, cwd=cli.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as hunting:
        deadline = time.monotonic() + 60
        while g.node(order[1], "hunt") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # inside the wait for the node
        hunting.send_signal(signal.SIGINT)
        _, stderr = hunting.communicate(timeout=60)
    assert hunting.returncode == 130, stderr
    last = stderr.splitlines()[-1]
    assert last.startswith(f"Error: interrupted while creating hunt in {order[1]}; the CREATING node it had made was deleted, nothing was left behind; tried before: {order[0]}")
    assert "Traceback" not in stderr and g.tpu.nodes == {} and specs(cli) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--zones", "us-west4-a,not a zone"], "zones 'us-west4-a,not a zone' from --zones is not valid ('not a zone' is not a zone"),
        (["--zones", "us-central2-b"], "us-central2-b does not offer v5litepod-16"),
        (["--zones", "us-central2-b", "--accelerator-type", f"{TYPE},v6e-8"], "us-central2-b does not offer any of v5litepod-16, v6e-8"),
        (["--zones", "all", "--capacity", "spot,reserved=my reservation"], "--capacity reserved='my reservation' is not a reservation's name"),
        (["--zones", "us-west4-a,atlantis-west9-z"], "not a Cloud TPU zone of project tpuctl-test: atlantis-west9-z"),
        (["--zones", "all", "--accelerator-type", f"{TYPE},v9-8"], "v9"),
        (["--zones", "all", "--capacity", "cheap"], "capacity 'cheap' from --capacity is not valid ('cheap' is not a capacity kind"),
        (["--zones", "all", "--zone", "us-west4-a"], "give --zone or --zones, not both"),
        (["--zones", "all", "--capacity", "spot", "--spot"], "give --capacity or --spot/--preemptible/--reserved/--flex-start, not both"),
        (["--zones", "all", "--type", "v5litepod", "--topology", "4x4"], "--type/--topology name one slice in one zone"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_creates_nothing(google_standin: GoogleStandin, cli: Cli, args: list[str], says: str) -> None:
    full = ["--accelerator-type", TYPE, *args] if "--accelerator-type" not in args and "--type" not in args else args
    line = error_line(cli("create", "hunt", *full, code=2))
    assert says in line, line
    assert creates(google_standin) == [] and specs(cli) == []


def test_a_zone_offering_one_of_the_types_is_a_candidate_for_that_type_only(google_standin: GoogleStandin, cli: Cli) -> None:
    """us-central2-b offers v4-8, not v5e: in a v5e,v4-8 hunt it is a v4-8 candidate, not a reason to refuse the hunt."""
    g = google_standin
    g.faults.stockout(TEN[0], "capacity")
    report = json.loads(cli("create", "hunt", "--accelerator-type", f"{TYPE},v4-8", "--zones", f"us-central2-b,{TEN[0]}", "--json").stdout)
    assert [(t["zone"], t["acceleratorType"], t["result"]) for t in report["hunt"]["tries"]] == [
        (TEN[0], TYPE, "no capacity (code 8)"), ("us-central2-b", "v4-8", "created"),
    ]  # fmt: skip


def test_queued_with_several_zones_queues_in_the_best_and_says_so(google_standin: GoogleStandin, cli: Cli, first_ranked: dict[str, list[str]]) -> None:
    order = first_ranked["on-demand"]
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "all", "--queued")
    assert f"queuing in {order[0]}, the best of 10 candidates" in result.stderr
    assert list(google_standin.tpu.nodes) == [(order[0], "hunt")]


def test_gcloud_meets_the_same_stockout_in_the_same_zone(google_standin: GoogleStandin, cli: Cli, tmp_path: Path, first_ranked: dict[str, list[str]]) -> None:
    """The zone the hunt moved past is, for gcloud's own create, the same stockout: the operation's code 8."""
    g = google_standin
    order = first_ranked["on-demand"]
    g.faults.stockout(order[0], "capacity", 2)
    hunted = json.loads(cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "all", "--json").stdout)
    assert hunted["hunt"]["tries"][0] == {"zone": order[0], "acceleratorType": TYPE, "capacity": "on-demand", "result": "no capacity (code 8)",
                                          "seconds": hunted["hunt"]["tries"][0]["seconds"]}  # fmt: skip
    gcloud = Gcloud(g, tmp_path / "gcloud", ["tpu"], ["--zone", order[0]])
    made = gcloud.run("compute", "tpus", "tpu-vm", "create", "other", "--accelerator-type", TYPE, "--version", "tpu-ubuntu2204-base")
    assert made.returncode == 1 and '"code": 8' in made.stderr and f'no more capacity in the zone \\"{order[0]}\\"' in made.stderr
    assert g.node(order[0], "other") is None


def test_the_zones_and_capacity_settings_drive_the_hunt_and_a_zone_flag_still_means_one_zone(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    (cli.cwd / "tpuctl.toml").write_text('[cloud]\nzones = "all"\ncapacity = "spot"\n')
    shown = cli("config", "show").stdout
    assert [line.split()[:2] for line in shown.splitlines() if line.split()[:1] in (["zones"], ["capacity"])] == [["zones", "all"], ["capacity", "spot"]]
    order = ranked(cli, "spot")
    g.faults.stockout(order[0], "capacity")
    hunted = json.loads(cli("create", "hunt", "--accelerator-type", TYPE, "--json").stdout)
    assert hunted["zone"] == order[1] and hunted["capacity"] == "spot" and len(hunted["hunt"]["tries"]) == 2
    # --zone is one zone, as always (no hunt, no `hunt` in the JSON), with the capacity setting's one kind.
    g.faults.stockout(order[2], "capacity")
    line = error_line(cli("create", "plain", "--accelerator-type", TYPE, "--zone", order[2], code=1))
    assert line.startswith(f"Error: {order[2]}: no capacity for {TYPE} (code 8); nothing was left behind")
    plain = json.loads(cli("create", "plain", "--accelerator-type", TYPE, "--zone", order[2], "--json").stdout)
    assert "hunt" not in plain and plain["capacity"] == "spot" and (g.node(order[2], "plain") or {})["schedulingConfig"]["spot"]


def test_a_hunt_across_kinds_moves_from_a_short_reservation_to_flex_start(google_standin: GoogleStandin, cli: Cli, first_ranked: dict[str, list[str]]) -> None:
    g = google_standin
    zone = first_ranked["on-demand"][0]
    g.faults.stockout(zone, "reserved")
    result = cli("create", "hunt", "--accelerator-type", TYPE, "--zone", zone, "--capacity", "reserved,flex-start", "--max-run-duration", "1d", "--json")
    report = json.loads(result.stdout)
    assert [(t["capacity"], t["result"]) for t in report["hunt"]["tries"]] == [("reserved", "no capacity (code 9)"), ("flex-start", "created")]
    assert report["capacity"] == "flex-start" and report["zone"] == zone
    assert [(z, n) for (z, n) in g.tpu.nodes] == [(zone, "hunt")] and specs(cli) == [cli.spec_file("hunt", zone)]
    queued = g.queued_resource(zone, "hunt")
    assert queued is not None and queued["provisioningModel"] == "FLEX_START" and queued["runDuration"] == {"maxRunDuration": "86400s"}
    assert [path[: len("/v2alpha1/")] for method, path, _ in g.requests if method == "POST" and "/queuedResources" in path] == ["/v2alpha1/"]


def test_a_zone_short_of_quota_is_skipped_and_the_fallback_type_tried(google_standin: GoogleStandin, cli: Cli) -> None:
    """A quota refusal ends a hunt, so a zone known to be short of quota for the slice is skipped (never tried): the
    fallback type is tried after the first type's other zone, and the summary names the skipped zone and why."""
    g = google_standin
    first, short = TEN[0], TEN[1]
    g.projects.tpu_quotas = {"TPUV5sLitepodPerProjectPerZoneForTPUAPI": {first: 64, short: 8}}  # 8 chips: short of 16
    g.faults.quota_zones.add(short)
    g.faults.stockout(first, "capacity")
    report = json.loads(cli("create", "hunt", "--accelerator-type", f"{TYPE},v6e-8", "--zones", f"{short},{first}", "--json").stdout)
    assert report["acceleratorType"] == "v6e-8" and report["created"]
    tried = report["hunt"]["tries"][0]
    assert (tried["zone"], tried["acceleratorType"]) == (first, TYPE)
    assert report["hunt"]["skipped"] == [{"zone": short, "acceleratorType": TYPE, "capacity": "on-demand", "result": "skipped: quota holds 8 of 16 chips"}]
    assert (short, TYPE) not in [(t["zone"], t["acceleratorType"]) for t in report["hunt"]["tries"]]
    # Every candidate short: one line naming the quota and the zone, exit 1, nothing created.
    before = len(creates(g))
    line = error_line(cli("create", "other", "--accelerator-type", TYPE, "--zones", short, "--capacity", "on-demand", code=1))
    assert line.startswith(f"Error: no candidate zone has quota for the slice: TPUV5sLitepodPerProjectPerZoneForTPUAPI in {short} (8 of 16 chips) (")
    assert len(creates(g)) == before


def test_a_reservation_is_tried_though_on_demand_quota_is_0(google_standin: GoogleStandin, cli: Cli) -> None:
    """Issue 45: on-demand quota 0 (v5e's default, here the default dimensionsInfo) says nothing of a reservation,
    which carries its own capacity: `--capacity reserved=NAME` tries it, as `create --reserved --reservation` does."""
    g = google_standin
    g.projects.tpu_quota_defaults = {"TPUV5sLitepodPerProjectPerZoneForTPUAPI": 0}
    g.faults.quota_zones |= {TEN[0], TEN[1]}  # an on-demand create would be refused there
    assert all(o["quotaHeadroomChips"] == 0 for o in json.loads(cli("offers", TYPE, "--capacity", "on-demand", "--json").stdout))
    report = json.loads(cli("create", "held", "--accelerator-type", TYPE, "--zones", f"{TEN[0]},{TEN[1]}", "--capacity", "reserved=myres", "--json").stdout)
    assert report["created"] and report["capacity"] == "reserved=myres" and report["hunt"]["skipped"] == []
    queued = g.queued_resource(report["zone"], "held")
    assert queued is not None and queued["reservationName"].endswith(f"/locations/{report['zone']}/reservations/myres")


def test_a_region_short_of_quota_is_skipped_with_its_own_words(google_standin: GoogleStandin, cli: Cli) -> None:
    """A field report (marin-community/marin#1612): zone quota present, the region's quota 0. Every zone of that region
    is skipped, saying the region's quota is the short one; the hunt creates elsewhere."""
    g = google_standin
    g.projects.tpu_quotas = {
        "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI": {zone: 64 for zone in TEN},
        "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI": {"us-west4": 0},
    }
    report = json.loads(cli("create", "hunt", "--accelerator-type", TYPE, "--zones", "us-west4-a,us-west4-b,us-east1-c", "--capacity", "spot", "--json").stdout)
    why = "skipped: region us-west4's quota holds 0 of 16 chips (TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI)"
    assert sorted((s["zone"], s["result"]) for s in report["hunt"]["skipped"]) == [("us-west4-a", why), ("us-west4-b", why)]
    assert report["zone"] == "us-east1-c" and creates(g) == ["us-east1-c"]


def test_a_capacity_setting_with_flex_start_serves_create_and_babysit(google_standin: GoogleStandin, cli: Cli, first_ranked: dict[str, list[str]]) -> None:
    """create takes the setting's flex-start with --max-run-duration; babysit leaves it out with a note, not a refusal."""
    g = google_standin
    zone = first_ranked["spot"][0]
    (cli.cwd / "tpuctl.toml").write_text('[cloud]\ncapacity = "flex-start"\n')
    made = json.loads(cli("create", "flex", "--accelerator-type", TYPE, "--zone", zone, "--max-run-duration", "1d", "--json").stdout)
    assert made["capacity"] == "flex-start" and (g.queued_resource(zone, "flex") or {}).get("provisioningModel") == "FLEX_START"
    (cli.cwd / "tpuctl.toml").write_text('[cloud]\ncapacity = "spot,flex-start"\n')
    sat = cli("babysit", "nowhere", "--zone", zone, "--", "true", code=1)
    assert "babysit: the capacity setting's flex-start is left out: babysit has no run duration to queue one with" in sat.stderr
    assert error_line(sat).startswith("Error: no saved spec for nowhere")


@pytest.mark.parametrize("made_by", ["zone", "hunt"])
def test_babysit_brings_a_preempted_spot_node_back_in_the_next_ranked_zone_and_reruns_the_command(
    google_standin: GoogleStandin, cli: Cli, tmp_path: Path, made_by: str, first_ranked: dict[str, list[str]]
) -> None:
    """Hunting where babysit's --zones says, with --recovery same-zone-first: its own zone first (stocked out here), then
    the hunt; or, for a node a hunting create made, where and as that create hunted, by a spot node's default policy,
    elsewhere-first: the other zones first, its own zone never tried. The command, rerun, finds the node in its new
    zone by name."""
    g = google_standin
    order = first_ranked["spot"]
    made = ["--zone", order[0], "--spot"] if made_by == "zone" else ["--zones", "all", "--capacity", "spot"]
    cli("create", "sitter", *made, "--accelerator-type", TYPE)
    hunt_flags = ["--zones", "all", "--recovery", "same-zone-first"] if made_by == "zone" else []
    runs = tmp_path / "runs.txt"
    # Each run records where `tpuctl describe` finds the node; the second run finishes, as a resumed training would.
    job = f"{shlex.join(tpuctl_cmd('describe', 'sitter', '--json'))} >> {runs} && echo END >> {runs}; test $(grep -c END {runs}) -ge 2 || sleep 60"
    sitter = subprocess.Popen(tpuctl_cmd("babysit", "sitter", *hunt_flags, "--interval", "0.2", "--", "sh", "-c", job),
                              env=cli.env, cwd=cli.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "END" not in (runs.read_text() if runs.exists() else ""):
            assert time.monotonic() < deadline and sitter.poll() is None, sitter.stderr.read() if sitter.stderr else ""
            time.sleep(0.1)
        g.faults.stockout(order[0], "capacity")
        g.preempt(order[0], "sitter")
        _, err = sitter.communicate(timeout=90)
    finally:
        sitter.kill()
    assert sitter.returncode == 0, err
    if made_by == "hunt":
        assert "babysit: sitter was created by a hunt: to bring it back elsewhere, babysit hunts the same way (zones all, capacity spot)" in err
        assert f"babysit: elsewhere-first: hunting over 9 other candidates before {order[0]}, next: {order[1]}" in err
        assert f"babysit: sitter is READY again: recreated in {order[1]} as spot: elsewhere-first ({order[0]} last)" in err
    else:
        assert f"babysit: {order[0]} has no capacity (code 8); hunting over 9 other candidates, next: {order[1]}" in err
        assert f"babysit: sitter is READY again: recreated in {order[1]} as spot: {order[0]} has no capacity (code 8)" in err
    first, second = (json.loads(part) for part in runs.read_text().split("END\n")[:2])
    assert (first["zone"], second["zone"]) == (order[0], order[1]) and second["state"] == "READY"
    assert [key for key in g.tpu.nodes if key[1] == "sitter"] == [(order[1], "sitter")]
    assert (g.node(order[1], "sitter") or {})["schedulingConfig"]["spot"]
    assert specs(cli) == [cli.spec_file("sitter", order[1])]  # the old zone's spec taken back: every command finds it alone
    assert [(r["zone"], r["kind"]) for r in cli.memory()] == ([(order[0], "spot")] if made_by == "zone" else [])  # elsewhere-first never tried it
    assert cli("delete", "sitter", "--yes").stdout.startswith(f"deleted node sitter (READY) in {order[1]}")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--zones", "us-west4-a;rm -rf"], "from --zones is not valid ('us-west4-a;rm -rf' is not a zone"),
        (["--capacity", "flex-start"], "--capacity: 'flex-start' is not a capacity kind (on-demand, spot, preemptible, reserved) (e.g. --capacity spot,on-demand or"),
        (["--recovery", "nearest"], "recovery 'nearest' from --recovery is not valid (same-zone-first or elsewhere-first)"),
    ],
)
def test_babysit_checks_its_hunt_flags_before_anything_else(google_standin: GoogleStandin, cli: Cli, args: list[str], says: str) -> None:
    line = error_line(cli("babysit", "nowhere", *args, "--", "true", code=2))  # no saved spec either: the flags are said first
    assert says in line, line
    assert google_standin.requests == []

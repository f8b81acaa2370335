"""`tpuctl list` with list prices: the real CLI against the stand-in's TPU API and Billing Catalog.

The stand-in's catalogue prices differ from tpuctl's shipped table (tpuctl/tpu/list_prices.py), so
a price shown tells which of the two it came from. Its SKUs are worded as the live catalogue words
them: v4's "Tpu-v4 Pod running in Americas" (issue 45) and v5e's "TpuV5e running in Las Vegas" name
no unit.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.standins.cloud_cli import Cli
from tests.standins.fixtures import write_service_account_key
from tests.standins.google_apis import GoogleStandin
from tpuctl.tpu import list_prices

ZONE = "us-central2-b"
CATALOGUE_V4 = 3.75  # USD per chip-hour, unlike the table's
TABLE_V4 = list_prices.TABLE[("v4", "us-central2")]
WAITING = "tpuctl: reading list prices from the Cloud Billing Catalog (at most 15 s)..."


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    del google_standin.billing.prices[("Tpu-v4 Pod chip", "us-central2", "on-demand")]
    google_standin.billing.prices[("Tpu-v4 Pod", "us-central2", "on-demand")] = CATALOGUE_V4  # "Tpu-v4 Pod running in Americas"
    google_standin.add_ready_nodes(ZONE, 2, accelerator_type="v4-32")  # 16 chips each
    return Cli(google_standin, tmp_path, zone=ZONE)


def _cache(cli: Cli) -> Path:
    return Path(cli.env["XDG_CACHE_HOME"]) / "tpuctl" / "billing-prices.json"


def test_list_shows_the_catalogues_price_per_node_and_the_total(google_standin: GoogleStandin, cli: Cli) -> None:
    assert CATALOGUE_V4 != TABLE_V4
    google_standin.add_ready_nodes("asia-east1-c", 1, prefix="far", accelerator_type="v2-8")  # no SKU there
    lines = cli("list", "--all-zones").stdout.splitlines()
    assert lines[0].split()[-1] == "PRICE/H"
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert rows["bench-0000"].endswith(f"${16 * CATALOGUE_V4:,.2f}") and rows["far-0000"].endswith("no list price")
    assert lines[-1].startswith(
        f"total ${32 * CATALOGUE_V4:,.2f} per hour, 1 node without a list price (or reserved) left out (list prices from the Cloud Billing Catalog"
    )
    assert lines[-1].endswith("no discounts or commitments)") and _cache(cli).exists()
    listed = json.loads(cli("list", "--json").stdout)
    assert [n["listPrice"]["usdPerHour"] for n in listed] == [16 * CATALOGUE_V4] * 2
    assert {n["listPrice"]["source"] for n in listed} == {"catalogue"}
    assert google_standin.count("GET", "/skus") == 2  # one page of each service, then the day's cache


def test_a_reserved_node_is_billed_by_its_reservation_not_a_list_price(google_standin: GoogleStandin, cli: Cli) -> None:
    with google_standin._lock:  # a node made from a reservation: SchedulingConfig.reserved, as the v2 API reports it
        google_standin.tpu.nodes[(ZONE, "bench-0001")]["schedulingConfig"] = {"reserved": True}
    lines = cli("list").stdout.splitlines()
    assert lines[2].split()[0] == "bench-0001" and lines[2].endswith("reserved")
    assert lines[-1].startswith(f"total ${16 * CATALOGUE_V4:,.2f} per hour, 1 node without a list price (or reserved) left out")
    listed = json.loads(cli("list", "--json").stdout)
    assert [n["listPrice"]["usdPerHour"] for n in listed] == [16 * CATALOGUE_V4, None]


def test_without_access_the_shipped_table_is_used_and_marked(google_standin: GoogleStandin, cli: Cli) -> None:
    google_standin.faults.disabled_apis.add("cloudbilling.googleapis.com")
    result = cli("list")
    lines = result.stdout.splitlines()
    assert lines[1].endswith(f"${16 * TABLE_V4:,.2f}")
    assert lines[-1].startswith(f"total ${32 * TABLE_V4:,.2f} per hour (list prices from tpuctl's table of {list_prices.TABLE_DATE}")
    assert "the Billing Catalog was not read: " in lines[-1] and "answered 403: Cloud Billing API has not been used" in lines[-1]
    assert result.stderr == "" and not _cache(cli).exists()
    listed = json.loads(cli("list", "--json").stdout)
    assert {(n["listPrice"]["source"], n["listPrice"]["date"]) for n in listed} == {("table", list_prices.TABLE_DATE)}


@pytest.mark.parametrize(("fault", "why"), [("malformed", "did not answer with JSON"), ("endless", "was still paging after")])
def test_a_broken_catalogue_costs_list_one_marked_line_not_its_listing(google_standin: GoogleStandin, cli: Cli, fault: str, why: str) -> None:
    google_standin.billing.fault = fault
    result = cli("list")
    assert "Traceback" not in result.stderr and len(result.stdout.splitlines()) == 4
    assert f"tpuctl's table of {list_prices.TABLE_DATE}" in result.stdout and why in result.stdout
    assert not _cache(cli).exists()


def test_a_service_account_key_reads_the_catalogue_through_google_auth(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """The key's token comes from the stand-in's /token through google-auth; the same token reads the catalogue."""
    env = {k: v for k, v in cli.env.items() if k != "TPUCTL_ACCESS_TOKEN_FILE"}
    key = write_service_account_key(google_standin, tmp_path / "key.json")
    result = run_tpuctl("list", "--credentials", str(key), env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(f"total ${32 * CATALOGUE_V4:,.2f} per hour (list prices from the Cloud Billing Catalog")
    assert google_standin.count("POST", "/token") >= 1


def test_create_says_the_slices_list_price_before_it_waits(google_standin: GoogleStandin, cli: Cli) -> None:
    """v5litepod-16 is 16 chips; the stand-in's spot price in us-west4 is not the table's, so the line tells its source."""
    spot = google_standin.billing.prices[("TpuV5e", "us-west4", "spot")]
    assert spot != list_prices.TABLE[("v5litepod", "us-west4")] * list_prices.SPOT_ESTIMATE_SHARE["v5litepod"]
    result = cli("create", "hunt", "--zone", "us-west4-a", "--accelerator-type", "v5litepod-16", "--spot", "--json")
    line = next(line for line in result.stderr.splitlines() if "list price" in line)
    assert line.startswith(f"tpuctl: v5litepod-16 in us-west4-a, spot: ${16 * spot:,.2f}/h list price (list prices from the Cloud Billing Catalog")
    body = json.loads(result.stdout)
    assert (body["zone"], body["capacity"], body["state"]) == ("us-west4-a", "spot", "READY")
    assert body["listPrice"]["usdPerHour"] == pytest.approx(16 * spot) and body["listPrice"]["source"] == "catalogue"
    shaped = cli("create", "shaped", "--zone", "us-west4-a", "--type", "v5litepod", "--topology", "2x4", "--spot", "--async")
    assert f"tpuctl: v5litepod-8 in us-west4-a, spot: ${8 * spot:,.2f}/h list price (" in shaped.stderr  # 8 chips


def test_create_where_no_sku_prices_the_slice_says_so_never_a_guess(google_standin: GoogleStandin, cli: Cli) -> None:
    """The table prices v6e in europe-west4; the stand-in's catalogue has no SKU there: once read, "no list price"."""
    google_standin.faults.disabled_apis.add("cloudbilling.googleapis.com")
    result = cli("create", "from-table", "--zone", "europe-west4-a", "--accelerator-type", "v6e-8", "--json")
    line = next(line for line in result.stderr.splitlines() if "list price" in line)
    table = list_prices.TABLE[("v6e", "europe-west4")]
    assert line.startswith(f"tpuctl: v6e-8 in europe-west4-a, on-demand: ${8 * table:,.2f}/h list price (list prices from tpuctl's table of")
    assert json.loads(result.stdout)["listPrice"]["source"] == "table"
    google_standin.faults.disabled_apis.discard("cloudbilling.googleapis.com")
    result = cli("create", "unpriced", "--zone", "europe-west4-a", "--accelerator-type", "v6e-8", "--json")
    assert "tpuctl: v6e-8 in europe-west4-a, on-demand: no list price (list prices from the Cloud Billing Catalog" in result.stderr
    assert json.loads(result.stdout)["listPrice"] == {**json.loads(result.stdout)["listPrice"], "usdPerHour": None, "source": "catalogue"}


def test_a_slow_catalogue_costs_list_offers_and_a_hunting_create_15_s_and_one_line_then_the_table(google_standin: GoogleStandin, cli: Cli) -> None:
    """A catalogue that answers only after 20 s: each command waits the one 15 s deadline, says so once on stderr
    (stdout stays the data), and goes on with the table, its spot prices said to be estimates."""
    google_standin.billing.delay_s = 20.0
    commands = {
        "list": ("list", "--json"),
        "offers": ("offers", "v5litepod-16", "--capacity", "spot"),
        "hunt": ("create", "hunted", "--accelerator-type", "v5litepod-16", "--zones", "us-west4-a,us-central1-a", "--capacity", "spot", "--json"),
    }

    def timed(args: tuple[str, ...]) -> tuple[float, subprocess.CompletedProcess[str]]:
        started = time.monotonic()
        result = cli(*args)
        return time.monotonic() - started, result

    try:
        with ThreadPoolExecutor(len(commands)) as pool:  # at once: the three waits overlap
            done = dict(zip(commands, pool.map(timed, commands.values()), strict=True))
    finally:
        google_standin.billing.released.set()
    estimate = f"its spot prices are estimates of {list_prices.TABLE_DATE}: {list_prices.SPOT_ESTIMATE})"
    for name, (took, result) in done.items():
        assert 15 <= took < 45, (name, took)  # the old hunt waited 60 s, list too
        assert [line for line in result.stderr.splitlines() if "Billing Catalog (at most" in line] == [WAITING], (name, result.stderr)
        assert "had not answered in full at the deadline" in (result.stdout + result.stderr), name
    listed = json.loads(done["list"][1].stdout)
    assert {n["listPrice"]["source"] for n in listed} == {"table"} and [n["listPrice"]["usdPerHour"] for n in listed] == [16 * TABLE_V4] * 2
    assert estimate in done["offers"][1].stdout
    hunted = json.loads(done["hunt"][1].stdout)
    spot = 16 * list_prices.TABLE[("v5litepod", hunted["zone"][:-2])] * list_prices.SPOT_ESTIMATE_SHARE["v5litepod"]
    assert hunted["listPrice"]["usdPerHour"] == pytest.approx(spot) and estimate in hunted["listPrice"]["note"]

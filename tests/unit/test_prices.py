"""List prices (tpuctl/cloud/capacity/prices.py): SKUs read as the Billing Catalog writes them, hostile catalogues, the cache, the table.

The catalogue is the stand-in's (tests/standins/billing_api.py), served over HTTP: its SKUs are
built the way the v1 services.skus.list reference shapes them, and its faults are what a broken
catalogue does (nothing, half a JSON document, a page of tens of MiB, a page token that never ends).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.standins.billing_api import CLOUD_TPU, COMPUTE_ENGINE, sku
from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.capacity import prices
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings import cloud as cloud_settings
from tpuctl.tpu import list_prices


def _read(g: GoogleStandin) -> prices.PriceBook:
    return prices.PriceBook(prices.read_catalogue(g.url, lambda: g.token, None), prices.CATALOGUE_SOURCE, "today")


def test_slice_price_is_chips_times_the_chip_hour_of_its_region_and_kind(google_standin: GoogleStandin) -> None:
    book = _read(google_standin)
    # v4-8: 4 chips x $3.40 (the stand-in's Tpu-v4 Pod chip in us-central2); spot $1.02.
    assert book.slice_price("v4-8", "us-central2-b", "on-demand") == pytest.approx(4 * 3.40)
    assert book.slice_price("v4-32", "us-central2-b", "spot") == pytest.approx(16 * 1.02)
    assert book.slice_price("v4-32", "us-central2-b", "preemptible") == pytest.approx(16 * 1.02)
    # v5e per chip-hour, 16 chips; spot is the usageType Preemptible SKU, not the commitment beside it.
    assert book.slice_price("v5litepod-16", "us-west4-a", "on-demand") == pytest.approx(16 * 1.25)
    assert book.slice_price("v5e-16", "us-west4-a", "spot") == pytest.approx(16 * 0.455)


def test_a_device_hour_prices_a_host_and_a_pod_chip_hour_prices_a_pod_slice(google_standin: GoogleStandin) -> None:
    book = _read(google_standin)
    assert book.slice_price("v2-8", "us-central1-b", "on-demand") == pytest.approx(4.75)  # one device
    assert book.slice_price("v2-8", "us-central1-b", "spot") == pytest.approx(1.42)  # "Preemptible Tpu-v2 device"
    assert book.slice_price("v2-32", "us-central1-b", "on-demand") == pytest.approx(16 * 1.20)  # Pod, per chip


def test_no_sku_is_no_list_price_never_a_neighbours(google_standin: GoogleStandin) -> None:
    book = _read(google_standin)
    assert book.slice_price("v2-8", "asia-east1-c", "on-demand") is None  # the table has one; the catalogue has none
    assert book.slice_price("v2-32", "us-central1-b", "spot") is None  # a device's spot price is no Pod chip's
    assert book.slice_price("v6e-8", "europe-west4-a", "on-demand") is None
    assert book.slice_price("v9-8", "us-central1-a", "on-demand") is None  # a generation tpuctl does not know


def test_reserved_and_flex_start_have_no_list_price_never_spots(google_standin: GoogleStandin) -> None:
    book = _read(google_standin)
    assert book.slice_price("v5litepod-16", "us-west4-a", "spot") is not None  # the region and type are priced
    assert book.slice_price("v5litepod-16", "us-west4-a", "reserved") is None
    assert book.slice_price("v5litepod-16", "us-west4-a", "flex-start") is None


def _rate(description: str, service: str = COMPUTE_ENGINE, usage: str = "OnDemand", **expression: Any) -> list[prices.Rate]:
    item = sku(service, description, usage, "us-west4", 1.25)
    item["pricingInfo"][0]["pricingExpression"].update(expression)
    return list(prices.rates_of([item], service))


def test_the_unit_and_the_kind_are_read_from_the_sku_never_assumed() -> None:
    assert [r.per for r in _rate("TpuV5e chip running in Las Vegas")] == ["chip"]
    assert _rate("TpuV5e chip running in Las Vegas", usageUnit="GiBy.mo") == []  # not an hour
    assert _rate("TpuV5e chip running in Las Vegas", usage="Commit1Yr") == []  # a commitment is no list price
    assert [r.kind for r in _rate("Spot Preemptible TpuV5e chip", usage="Preemptible")] == ["spot"]
    assert [r.kind for r in _rate("Preemptible Tpu-v3 device", service=CLOUD_TPU)] == ["spot"]
    assert _rate("TpuV5e chip", service=CLOUD_TPU) == []  # v5e is sold by Compute Engine, not by Cloud TPU
    assert _rate("TpuV5ex chip") == [] and _rate("Tpu-v4 Pod chip") == []  # whole words of the right service only


# (service, description as the catalogue words it, usageType) -> (generation, kind, per, pod). Sources: issue 45 quotes
# the v4 SKU; the Compute Engine ones are public captures of the live catalogue; "Tpu-v4 Pod Accelerator USA" is a
# wording a third-party reader of the catalogue parses.
WORDINGS = [
    (CLOUD_TPU, "Tpu-v4 Pod running in Americas", "OnDemand", ("v4", "on-demand", "chip", True)),
    (CLOUD_TPU, "Tpu-v4 Pod Accelerator USA", "OnDemand", ("v4", "on-demand", "chip", True)),
    (CLOUD_TPU, "Preemptible Tpu-v4 Pod running in Americas", "OnDemand", ("v4", "spot", "chip", True)),  # Cloud TPU's spot is OnDemand
    (CLOUD_TPU, "Tpu-v3 running in Netherlands", "OnDemand", ("v3", "on-demand", "device", False)),  # a v3 single host: its device
    (CLOUD_TPU, "Tpu-v2 Pod running in Iowa", "OnDemand", ("v2", "on-demand", "chip", True)),
    (COMPUTE_ENGINE, "TpuV5e running in Las Vegas", "OnDemand", ("v5litepod", "on-demand", "chip", None)),
    (COMPUTE_ENGINE, "TpuV5p running in Sao Paulo", "OnDemand", ("v5p", "on-demand", "chip", None)),
    (COMPUTE_ENGINE, "TpuV6e running in Dallas", "OnDemand", ("v6e", "on-demand", "chip", None)),
    (COMPUTE_ENGINE, "TpuV5e attached to Spot Preemptible VMs running in Singapore", "Preemptible", ("v5litepod", "spot", "chip", None)),
    (COMPUTE_ENGINE, "TPU v6e running in Dallas", "OnDemand", ("v6e", "on-demand", "chip", None)),  # no capture spells it so: read alike
]
NO_LIST_PRICE = [
    (COMPUTE_ENGINE, "Reserved TpuV5p in Delhi in Calendar Mode", "OnDemand"),  # captured with usageType OnDemand
    (COMPUTE_ENGINE, "Commitment v1: TpuV5p running in Netherlands for 3 Years", "OnDemand"),
    (COMPUTE_ENGINE, "DWS Defined Duration TpuV6e running in Americas", "OnDemand"),  # Dynamic Workload Scheduler's rate
    (COMPUTE_ENGINE, "TPU7x running in Americas", "OnDemand"),  # a generation tpuctl has no shape for
    (CLOUD_TPU, "TpuV5e running in Las Vegas", "OnDemand"),  # v5e is Compute Engine's
    (COMPUTE_ENGINE, "TpuV5ex running in Las Vegas", "OnDemand"),  # not a whole version word
]


def test_every_wording_of_a_tpu_sku_is_priced_from_its_generation_and_region() -> None:
    """The generation is the version the words name, the region serviceRegions'; a unit unsaid is the generation's."""
    for service, description, usage, (generation, kind, per, pod) in WORDINGS:
        read = [(r.generation, r.region, r.kind, r.per, r.pod, r.usd) for r in _rate(description, service, usage)]
        assert read == [(generation, "us-west4", kind, per, pod, 1.25)], description
    for service, description, usage in NO_LIST_PRICE:
        assert _rate(description, service, usage) == [], description


def test_spot_is_the_catalogues_own_price_in_each_region(google_standin: GoogleStandin) -> None:
    """Spot prices the catalogue words its own way ("attached to Spot Preemptible VMs"), a different share in each region."""
    g = google_standin
    for region, on_demand, spot in (("us-west4", 1.20, 0.12), ("us-central1", 1.20, 0.494237), ("europe-west4", 1.56, 0.936)):
        g.billing.prices[("TpuV5e", region, "on-demand")] = on_demand
        g.billing.prices[("TpuV5e", region, "spot")] = spot
    book = _read(g)
    assert book.slice_price("v5litepod-8", "us-west4-a", "spot") == pytest.approx(8 * 0.12)  # 10 % of on-demand
    assert book.slice_price("v5litepod-8", "us-central1-a", "spot") == pytest.approx(8 * 0.494237)  # 41 %
    assert book.slice_price("v5litepod-8", "europe-west4-a", "on-demand") == pytest.approx(8 * 1.56)
    assert book.slice_price("v5litepod-8", "europe-west4-a", "spot") == pytest.approx(8 * 0.936)  # 60 %


def test_unit_price_is_units_plus_nanos() -> None:
    assert prices.money({"currencyCode": "USD", "units": "3", "nanos": 220000000}) == pytest.approx(3.22)
    assert prices.money({"currencyCode": "USD", "nanos": 455000000}) == pytest.approx(0.455)
    assert prices.money({"currencyCode": "EUR", "units": "3"}) is None
    for bad in ({"units": "x"}, {"units": "1", "nanos": 10**9}, {"units": "-1", "nanos": 5}, {"units": "1e400"}, [], None):
        assert prices.money(bad) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=20), st.dictionaries(st.text(max_size=12), st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=12,
), max_size=6)), max_size=6))  # fmt: skip
def test_hostile_skus_are_passed_over_never_raised(skus: list[Any]) -> None:
    for service in (COMPUTE_ENGINE, CLOUD_TPU):
        for rate in prices.rates_of(skus, service):
            assert rate.usd >= 0


def _ours() -> set[threading.Thread]:
    """Threads other than the stand-in's request handlers (one may still be writing the huge page)."""
    return {t for t in threading.enumerate() if "process_request" not in t.name}


@pytest.mark.parametrize(
    ("fault", "line"),
    [
        ("empty", "listed no TPU SKUs"),
        ("malformed", "did not answer with JSON"),
        ("huge", "is over 32 MiB"),
        ("endless", f"was still paging after {prices.MAX_PAGES} pages"),
    ],
)
def test_a_hostile_catalogue_is_one_line_and_no_hang(google_standin: GoogleStandin, fault: str, line: str) -> None:
    google_standin.billing.fault = fault
    threads = _ours()
    started = time.monotonic()
    with pytest.raises(prices.Unreadable) as caught:
        prices.read_catalogue(google_standin.url, lambda: google_standin.token, None)
    assert line in str(caught.value) and "\n" not in str(caught.value)
    assert time.monotonic() - started < 20
    assert _ours() == threads  # the reader starts nothing that outlives it


def test_paging_follows_next_page_token_to_the_end(google_standin: GoogleStandin) -> None:
    g = google_standin
    for word in ("TpuV6e", "TpuV5p"):
        for n in range(30):
            g.billing.prices[(word, f"us-fake{n}", "on-demand")] = 2.0 + n / 100
    whole = prices.read_catalogue(g.url, lambda: g.token, None)
    original = prices.PAGE_SIZE
    try:
        prices.PAGE_SIZE = 7  # the same catalogue in pages of 7
        paged = prices.read_catalogue(g.url, lambda: g.token, None)
    finally:
        prices.PAGE_SIZE = original
    assert sorted(paged, key=repr) == sorted(whole, key=repr) and len(whole) > 60
    assert g.count("GET", "pageToken=") >= 60 // 7


def test_passing_failures_are_tried_again_and_lasting_ones_are_not(google_standin: GoogleStandin) -> None:
    g = google_standin
    g.faults.burst(2, 503)
    assert prices.read_catalogue(g.url, lambda: g.token, None)  # two 503s, then the pages
    assert [status for _, path, status in g.requests if "/skus" in path][:3] == [503, 503, 200]
    g.faults.burst(prices.ATTEMPTS, 503)
    with pytest.raises(prices.Unreadable, match="answered 503"):
        prices.read_catalogue(g.url, lambda: g.token, None)
    g.faults.disabled_apis.add("cloudbilling.googleapis.com")
    before = g.count("GET", "/skus")
    with pytest.raises(prices.Unreadable, match="answered 403"):
        prices.read_catalogue(g.url, lambda: g.token, None)
    assert g.count("GET", "/skus") == before + 1  # a refusal is final


def test_the_deadline_bounds_a_slow_catalogue(google_standin: GoogleStandin) -> None:
    google_standin.billing.fault = "endless"
    with pytest.raises(prices.Unreadable, match="had not answered in full at the deadline"):
        prices.read_catalogue(google_standin.url, lambda: google_standin.token, None, deadline_s=0.0)


@pytest.fixture
def resolved(google_standin: GoogleStandin, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> cloud_settings.Settings:
    for name in list(os.environ):
        if name.startswith("TPUCTL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "user.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("TPUCTL_BILLING_ENDPOINT", google_standin.url)
    return cloud_settings.resolve()


def test_the_catalogue_is_cached_for_a_day(google_standin: GoogleStandin, resolved: cloud_settings.Settings, tmp_path: Path) -> None:
    g = google_standin
    first = prices.price_book(resolved, lambda: g.token, tmp_path / "cache")
    assert first.source == prices.CATALOGUE_SOURCE and "Cloud Billing Catalog" in first.describe()
    reads = g.count("GET", "/skus")
    g.billing.prices[("Tpu-v4 Pod chip", "us-central2", "on-demand")] = 9.99
    again = prices.price_book(resolved, lambda: g.token, tmp_path / "cache")
    assert g.count("GET", "/skus") == reads and again.slice_price("v4-8", "us-central2-b", "on-demand") == pytest.approx(13.6)
    cache = tmp_path / "cache" / prices.CACHE_NAME
    assert (cache.stat().st_mode & 0o777) == 0o600
    day_old = time.time() - prices.CACHE_S - 1
    cache.write_text(cache.read_text().replace('"read": ', f'"read": {day_old}, "was": '))
    fresh = prices.price_book(resolved, lambda: g.token, tmp_path / "cache")
    assert fresh.slice_price("v4-8", "us-central2-b", "on-demand") == pytest.approx(4 * 9.99)


def test_a_cache_an_earlier_reader_wrote_is_read_again(google_standin: GoogleStandin, resolved: cloud_settings.Settings, tmp_path: Path) -> None:
    """Rates cached today by the reader that dropped SKUs naming no unit would hide v5e's prices for the rest of the day."""
    g = google_standin
    prices.price_book(resolved, lambda: g.token, tmp_path / "cache")
    cache = tmp_path / "cache" / prices.CACHE_NAME
    data = json.loads(cache.read_text())
    del data["reader"]  # as the earlier reader wrote it: today's, this endpoint's, without v5e
    data["rates"] = [row for row in data["rates"] if row["generation"] != "v5litepod"]
    cache.write_text(json.dumps(data))
    reads = g.count("GET", "/skus")
    book = prices.price_book(resolved, lambda: g.token, tmp_path / "cache")
    assert g.count("GET", "/skus") > reads and book.slice_price("v5litepod-16", "us-west4-a", "on-demand") == pytest.approx(16 * 1.25)


def test_without_access_the_table_is_used_and_says_so(google_standin: GoogleStandin, resolved: cloud_settings.Settings, tmp_path: Path) -> None:
    g = google_standin
    g.faults.disabled_apis.add("cloudbilling.googleapis.com")
    book = prices.price_book(resolved, lambda: g.token, tmp_path / "cache")
    assert book.source == prices.TABLE_SOURCE and book.date == list_prices.TABLE_DATE
    assert f"tpuctl's table of {list_prices.TABLE_DATE} ({list_prices.TABLE_SOURCE};" in book.describe()
    assert "answered 403: Cloud Billing API has not been used in project" in book.describe()
    assert book.slice_price("v4-8", "us-central2-b", "on-demand") == pytest.approx(4 * list_prices.TABLE[("v4", "us-central2")])
    assert not (tmp_path / "cache" / prices.CACHE_NAME).exists()  # a failure is never cached

    def no_credentials() -> str:
        raise TpuctlError("no Application Default Credentials")

    g.faults.disabled_apis.clear()
    assert "no Application Default Credentials" in prices.price_book(resolved, no_credentials, tmp_path / "cache").describe()


def test_the_table_prices_no_v2_or_v3_pod_slice() -> None:
    """Cloud TPU's pricing page: v2/v3 Pod slices are sold by commitment only, so they have no list price per hour."""
    book = prices.table_book("offline")
    assert book.slice_price("v2-8", "us-central1-b", "on-demand") == pytest.approx(4 * list_prices.TABLE[("v2", "us-central1")])
    assert book.slice_price("v2-32", "us-central1-b", "on-demand") is None
    assert book.slice_price("v3-32", "europe-west4-a", "spot") is None
    assert book.slice_price("v4-32", "us-central2-b", "on-demand") == pytest.approx(16 * list_prices.TABLE[("v4", "us-central2")])


def test_the_tables_spot_prices_are_said_to_be_estimates_with_its_date() -> None:
    """Google publishes no per-region spot price the table could copy: its spot is a share of on-demand, and says so."""
    book = prices.table_book("offline")
    said = book.describe()
    assert f"its spot prices are estimates of {list_prices.TABLE_DATE}: 30 % of on-demand for v2, v3 and v4, 35 % for v5e, v5p and v6e" in said
    assert said.startswith(f"list prices from tpuctl's table of {list_prices.TABLE_DATE} ({list_prices.TABLE_SOURCE};") and said.endswith("not read: offline")
    assert book.slice_price("v6e-8", "us-east1-b", "spot") == pytest.approx(8 * 0.35 * list_prices.TABLE[("v6e", "us-east1")])
    assert book.slice_price("v4-8", "us-central2-b", "spot") == pytest.approx(4 * 0.30 * list_prices.TABLE[("v4", "us-central2")])


def test_a_slow_catalogue_says_one_line_while_it_waits_and_the_table_follows_at_the_deadline(
    google_standin: GoogleStandin, resolved: cloud_settings.Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = google_standin
    monkeypatch.setattr(prices, "NOTICE_AFTER_S", 0.05)
    g.billing.delay_s = 10.0
    heard: list[str] = []
    started = time.monotonic()
    try:
        book = prices.price_book(resolved, lambda: g.token, tmp_path / "cache", deadline_s=0.5, waiting=heard.append)
    finally:
        g.billing.released.set()
    assert time.monotonic() - started < 3
    assert heard == ["reading list prices from the Cloud Billing Catalog (at most 0.5 s)..."]
    assert book.source == prices.TABLE_SOURCE and "had not answered in full at the deadline" in book.describe()
    assert "estimates" in book.describe() and not (tmp_path / "cache" / prices.CACHE_NAME).exists()


def test_a_quick_read_and_a_cached_one_say_nothing(google_standin: GoogleStandin, resolved: cloud_settings.Settings, tmp_path: Path) -> None:
    """The line is for a wait the user would notice: the stand-in answers in milliseconds, the cache at once."""
    g = google_standin
    heard: list[str] = []
    for _ in range(2):
        book = prices.price_book(resolved, lambda: g.token, tmp_path / "cache", waiting=heard.append)
        assert book.source == prices.CATALOGUE_SOURCE
    assert heard == [] and (tmp_path / "cache" / prices.CACHE_NAME).exists()
    assert prices.DEADLINE_S == 15.0  # every command's one deadline (docs/capacity.md, Bounds)


def test_an_api_key_reads_the_catalogue_without_credentials(google_standin: GoogleStandin) -> None:
    g = google_standin
    assert prices.read_catalogue(g.url, None, g.api_key)
    with pytest.raises(prices.Unreadable, match="answered 400: API key not valid"):
        prices.read_catalogue(g.url, None, "AIzaSy-not-the-key-0000000")


def test_a_reply_that_trickles_is_cut_at_the_deadline() -> None:
    """A server that sends its headers and then a byte at a time: the deadline holds over the whole read."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            until = time.monotonic() + 5  # long past the deadline, short enough that a reader without one ends too
            while not stop.wait(0.1) and time.monotonic() < until:
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    server = threading.Thread(target=trickle, daemon=True)
    server.start()
    started = time.monotonic()
    try:
        with pytest.raises(prices.Unreadable, match="had not answered in full at the deadline"):
            prices.read_catalogue(f"http://127.0.0.1:{listener.getsockname()[1]}", lambda: "t", None, deadline_s=1.0)
    finally:
        stop.set()
        server.join(5)
        listener.close()
    assert time.monotonic() - started < 3


def test_a_closed_port_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(prices.Unreadable, match="cannot reach the Billing Catalog"):
        prices.read_catalogue(f"http://127.0.0.1:{port}", lambda: "t", None)

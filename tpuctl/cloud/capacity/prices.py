"""List prices of TPU slices: the Cloud Billing Catalog's SKUs, cached for a day, else tpuctl's dated table.

A slice's price per hour is its chips (tpuctl/tpu/accelerators.py) times the
chip-hour price of its generation in its zone's region, on-demand or spot. The
catalogue (GET /v1/services/{service}/skus, paged by pageToken / nextPageToken,
https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list) is
read over the standard library like the TPU API's reads in tpu.py: `tpuctl list`
imports neither requests nor google-auth (benchmarks/list_nodes.py). Each SKU is
read for the generation its description names, however worded, and for its
regions from serviceRegions; usageUnit must be "h", and the description's "chip"
or "device" says whose hour it is (a v2/v3 device is one host), where it says
neither the generation decides (`_unit`). Paging is bounded by pages, bytes and
one deadline (DEADLINE_S, for every command, within the command's own: cloud/plumbing/retry.py), so a catalogue that is slow, pages
forever, is huge or is not JSON ends in one line, and the table is used, marked
as such, with that line as the reason. A pair with no SKU has no price.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from tpuctl import __version__
from tpuctl.cloud.plumbing import retry
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.settings.cloud import Settings
from tpuctl.tpu import list_prices
from tpuctl.tpu.accelerators import shape_of
from tpuctl.tpu.capacity import ON_DEMAND, PREEMPTIBLE, SPOT

PAGE_SIZE = 5000  # the API's own maximum (billing/v1/how-tos/catalog-api)
MAX_PAGES = 40  # Compute Engine's catalogue is a few pages of 5000; forty is a catalogue gone wrong
MAX_PAGE_BYTES = retry.MAX_REPLY_BYTES  # a page of 5000 SKUs is about 4 MiB
DEADLINE_S = 15.0  # every command (list, offers, create, a hunt, a launch) reads prices for at most this long, then goes on
NOTICE_AFTER_S = 1.0  # a read not answered from the cache that takes longer says so in one line; a quick one says nothing
ATTEMPTS = 3  # per page, for failures that waiting may cure
_PASSING = frozenset({429, 500, 502, 503, 504})
CACHE_S = 24 * 3600
CACHE_NAME = "billing-prices.json"
READER = 2  # how the cached rates were read: a cache of an earlier reader (1: SKUs naming "chip" or "device" only) is read again
CATALOGUE_SOURCE = "catalogue"
TABLE_SOURCE = "table"


class Unreadable(Exception):
    """The catalogue could not be read or made no sense; the message is the one line a user sees."""


class _Passing(Unreadable):
    """A failure that waiting may cure (no connection, 429, 5xx): tried again, within the deadline."""


@dataclass(frozen=True)
class Rate:
    """One SKU's list price in one region."""

    generation: str  # tpuctl's name: v4, v5litepod, ...
    region: str
    kind: str  # ON_DEMAND or SPOT
    per: str  # "chip" or "device" (a device is one host of the slice)
    pod: bool | None  # Cloud TPU SKUs: for Pod slices (multi-host) or not; None: either
    usd: float
    sku: str


@dataclass(frozen=True)
class PriceBook:
    rates: tuple[Rate, ...]
    source: str  # CATALOGUE_SOURCE or TABLE_SOURCE
    date: str  # the day the catalogue was read, or the table's date
    reason: str = ""  # why the table is used

    def describe(self) -> str:
        """Where the prices come from, in the words every view prints beside them."""
        if self.source == CATALOGUE_SOURCE:
            return f"list prices from the Cloud Billing Catalog, read {self.date}; no discounts or commitments"
        table = f"tpuctl's table of {self.date} ({list_prices.TABLE_SOURCE}; its spot prices are estimates of {self.date}: {list_prices.SPOT_ESTIMATE})"
        return f"list prices from {table}; the Billing Catalog was not read: {self.reason}"

    def slice_price(self, accelerator_type: str, zone: str, capacity: str) -> float | None:
        """USD per hour of the slice, or None where no SKU prices it (never a neighbour's price).

        A reservation is billed by its own terms and flex-start by SKUs tpuctl cannot name with certainty:
        neither has a list price here (never the spot or on-demand one in its place)."""
        if capacity not in (ON_DEMAND, SPOT, PREEMPTIBLE):
            return None
        try:
            shape = shape_of(accelerator_type)
        except TpuctlError:
            return None  # a generation newer than tpuctl's table
        region = zone.rsplit("-", 1)[0]
        kind = ON_DEMAND if capacity == ON_DEMAND else SPOT
        found = [r for r in self.rates if (r.generation, r.region, r.kind) == (shape.generation, region, kind)]
        multi_host = shape.hosts > 1
        # Cloud TPU sells v2/v3 single hosts as devices and bigger slices as Pods; v4 only as Pods (a v4-8 too),
        # so a single host takes a Pod SKU where its generation has no other. A multi-host slice never takes a device's.
        fitting = [r for r in found if r.pod is None or r.pod == multi_host] or [r for r in found if r.pod and not multi_host]
        if not fitting:
            return None
        rate = fitting[0]
        return rate.usd * (shape.chips if rate.per == "chip" else shape.hosts)


def price_text(usd: float | None, unit: str = "") -> str:
    """A list price as every command says it (`unit`: "/h" where the line does not say per hour)."""
    return "no list price" if usd is None else f"${usd:,.2f}{unit}"


def money(value: object) -> float | None:
    """A google.type.Money in USD as a float: units (an int64, a string in JSON) + nanos / 1e9."""
    if not isinstance(value, Mapping) or value.get("currencyCode", "USD") != "USD":
        return None
    try:
        units = int(str(value.get("units", 0) or 0))
        nanos = int(value.get("nanos", 0) or 0)
    except ValueError:
        return None
    if abs(nanos) >= 10**9 or (units and nanos and (units > 0) != (nanos > 0)):
        return None
    usd = units + nanos / 1e9
    return usd if math.isfinite(usd) and usd >= 0 else None


# The version a description names: "Tpu-v4", "TpuV5e", "TPU v6e", in any case; "TpuV5ex" names none.
_VERSION = re.compile(r"(?<![a-z0-9])tpu[ -]?(v\d+[a-z]?)(?![a-z0-9])", re.IGNORECASE)
# Spot in the description whatever usageType says: Cloud TPU's preemptible SKUs are usageType OnDemand ("Preemptible
# Tpu-v3 ...", skypilot fetch_gcp.py); Compute Engine's say "Spot Preemptible" ("TpuV6e attached to Spot Preemptible VMs").
_SPOT = re.compile(r"\b(spot|preemptible)\b", re.IGNORECASE)
# Hours that are no list price though usageType may say OnDemand: a commitment, a calendar-mode reservation ("Reserved
# TpuV5p in Delhi in Calendar Mode", usageType OnDemand in a public capture of the live catalogue), Dynamic Workload
# Scheduler's ("DWS Defined Duration ...", skypilot-org/skypilot#9634) and flex-start's.
_NOT_LIST = re.compile(r"\b(commitment|reserved|calendar|dws|defined duration|flex[- ]?start)\b", re.IGNORECASE)


def _generation(service: str, description: str) -> str | None:
    """tpuctl's generation for the version the description names, when `service` is the one that sells it."""
    found = _VERSION.search(description)
    generation = list_prices.VERSIONS.get(found.group(1).lower()) if found else None
    return generation if generation is not None and list_prices.SERVICES[generation] == service else None


def _kind(sku: Mapping[str, Any], description: str) -> str | None:
    category = _map(sku.get("category"))
    usage = str(category.get("usageType", ""))
    # resourceGroup "TPU": what both services' TPU SKUs carry (gpuhunt's reader keeps those alone; public captures).
    if usage not in ("OnDemand", "Preemptible") or category.get("resourceGroup") != "TPU" or _NOT_LIST.search(description):
        return None  # commitments, reservations and the like are not list prices of an hour; nor is anything but a TPU's
    return SPOT if usage == "Preemptible" or _SPOT.search(description) else ON_DEMAND


def _unit(description: str, generation: str, pod: bool | None) -> str:
    """Whose hour the price is: a device's (one v2/v3 host of 4 chips) or a chip's, as the description says.

    Where it says neither, the wording leaves the unit to the generation. Compute Engine's TPU SKUs are per chip-hour:
    "TpuV6e running in Dallas" at $2.70 and "TpuV5e running in Americas" at $1.20 (public captures of the live catalogue)
    are the pricing page's US chip-hour prices (tpu/pricing, as skypilot-org/skypilot#4218 copies them; skypilot's
    fetch_gcp.py: "The price shown for v5 & v6e TPU is per chip hour"). For Cloud TPU's
    ("Tpu-v4 Pod running in Americas") the wording is truly ambiguous: skypilot's and gpuhunt's readers take it per
    8 TensorCores (a v4 host of 4 chips), while the pricing page sells v4 and v2/v3 Pod slices per chip-hour. tpuctl
    follows the pricing page: a chip's hour, except a v2/v3 single host's, which the page sells by the device."""
    if re.search(r"\bdevices?\b", description, re.IGNORECASE):
        return "device"
    if re.search(r"\bchips?\b", description, re.IGNORECASE):
        return "chip"
    return "device" if generation in list_prices.DEVICES_ONLY and not pod else "chip"


def _hourly(sku: Mapping[str, Any]) -> float | None:
    """The first tier's price of an hour; None for any other unit (usageUnit is read, never assumed)."""
    infos = sku.get("pricingInfo")
    if not isinstance(infos, list) or not infos:
        return None
    expression = _map(_map(infos[-1]).get("pricingExpression"))
    if expression.get("usageUnit") != "h":
        return None
    tiers = [t for t in expression.get("tieredRates") or [] if isinstance(t, Mapping)]
    first = [t for t in tiers if not t.get("startUsageAmount")]
    return money(first[0].get("unitPrice")) if first else None


def rates_of(skus: list[Any], service: str) -> Iterator[Rate]:
    """The TPU rates among one service's SKUs, each for its generation and regions whatever its wording; anything
    else, or anything malformed, is passed over."""
    for sku in skus:
        if not isinstance(sku, Mapping) or not isinstance(sku.get("description"), str):
            continue
        description = str(sku["description"])
        generation = _generation(service, description)
        kind = _kind(sku, description)
        usd = _hourly(sku)
        if generation is None or kind is None or usd is None:
            continue
        pod = bool(re.search(r"\bpod\b", description, re.IGNORECASE)) if service == list_prices.CLOUD_TPU else None
        per = _unit(description, generation, pod)
        regions = sku.get("serviceRegions")
        for region in regions if isinstance(regions, list) else []:
            if isinstance(region, str):
                yield Rate(generation, region, kind, per, pod, usd, str(sku.get("skuId", "")))


def read_catalogue(
    endpoint: str, bearer: Callable[[], str] | None, api_key: str | None, *, deadline_s: float = DEADLINE_S, max_page_bytes: int = MAX_PAGE_BYTES
) -> tuple[Rate, ...]:
    """Every TPU rate of both services; Unreadable with one line when the catalogue cannot be read in bounds."""
    deadline = time.monotonic() + min(deadline_s, retry.left())  # within the command's deadline too (retry.py)
    rates: list[Rate] = []
    for service in sorted(set(list_prices.SERVICES.values())):
        fetch = partial(_page_retried, endpoint, service, bearer=bearer, api_key=api_key, deadline=deadline, cap=max_page_bytes)
        try:
            for reply in retry.pages(fetch, f"the Billing Catalog at {endpoint} (service {service})", MAX_PAGES):
                skus = reply.get("skus", [])
                rates += rates_of(skus if isinstance(skus, list) else [], service)
        except retry.Endless as err:
            raise Unreadable(str(err)) from None
    if not rates:
        raise Unreadable(f"the Billing Catalog at {endpoint} listed no TPU SKUs")
    return tuple(rates)


def _page_retried(
    endpoint: str, service: str, token: str, *, bearer: Callable[[], str] | None, api_key: str | None, deadline: float, cap: int
) -> dict[str, Any]:
    def once() -> dict[str, Any]:
        began = time.monotonic()
        try:
            return _page(endpoint, service, token, bearer, api_key, deadline, cap)
        except _Passing:
            retry.spend(time.monotonic() - began)  # unanswered: the command's other calls have that much less time
            raise

    for attempt in range(ATTEMPTS - 1):
        try:
            return once()
        except _Passing:
            pause = retry.backoff(attempt)
            if time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
            retry.spend(pause)
    return once()


def _page(endpoint: str, service: str, token: str, bearer: Callable[[], str] | None, api_key: str | None, deadline: float, cap: int) -> dict[str, Any]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Unreadable(f"the Billing Catalog at {endpoint} had not answered in full at the deadline")
    parts = urlsplit(endpoint.rstrip("/"))
    query = {"pageSize": str(PAGE_SIZE), **({"pageToken": token} if token else {}), **({"key": api_key} if api_key else {})}
    headers = {"Accept": "application/json", "User-Agent": f"tpuctl/{__version__}"}
    try:
        if not api_key and bearer is not None:
            headers["Authorization"] = f"Bearer {bearer()}"
        connection = retry.connection(parts, min(left, 30.0), until=deadline, cap=cap)  # read whole by the deadline, at most cap bytes
        try:
            connection.request("GET", f"{parts.path}/v1/services/{service}/skus?{urlencode(query)}", headers=headers)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
    except TpuctlError as err:
        raise Unreadable(err.message) from None
    except retry.TooLarge:
        raise Unreadable(f"a page of the Billing Catalog at {endpoint} is over {cap >> 20} MiB") from None
    except retry.Cut:
        raise Unreadable(f"the Billing Catalog at {endpoint} had not answered in full at the deadline") from None
    except (OSError, http.client.HTTPException) as exc:
        raise _Passing(f"cannot reach the Billing Catalog at {endpoint}: {one_line(str(exc) or type(exc).__name__)}") from None
    if response.status >= 400:
        raise (_Passing if response.status in _PASSING else Unreadable)(f"the Billing Catalog at {endpoint} answered {response.status}: {_error_message(body)}")
    try:
        reply = json.loads(body)
    except ValueError:
        raise Unreadable(f"the Billing Catalog at {endpoint} did not answer with JSON") from None
    if not isinstance(reply, dict):
        raise Unreadable(f"the Billing Catalog at {endpoint} answered with no list of SKUs")
    return reply


def _error_message(body: bytes) -> str:
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", "replace")
    return one_line(str(message)) or "no message"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def table_book(reason: str) -> PriceBook:
    """The shipped table: its on-demand prices as published, its spot prices the estimates list_prices says they are."""
    rates = tuple(
        Rate(gen, region, kind, "chip", False if gen in list_prices.DEVICES_ONLY else None, round(usd, 6), "")
        for (gen, region), on_demand in list_prices.TABLE.items()
        for kind, usd in ((ON_DEMAND, on_demand), (SPOT, on_demand * list_prices.SPOT_ESTIMATE_SHARE[gen]))
    )
    return PriceBook(rates, TABLE_SOURCE, list_prices.TABLE_DATE, one_line(reason))


def price_book(
    settings: Settings,
    bearer: Callable[[], str] | None,
    cache_dir: Path | None = None,
    *,
    deadline_s: float = DEADLINE_S,
    waiting: Callable[[str], None] | None = None,
) -> PriceBook:
    """Today's cached catalogue, else the catalogue read now (and cached), else the table with the reason.

    `waiting` hears one line once a read the cache did not answer has taken NOTICE_AFTER_S (a cached or quick read says
    nothing), so a slow catalogue is never a silent pause; `deadline_s` is DEADLINE_S but for tests."""
    endpoint = settings.require("billing-endpoint").rstrip("/")
    folder = cache_dir or _cache_dir()
    cached = _load_cache(folder / CACHE_NAME, endpoint)
    if cached is not None:
        return cached
    try:
        with _said_after(NOTICE_AFTER_S, waiting, f"reading list prices from the Cloud Billing Catalog (at most {deadline_s:g} s)..."):
            rates = read_catalogue(endpoint, bearer, settings.get("billing-api-key"), deadline_s=deadline_s)
    except Unreadable as err:
        return table_book(str(err))
    read = time.time()
    _save_cache(folder, endpoint, rates, read)
    return PriceBook(rates, CATALOGUE_SOURCE, _day(read))


@contextmanager
def _said_after(delay_s: float, say: Callable[[str], None] | None, line: str) -> Iterator[None]:
    """`line` to `say` once the block has run `delay_s`, never after it ends: the timer is cancelled and joined there."""
    if say is None:
        yield
        return
    timer = threading.Timer(delay_s, say, (line,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


def _cache_dir() -> Path:
    from platformdirs import user_cache_path  # here, not at the top: `--help` imports nothing it need not

    return user_cache_path("tpuctl")


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d")


def _load_cache(path: Path, endpoint: str) -> PriceBook | None:
    """The cached rates when this reader wrote them for this endpoint under a day ago; anything odd is no cache."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        read = float(data["read"])
        if data.get("reader") != READER or data["endpoint"] != endpoint or not 0 <= time.time() - read < CACHE_S:
            return None
        rates = tuple(Rate(**row) for row in data["rates"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return PriceBook(rates, CATALOGUE_SOURCE, _day(read)) if rates else None


def _save_cache(folder: Path, endpoint: str, rates: tuple[Rate, ...], read: float) -> None:
    """Best effort: a folder that is not this user's private one is left alone and the catalogue read again next time."""
    from tpuctl.inputs.private_files import private_dir, write_private

    try:
        write_private(private_dir(folder) / CACHE_NAME, json.dumps({"reader": READER, "endpoint": endpoint, "read": read, "rates": [asdict(r) for r in rates]}))
    except (OSError, TpuctlError):
        return

"""List prices of TPU slices: the Cloud Billing Catalog's SKUs, cached for a day, else tpuctl's dated table.

A slice's price per hour is its chips (tpuctl/tpu/accelerators.py) times the
chip-hour price of its generation in its zone's region, on-demand or spot. The
catalogue (GET /v1/services/{service}/skus, paged by pageToken / nextPageToken,
https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list) is
read over the standard library like the TPU API's reads in tpu.py: `tpuctl list`
imports neither requests nor google-auth (benchmarks/list_nodes.py). Each
SKU's unit is read, never assumed: usageUnit must be "h", and the description
says whether the hour is a chip's or a device's (a v2/v3 device is one host).
Paging is bounded by pages, bytes and a deadline, so a catalogue that pages
forever, is huge or is not JSON ends in one line, and the table is used,
marked as such, with that line as the reason. A pair with no SKU has no price.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from tpuctl import __version__
from tpuctl.cloud import retry
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.settings.cloud import Settings
from tpuctl.tpu import list_prices
from tpuctl.tpu.accelerators import shape_of
from tpuctl.tpu.capacity import ON_DEMAND, PREEMPTIBLE, SPOT

PAGE_SIZE = 5000  # the API's own maximum (billing/v1/how-tos/catalog-api)
MAX_PAGES = 40  # Compute Engine's catalogue is a few pages of 5000; forty is a catalogue gone wrong
MAX_PAGE_BYTES = 32 << 20
DEADLINE_S = 60.0
ACTING_DEADLINE_S = 15.0  # a command that acts (create, a launch on a TPU VM) reads prices for at most this long before it goes on
ATTEMPTS = 3  # per page, for failures that waiting may cure
_PASSING = frozenset({429, 500, 502, 503, 504})
CACHE_S = 24 * 3600
CACHE_NAME = "billing-prices.json"
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
        return f"list prices from tpuctl's table of {self.date} ({list_prices.TABLE_SOURCE}); the Billing Catalog was not read: {self.reason}"

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


def _word(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])")


_WORDS = {gen: (service, _word(word)) for gen, (service, word) in list_prices.CATALOGUE.items()}


def _kind(sku: Mapping[str, Any], service: str, description: str) -> str | None:
    usage = str(_map(sku.get("category")).get("usageType", ""))
    if usage not in ("OnDemand", "Preemptible"):
        return None  # commitments and the like are not list prices of an hour
    if service == list_prices.COMPUTE_ENGINE:
        return SPOT if usage == "Preemptible" else ON_DEMAND
    return SPOT if usage == "Preemptible" or "preemptible" in description.lower() else ON_DEMAND


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
    """The TPU rates among one service's SKUs; anything else, or anything malformed, is passed over."""
    for sku in skus:
        if not isinstance(sku, Mapping) or not isinstance(sku.get("description"), str):
            continue
        description = str(sku["description"])
        generation = next((g for g, (s, word) in _WORDS.items() if s == service and word.search(description)), None)
        kind = _kind(sku, service, description)
        lowered = description.lower()
        per = "device" if "device" in lowered else "chip" if "chip" in lowered else None
        usd = _hourly(sku)
        if generation is None or kind is None or per is None or usd is None:
            continue
        pod = ("pod" in lowered.split()) if service == list_prices.CLOUD_TPU else None
        regions = sku.get("serviceRegions")
        for region in regions if isinstance(regions, list) else []:
            if isinstance(region, str):
                yield Rate(generation, region, kind, per, pod, usd, str(sku.get("skuId", "")))


def read_catalogue(
    endpoint: str, bearer: Callable[[], str] | None, api_key: str | None, *, deadline_s: float = DEADLINE_S, max_page_bytes: int = MAX_PAGE_BYTES
) -> tuple[Rate, ...]:
    """Every TPU rate of both services; Unreadable with one line when the catalogue cannot be read in bounds."""
    deadline = time.monotonic() + deadline_s
    rates: list[Rate] = []
    for service in sorted({s for s, _ in list_prices.CATALOGUE.values()}):
        token = ""
        for _ in range(MAX_PAGES):
            reply = _page_retried(endpoint, service, token, bearer, api_key, deadline, max_page_bytes)
            skus = reply.get("skus", [])
            rates += rates_of(skus if isinstance(skus, list) else [], service)
            token = str(reply.get("nextPageToken") or "")
            if not token:
                break
        else:
            raise Unreadable(f"the Billing Catalog at {endpoint} was still paging after {MAX_PAGES} pages of service {service}")
    if not rates:
        raise Unreadable(f"the Billing Catalog at {endpoint} listed no TPU SKUs")
    return tuple(rates)


def _page_retried(endpoint: str, service: str, token: str, bearer: Callable[[], str] | None, api_key: str | None, deadline: float, cap: int) -> dict[str, Any]:
    for attempt in range(ATTEMPTS - 1):
        try:
            return _page(endpoint, service, token, bearer, api_key, deadline, cap)
        except _Passing:
            pause = retry.backoff(attempt)
            if time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
    return _page(endpoint, service, token, bearer, api_key, deadline, cap)


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
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=min(left, 30.0))
        try:
            connection.request("GET", f"{parts.path}/v1/services/{service}/skus?{urlencode(query)}", headers=headers)
            response = connection.getresponse()
            body = _read_bounded(response, connection, cap, deadline, endpoint)
        finally:
            connection.close()
    except TpuctlError as err:
        raise Unreadable(err.message) from None
    except (OSError, http.client.HTTPException) as exc:
        raise _Passing(f"cannot reach the Billing Catalog at {endpoint}: {one_line(str(exc) or type(exc).__name__)}") from None
    if len(body) > cap:
        raise Unreadable(f"a page of the Billing Catalog at {endpoint} is over {cap >> 20} MiB")
    if response.status >= 400:
        raise (_Passing if response.status in _PASSING else Unreadable)(f"the Billing Catalog at {endpoint} answered {response.status}: {_error_message(body)}")
    try:
        reply = json.loads(body)
    except ValueError:
        raise Unreadable(f"the Billing Catalog at {endpoint} did not answer with JSON") from None
    if not isinstance(reply, dict):
        raise Unreadable(f"the Billing Catalog at {endpoint} answered with no list of SKUs")
    return reply


def _read_bounded(response: http.client.HTTPResponse, connection: http.client.HTTPConnection, cap: int, deadline: float, endpoint: str) -> bytes:
    """At most cap + 1 bytes, and never past the deadline: a reply that trickles in a byte at a time is cut there."""
    chunks: list[bytes] = []
    size = 0
    while size <= cap:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Unreadable(f"the Billing Catalog at {endpoint} had not answered in full at the deadline")
        if connection.sock is not None:
            connection.sock.settimeout(min(left, 30.0))
        chunk = response.read1(min(1 << 20, cap + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _error_message(body: bytes) -> str:
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", "replace")
    return one_line(str(message)) or "no message"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def table_book(reason: str) -> PriceBook:
    rates = tuple(
        Rate(gen, region, kind, "chip", False if gen in list_prices.DEVICES_ONLY else None, usd, "")
        for (gen, region), pair in list_prices.TABLE.items()
        for kind, usd in zip((ON_DEMAND, SPOT), pair, strict=True)
    )
    return PriceBook(rates, TABLE_SOURCE, list_prices.TABLE_DATE, one_line(reason))


def price_book(settings: Settings, bearer: Callable[[], str] | None, cache_dir: Path | None = None, *, deadline_s: float = DEADLINE_S) -> PriceBook:
    """Today's cached catalogue, else the catalogue read now (and cached), else the table with the reason.
    `deadline_s`: a launch, which prices its run by the way, waits less for an unreachable catalogue than `list`."""
    endpoint = settings.require("billing-endpoint").rstrip("/")
    folder = cache_dir or _cache_dir()
    cached = _load_cache(folder / CACHE_NAME, endpoint)
    if cached is not None:
        return cached
    try:
        rates = read_catalogue(endpoint, bearer, settings.get("billing-api-key"), deadline_s=deadline_s)
    except Unreadable as err:
        return table_book(str(err))
    read = time.time()
    _save_cache(folder, endpoint, rates, read)
    return PriceBook(rates, CATALOGUE_SOURCE, _day(read))


def _cache_dir() -> Path:
    from platformdirs import user_cache_path  # here, not at the top: `--help` imports nothing it need not

    return user_cache_path("tpuctl")


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d")


def _load_cache(path: Path, endpoint: str) -> PriceBook | None:
    """The cached rates when they are this endpoint's and under a day old; anything odd is no cache."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        read = float(data["read"])
        if data["endpoint"] != endpoint or not 0 <= time.time() - read < CACHE_S:
            return None
        rates = tuple(Rate(**row) for row in data["rates"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return PriceBook(rates, CATALOGUE_SOURCE, _day(read)) if rates else None


def _save_cache(folder: Path, endpoint: str, rates: tuple[Rate, ...], read: float) -> None:
    """Best effort: a folder that is not this user's private one is left alone and the catalogue read again next time."""
    from tpuctl.inputs.private_files import private_dir, write_private

    try:
        write_private(private_dir(folder) / CACHE_NAME, json.dumps({"endpoint": endpoint, "read": read, "rates": [asdict(r) for r in rates]}))
    except (OSError, TpuctlError):
        return

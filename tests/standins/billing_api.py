"""The Cloud Billing Catalog's `GET /v1/services/{service}/skus` (v1), as the stand-in serves it.

Shapes after https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list and
billing/v1/how-tos/catalog-api: a ListSkusResponse {skus, nextPageToken}, at most 5000 SKUs a page
(pageSize lowers it), no token on the last page; each Sku with name, skuId, description,
category {serviceDisplayName, resourceFamily, resourceGroup, usageType}, serviceRegions, and
pricingInfo[].pricingExpression {usageUnit, usageUnitDescription, baseUnit, baseUnitConversionFactor,
displayQuantity, tieredRates[{startUsageAmount, unitPrice: Money {currencyCode, units (int64 as a
string), nanos}}]}. Descriptions are worded as the live catalogue words them, a place name where
serviceRegions names the region: TPU v5e / v5p / v6e are Compute Engine SKUs per chip-hour that name
no unit ("TpuV5e running in Las Vegas"), spot as usageType Preemptible "TpuV5e attached to Spot
Preemptible VMs running in ..." (public captures of the live catalogue, 2026); v2 / v3 / v4 are Cloud
TPU SKUs ("Tpu-v3 device", "Tpu-v4 Pod", "Preemptible " before them for spot, usageType OnDemand:
skypilot fetch_gcp.py). Beside them sit SKUs a reader must pass over: a commitment, a calendar-mode
reservation (usageType OnDemand, as captured), a non-TPU machine, a per-GiB one. `fault` scripts what
a broken catalogue does; `delay_s` makes every page slow.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

COMPUTE_ENGINE = "6F81-5844-456A"
CLOUD_TPU = "E000-3F24-B8AA"
MAX_PAGE = 5000
FAULTS = ("", "empty", "malformed", "huge", "endless")

# (generation word, region, kind) -> USD per unit. Deliberately not tpuctl's shipped table: a test can tell them apart.
DEFAULT_PRICES: dict[tuple[str, str, str], float] = {
    ("TpuV5e", "us-west4", "on-demand"): 1.25,
    ("TpuV5e", "us-west4", "spot"): 0.455,
    ("TpuV5e", "us-central1", "on-demand"): 1.25,
    ("TpuV5e", "europe-west4", "on-demand"): 1.61,
    ("TpuV5p", "us-east5", "on-demand"): 4.35,
    ("TpuV5p", "us-east5", "spot"): 1.52,
    ("TpuV6e", "us-east1", "on-demand"): 2.85,
    ("TpuV6e", "us-east1", "spot"): 0.99,
    ("Tpu-v2 device", "us-central1", "on-demand"): 4.75,
    ("Tpu-v2 device", "us-central1", "spot"): 1.42,
    ("Tpu-v2 Pod chip", "us-central1", "on-demand"): 1.20,
    ("Tpu-v3 device", "us-central1", "on-demand"): 8.40,
    ("Tpu-v3 Pod chip", "us-central1", "on-demand"): 2.10,
    ("Tpu-v4 Pod chip", "us-central2", "on-demand"): 3.40,
    ("Tpu-v4 Pod chip", "us-central2", "spot"): 1.02,
}  # asia-east1 and europe-west4's v2/v3 have no SKU here: "no list price"

# Where a SKU description says a region is, as the catalogue words it ("running in Las Vegas" for us-west4); us-central2,
# v4's region, as issue 45 quotes its SKU ("Tpu-v4 Pod running in Americas"). A reader takes the region from serviceRegions.
PLACES = {
    "us-central1": "Iowa",
    "us-central2": "Americas",
    "us-east1": "South Carolina",
    "us-east5": "Columbus",
    "us-west4": "Las Vegas",
    "europe-west4": "Netherlands",
    "asia-east1": "Taiwan",
}


def money(usd: float) -> dict[str, Any]:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}


def _sku_id(text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest().upper()
    return f"{digest[:4]}-{digest[4:8]}-{digest[8:12]}"


def sku(service: str, description: str, usage_type: str, region: str, usd: float, unit: str = "h") -> dict[str, Any]:
    sku_id = _sku_id(f"{service} {description} {usage_type} {region}")
    return {
        "name": f"services/{service}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine" if service == COMPUTE_ENGINE else "Cloud TPU",
            "resourceFamily": "Compute" if service == COMPUTE_ENGINE else "TPU",
            "resourceGroup": "TPU" if "tpu" in description.lower() else "N2Standard",
            "usageType": usage_type,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd)}],
                    "usageUnitDescription": "hour" if unit == "h" else "gibibyte month",
                    "baseUnit": "s" if unit == "h" else "By.s",
                    "baseUnitDescription": "second" if unit == "h" else "byte second",
                    "baseUnitConversionFactor": 3600 if unit == "h" else 2.8759101014016e15,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-11-27T08:13:26.419Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
    }


class BillingCatalog:
    """Both services' SKUs, built from `prices`; tests change `prices` or `fault` between calls."""

    def __init__(self) -> None:
        self.prices: dict[tuple[str, str, str], float] = dict(DEFAULT_PRICES)
        self.fault = ""
        self.huge_skus = 50_000  # SKUs of the "huge" page: about 40 MiB, past the reader's 32 MiB
        self.delay_s = 0.0  # how long each request for a page waits before it is answered (a slow catalogue)
        self.released = threading.Event()  # set: no more waiting (a test's end need not sit out a long delay)

    def stall(self) -> None:
        """Called by the server before a page is answered, outside its lock: only the catalogue is slow."""
        if self.delay_s > 0:
            self.released.wait(self.delay_s)

    def skus(self, service: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for (word, region, kind), usd in sorted(self.prices.items()):
            spot, place = kind == "spot", PLACES.get(region, "Americas")
            if word.startswith("TpuV") and service == COMPUTE_ENGINE:
                worded = f"{word} attached to Spot Preemptible VMs running in {place}" if spot else f"{word} running in {place}"
                found.append(sku(service, worded, "Preemptible" if spot else "OnDemand", region, usd))
                if not spot:
                    found.append(sku(service, f"Commitment v1: {word} running in {place} for 1 Year", "Commit1Yr", region, usd * 0.63))
                    found.append(sku(service, f"Reserved {word} in {place} in Calendar Mode", "OnDemand", region, usd * 0.5))
            elif word.startswith("Tpu-") and service == CLOUD_TPU:
                found.append(sku(service, f"{'Preemptible ' if spot else ''}{word} running in {place}", "OnDemand", region, usd))
        if service == COMPUTE_ENGINE:
            found.append(sku(service, "N2 Instance Core running in Americas", "OnDemand", "us-central1", 0.031611))
            found.append(sku(service, "TpuV5e chip storage in us-west4", "OnDemand", "us-west4", 0.04, unit="GiBy.mo"))
        return found

    def list_skus(self, service: str, query: dict[str, str]) -> tuple[int, Any]:
        """(status, reply); a reply of bytes is sent as is (the malformed fault)."""
        if service not in (COMPUTE_ENGINE, CLOUD_TPU):
            return 404, {"error": {"code": 404, "message": f"Service {service} not found.", "status": "NOT_FOUND"}}
        if self.fault == "malformed":
            return 200, b'{"skus": [{"name": "services/'
        if self.fault == "endless":
            return 200, {"skus": self.skus(service)[:1], "nextPageToken": f"t{int(query.get('pageToken', 't0')[1:] or 0) + 1}"}
        if self.fault == "huge":
            filler = sku(service, "N2 Instance Ram running in Americas", "OnDemand", "us-central1", 0.004237)
            return 200, {"skus": [filler] * self.huge_skus}
        everything = [] if self.fault == "empty" else self.skus(service)
        try:
            size = min(MAX_PAGE, int(query.get("pageSize") or MAX_PAGE))
            start = int(query.get("pageToken") or 0)
        except ValueError:
            return 400, {"error": {"code": 400, "message": "Invalid page token.", "status": "INVALID_ARGUMENT"}}
        size = size if size > 0 else MAX_PAGE
        page: dict[str, Any] = {"skus": everything[start : start + size]} if everything[start : start + size] else {}
        if start + size < len(everything):
            page["nextPageToken"] = str(start + size)
        return 200, page


def encode(payload: Any) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()

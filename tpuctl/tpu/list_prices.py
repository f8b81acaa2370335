"""Where each TPU generation's list price lives in the Cloud Billing Catalog, and tpuctl's own dated copy.

The catalogue (cloudbilling.googleapis.com v1 services.skus.list) is the source:
v5e, v5p and v6e are SKUs of the Compute Engine service, v2, v3 and v4 SKUs of
the Cloud TPU service (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py
and dstackai/gpuhunt src/gpuhunt/providers/gcp.py read both services for these).
A SKU's description names its generation, in words that vary from SKU to SKU:
"Tpu-v4 Pod running in Americas" (issue 45), "TpuV5e running in Las Vegas",
"TpuV6e running in Dallas", "TpuV5e attached to Spot Preemptible VMs running in
Singapore" (public captures of the live catalogue, 2026), "TpuV5e chip ..." —
so tpuctl reads the version the words name, never one fixed phrase. The table
below is used only when the catalogue cannot be read (no credentials, 403, no
network), and every price taken from it is shown as coming from it, with its
date: prices change, and a stale number presented as the catalogue's would be a
false statement.
"""

from __future__ import annotations

COMPUTE_ENGINE = "6F81-5844-456A"  # the Compute Engine service's id in the Billing Catalog (cloud.google.com/skus)
CLOUD_TPU = "E000-3F24-B8AA"  # the Cloud TPU service's id

# Generation -> the catalogue service that sells it; a SKU of the other service naming it is not its price.
SERVICES: dict[str, str] = {
    "v2": CLOUD_TPU,
    "v3": CLOUD_TPU,
    "v4": CLOUD_TPU,
    "v5litepod": COMPUTE_ENGINE,
    "v5p": COMPUTE_ENGINE,
    "v6e": COMPUTE_ENGINE,
}

# The version a SKU description names ("Tpu-v4", "TpuV5e", "TPU v6e"), lower-cased -> tpuctl's generation: the catalogue
# and the pricing page call v5e "v5e" where the TPU API's accelerator types say "v5litepod".
VERSIONS: dict[str, str] = {"v2": "v2", "v3": "v3", "v4": "v4", "v5e": "v5litepod", "v5p": "v5p", "v6e": "v6e"}

# Generations whose single hosts are sold by the device (one host of 4 chips: "a v2-8 at $4.50 an hour", TABLE_SOURCE),
# so a SKU description of theirs that names no unit is a device's hour unless it says Pod (tpuctl/cloud/capacity/prices.py).
# Their Pod slices (more than one host) have no on-demand or preemptible price: "available only if you have
# evaluation quota or purchase a 1 year or 3 year commitment" (TABLE_SOURCE). The table prices their single devices only.
DEVICES_ONLY = frozenset({"v2", "v3"})

TABLE_DATE = "2026-11-20"
TABLE_SOURCE = "https://cloud.google.com/tpu/pricing"
# (generation, region) -> on-demand USD per chip-hour, list prices as published on TABLE_SOURCE
# (v2 and v3 are priced per device of 4 chips there: a v2-8 at $4.50 an hour is $1.125 per chip-hour).
# A pair absent here has no list price in the table: never derived from another region's.
TABLE: dict[tuple[str, str], float] = {
    ("v2", "us-central1"): 1.125,
    ("v2", "europe-west4"): 1.2375,
    ("v2", "asia-east1"): 1.2375,
    ("v3", "us-central1"): 2.00,
    ("v3", "europe-west4"): 2.20,
    ("v4", "us-central2"): 3.22,
    ("v5litepod", "us-central1"): 1.20,
    ("v5litepod", "us-west4"): 1.20,
    ("v5litepod", "europe-west4"): 1.56,
    ("v5p", "us-east5"): 4.20,
    ("v6e", "us-east1"): 2.70,
    ("v6e", "europe-west4"): 2.97,
}

# Spot in the table is an ESTIMATE, not a price Google publishes per region: this share of the on-demand price, per
# generation. 30 % is the ratio of the preemptible to the on-demand price of a v2-8 and a v3-8 device when the pricing
# page still gave both ($1.35 of $4.50, $2.40 of $8.00), carried over to v4; 35 % for the newer generations is tpuctl's
# own guess. The catalogue's spot prices run from about 10 to 60 % of on-demand and differ by region (issue 45), so
# every table price for spot is said to be an estimate, with the table's date.
SPOT_ESTIMATE_SHARE: dict[str, float] = {"v2": 0.30, "v3": 0.30, "v4": 0.30, "v5litepod": 0.35, "v5p": 0.35, "v6e": 0.35}
SPOT_ESTIMATE = "30 % of on-demand for v2, v3 and v4, 35 % for v5e, v5p and v6e, not prices Google publishes"

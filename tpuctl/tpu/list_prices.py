"""Where each TPU generation's list price lives in the Cloud Billing Catalog, and tpuctl's own dated copy.

The catalogue (cloudbilling.googleapis.com v1 services.skus.list) is the source:
v5e, v5p and v6e are SKUs of the Compute Engine service, their descriptions
naming TpuV5e / TpuV5p / TpuV6e, spot told by category.usageType "Preemptible";
v2, v3 and v4 are SKUs of the Cloud TPU service, "Tpu-v4 ..." with "Pod" and
"Preemptible" in the description. The table below is used only when the
catalogue cannot be read (no credentials, 403, no network), and every price
taken from it is shown as coming from it, with its date: prices change, and a
stale number presented as the catalogue's would be a false statement.
"""

from __future__ import annotations

COMPUTE_ENGINE = "6F81-5844-456A"  # the Compute Engine service's id in the Billing Catalog
CLOUD_TPU = "E000-3F24-B8AA"  # the Cloud TPU service's id

# Generation -> (the catalogue service that sells it, the word its SKU descriptions carry).
CATALOGUE: dict[str, tuple[str, str]] = {
    "v2": (CLOUD_TPU, "Tpu-v2"),
    "v3": (CLOUD_TPU, "Tpu-v3"),
    "v4": (CLOUD_TPU, "Tpu-v4"),
    "v5litepod": (COMPUTE_ENGINE, "TpuV5e"),
    "v5p": (COMPUTE_ENGINE, "TpuV5p"),
    "v6e": (COMPUTE_ENGINE, "TpuV6e"),
}

# v2 and v3 Pod slices (more than one host) have no on-demand or preemptible price: "available only if you have
# evaluation quota or purchase a 1 year or 3 year commitment" (TABLE_SOURCE). The table prices their single devices only.
DEVICES_ONLY = frozenset({"v2", "v3"})

TABLE_DATE = "2026-11-20"
TABLE_SOURCE = "https://cloud.google.com/tpu/pricing"
# (generation, region) -> (on-demand, spot) USD per chip-hour, list prices as published on TABLE_SOURCE
# (v2 and v3 are priced per device of 4 chips there: a v2-8 at $4.50 an hour is $1.125 per chip-hour).
# A pair absent here has no list price in the table: never derived from another region's.
TABLE: dict[tuple[str, str], tuple[float, float]] = {
    ("v2", "us-central1"): (1.125, 0.3375),
    ("v2", "europe-west4"): (1.2375, 0.37125),
    ("v2", "asia-east1"): (1.2375, 0.37125),
    ("v3", "us-central1"): (2.00, 0.60),
    ("v3", "europe-west4"): (2.20, 0.66),
    ("v4", "us-central2"): (3.22, 0.966),
    ("v5litepod", "us-central1"): (1.20, 0.42),
    ("v5litepod", "us-west4"): (1.20, 0.42),
    ("v5litepod", "europe-west4"): (1.56, 0.546),
    ("v5p", "us-east5"): (4.20, 1.47),
    ("v6e", "us-east1"): (2.70, 0.945),
    ("v6e", "europe-west4"): (2.97, 1.0395),
}

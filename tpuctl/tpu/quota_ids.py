"""Which Cloud TPU quota a slice draws on, as Google names and counts it: the quota ids, per generation, kind
(on-demand or preemptible), scope (zone or region) and, for v5e, serving or training; and the unit each counts.

Cloud TPU keeps separate quotas per TPU version and per kind: on-demand, preemptible (spot, preemptible and
flex-start draw on it) and reserved (https://cloud.google.com/tpu/docs/quota, "Quota types";
https://cloud.google.com/tpu/docs/request-using-flex-start, "Before you begin"). A project has a per-zone
and a per-region quota of each: a create needs room in both (a field report: zone quota present, region
quota 0, every create refused with "Limit: 0 in region us-east5", github.com/marin-community/marin/pull/1612).
v5e slices of one host (v5litepod-1, -4, -8) draw on the v5e *serving* quotas (tpu/docs/quota, "TPU v5e
(training and inference)": tpu-v5s-litepod-serving, -serving-preemptible, -serving-reserved), larger v5e
slices on the training ones.

Every id below is one Google prints or serves, with where it was read; an id no source names is not
composed from the others' pattern: that quota stays unknown and tpuctl says "unknown", never a guess (a
made-up id only ever finds nothing, but a wrong unit or kind would judge a zone by another quota).
Reservations are never judged here: a reservation carries its own capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpuctl.tpu.accelerators import Shape
from tpuctl.tpu.capacity import FLEX_START, PREEMPTIBLE, RESERVED, SPOT

Unit = Literal["chips", "TensorCores"]
QuotaKind = Literal["on-demand", "preemptible", "reserved"]
Use = Literal["training", "serving"]

# Sources, cited by each row.
_DOCS = "https://cloud.google.com/tpu/docs/quota"
_FIELD = "tpuctl's field notes (2026-12-07): public quota errors"
_TPU_INTRO = "github.com/boyazeng/tpu_intro QUOTA.md (ids listed by `gcloud beta quotas info describe`)"
_MARIN_87 = "github.com/marin-community/marin/issues/87 (\"Quota '...' exhausted. Limit 20800 in region us-central2\", \"... Limit 10000 in region us-west4\")"
_MARIN_1612 = "github.com/marin-community/marin/pull/1612 (\"... has been exceeded. Limit: 0 in region us-east5.\", zone quota present)"
_SERVING_ERRORS = "public quota errors: \"Quota limit '...' has been exceeded. Limit: 4 in zone us-central1-a.\" (single-host v5e, default 4)"
_V4_SPOT_TABLE = "a public TPU launcher's spot quota table (openpi's Cloud Quotas zone discovery, SPOT_QUOTA_IDS)"
_V5P = "github.com/xbill9/gemma4-dev (live Cloud Quotas reads, 2026-08-10: the v5p ids, counted in TensorCores, a v5p-8 draws 8 of 128)"


@dataclass(frozen=True)
class Row:
    """The quotas of one (generation, use, kind): the per-zone and per-region ids (None: no source names it)."""

    generation: str
    use: Use
    kind: QuotaKind
    zone: str | None
    region: str | None
    source: str


# v2 and v3 are absent: no source names their ids for each kind and scope (their quotas read unknown).
# v4 on-demand and the v5p and v5e-serving region quotas likewise: issue 45's field errors name v4's
# TPUV4sPod... stem, but no scoped id was seen.
ROWS: tuple[Row, ...] = (
    Row("v5litepod", "training", "on-demand", "TPUV5sLitepodPerProjectPerZoneForTPUAPI", "TPUV5sLitepodPerProjectPerRegionForTPUAPI",
        f"{_FIELD}; {_TPU_INTRO}"),
    Row("v5litepod", "training", "preemptible", "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI",
        f"{_FIELD}; {_TPU_INTRO}; {_MARIN_87}"),
    Row("v5litepod", "serving", "on-demand", "TPUV5sLitepodServingPerProjectPerZoneForTPUAPI", None, f"{_FIELD}; {_SERVING_ERRORS}"),
    Row("v5litepod", "serving", "preemptible", "TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI", None,
        f"{_DOCS} (tpu-v5s-litepod-serving-preemptible); {_SERVING_ERRORS}"),
    Row("v6e", "training", "on-demand", "TPUV6EPerProjectPerZoneForTPUAPI", "TPUV6EPerProjectPerRegionForTPUAPI", _TPU_INTRO),
    Row("v6e", "training", "preemptible", "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI", "TPUV6EPreemptiblePerProjectPerRegionForTPUAPI",
        f"{_FIELD}; {_TPU_INTRO}; {_MARIN_1612}"),
    Row("v4", "training", "preemptible", "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI", "TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI",
        f"{_V4_SPOT_TABLE}; {_FIELD}; {_MARIN_87}"),
    Row("v5p", "training", "on-demand", "TPUV5PPerProjectPerZoneForTPUAPI", None, _V5P),
    Row("v5p", "training", "preemptible", "TPUV5PPreemptiblePerProjectPerZoneForTPUAPI", None, _V5P),
)  # fmt: skip

# What a generation's quotas count. v5e and v6e chips have one TensorCore each (tpu/docs/v5e, tpu/docs/v6e), so
# chips and TensorCores are the same count; v4 quotas count TensorCores (issue 45's field errors, tpuctl's field
# notes), v5p's too (_V5P). v2 and v3 count TensorCores (tpu/docs/quota) but have no row.
UNITS: dict[str, Unit] = {"v4": "TensorCores", "v5p": "TensorCores", "v5litepod": "chips", "v6e": "chips"}
# The v5e types that draw on the serving quotas (tpu/docs/quota: v5litepod-1, v5litepod-4, v5litepod-8).
_SERVING_CHIPS = frozenset({1, 4, 8})


@dataclass(frozen=True)
class Quotas:
    """The quotas a slice of one kind draws on: their ids (None: unknown) and what they count."""

    zone: str | None
    region: str | None
    unit: Unit

    def units(self, shape: Shape) -> int:
        """How much of the quota `shape` takes: its chips, or its TensorCores."""
        return shape.cores if self.unit == "TensorCores" else shape.chips


def quota_kind(capacity_kind: str) -> QuotaKind:
    """The quota a capacity kind draws on: spot, preemptible and flex-start the preemptible one (tpu/docs/quota;
    request-using-flex-start), a reservation its own."""
    if capacity_kind in (SPOT, PREEMPTIBLE, FLEX_START):
        return "preemptible"
    return "reserved" if capacity_kind == RESERVED else "on-demand"


def use_of(shape: Shape) -> Use | None:
    """Serving for the single-host v5e types tpu/docs/quota names, training for multi-host v5e and every other
    generation; None for a single-host v5e size the docs do not place (its quota is unknown)."""
    if shape.generation != "v5litepod" or shape.hosts > 1:
        return "training"
    return "serving" if shape.chips in _SERVING_CHIPS else None


def family(shape: Shape, capacity_kind: str) -> tuple[str, Use | None, QuotaKind]:
    """What decides which quota a slice draws on: two slices with the same family draw on the same quotas."""
    return (shape.generation, use_of(shape), quota_kind(capacity_kind))


def quotas_of(shape: Shape, capacity_kind: str) -> Quotas | None:
    """The quotas a slice of `capacity_kind` draws on; None where tpuctl knows none (a reservation, a generation
    without cited ids)."""
    generation, use, kind = family(shape, capacity_kind)
    row = next((r for r in ROWS if (r.generation, r.use, r.kind) == (generation, use, kind)), None)
    if row is None or generation not in UNITS:
        return None
    return Quotas(row.zone, row.region, UNITS[generation])


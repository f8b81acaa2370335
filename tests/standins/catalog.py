"""What the stand-in's zones offer: accelerator types, runtime versions, topologies, hosts.

Kept apart from the server so the tables that mirror Google's public TPU pages
(regions, accelerator naming, hosts per slice) can be read and corrected in
one place without touching HTTP code.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# Generation prefix in an accelerator type name -> AcceleratorConfig.Type enum name.
GENERATIONS: dict[str, str] = {
    "v2": "V2",
    "v3": "V3",
    "v4": "V4",
    "v5litepod": "V5LITE_POD",
    "v5p": "V5P",
    "v6e": "V6E",
}
TYPE_TO_GENERATION: dict[str, str] = {v: k for k, v in GENERATIONS.items()}

# Generations whose size suffix counts TensorCores (2 per chip); the others count chips.
_COUNTS_CORES = {"v2", "v3", "v4", "v5p"}
# Generations with a 3-D torus (topology AxBxC); the others are 2-D (AxB).
_THREE_D = {"v4", "v5p"}

_ACCELERATOR = re.compile(r"(?P<gen>v[0-9]+[a-z]*)-(?P<size>[0-9]+)\Z")
_TOPOLOGY = re.compile(r"[0-9]+(x[0-9]+){1,2}\Z")

ALL_ACCELERATOR_TYPES: tuple[str, ...] = (
    "v2-8", "v2-32",
    "v3-8", "v3-32",
    "v4-8", "v4-16", "v4-32", "v4-64",
    "v5litepod-1", "v5litepod-4", "v5litepod-8", "v5litepod-16", "v5litepod-32",
    "v5p-8", "v5p-16", "v5p-32",
    "v6e-1", "v6e-4", "v6e-8", "v6e-16", "v6e-32",
)  # fmt: skip

BASE_RUNTIME_VERSIONS: tuple[str, ...] = (
    "tpu-ubuntu2204-base",
    "tpu-vm-base",
    "tpu-vm-tf-2.15.1-pjrt",
    "tpu-vm-tf-2.15.1-pod-pjrt",
    "tpu-vm-tf-2.16.1-pjrt",
    "tpu-vm-tf-2.16.1-pod-pjrt",
    "tpu-vm-tf-2.18.0-pjrt",
    "tpu-vm-tf-2.18.0-pod-pjrt",
)
# Runtime versions that only exist where their generation is offered (v5e's TensorFlow 2.18 image has its own tail:
# tpuctl/tpu/software.py's table, after the Cloud TPU software versions page).
GENERATION_RUNTIME_VERSIONS: dict[str, tuple[str, ...]] = {
    "v5litepod": ("v2-alpha-tpuv5-lite", "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6"),
    "v5p": ("v2-alpha-tpuv5",),
    "v6e": ("v2-alpha-tpuv6e",),
}

_V5E = ("v5litepod-1", "v5litepod-4", "v5litepod-8", "v5litepod-16", "v5litepod-32")
_V6E = ("v6e-1", "v6e-4", "v6e-8", "v6e-16", "v6e-32")

# Default zones and what each offers, loosely after https://cloud.google.com/tpu/docs/regions-zones.
# Deliberately uneven, so a client that assumes "every zone has v4-8" is caught.
DEFAULT_ZONE_OFFERS: dict[str, tuple[str, ...]] = {
    "us-central1-a": ("v3-8", "v3-32", *_V5E),
    "us-central1-b": ("v2-8", "v2-32", "v3-8", "v3-32"),
    "us-central1-f": ("v2-8", "v2-32"),
    "us-central2-b": ("v4-8", "v4-16", "v4-32", "v4-64"),
    "us-east1-d": _V6E,
    "us-east5-a": ("v5p-8", "v5p-16", "v5p-32"),
    "us-west4-a": _V5E,
    "europe-west4-a": ("v2-8", "v2-32", "v3-8", "v3-32", *_V5E, *_V6E),
    "asia-east1-c": ("v2-8", "v2-32"),
}

# Default auto-mode subnet ranges of a few regions, for Node.cidrBlock.
_REGION_CIDR: dict[str, str] = {
    "us-central1": "10.128.0.0/20",
    "us-central2": "10.130.0.0/20",
    "us-east1": "10.142.0.0/20",
    "us-east5": "10.202.0.0/20",
    "us-west4": "10.182.0.0/20",
    "europe-west4": "10.164.0.0/20",
    "asia-east1": "10.140.0.0/20",
}


@dataclass(frozen=True)
class ZoneOffer:
    """One zone's catalogue: the accelerator types and runtime versions it accepts."""

    zone: str
    accelerator_types: tuple[str, ...]
    runtime_versions: tuple[str, ...]


def runtime_versions_for(accelerator_types: tuple[str, ...]) -> tuple[str, ...]:
    """The base images everywhere, plus each offered generation's own image."""
    extra = {v for g in (parse(a)[0] for a in accelerator_types) for v in GENERATION_RUNTIME_VERSIONS.get(g, ())}
    return BASE_RUNTIME_VERSIONS + tuple(sorted(extra))


def default_offers() -> dict[str, ZoneOffer]:
    """The realistic, uneven default catalogue (9 zones)."""
    return {z: ZoneOffer(z, types, runtime_versions_for(types)) for z, types in DEFAULT_ZONE_OFFERS.items()}


def full_offer(zone: str, accelerator_types: tuple[str, ...] = ALL_ACCELERATOR_TYPES) -> ZoneOffer:
    """A zone offering every type in the catalogue, used by set_zones (benchmarks want uniform zones)."""
    return ZoneOffer(zone, accelerator_types, runtime_versions_for(accelerator_types))


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def cidr_block(zone: str) -> str:
    """The zone's region default subnet, or a stable made-up /20 for regions not in the table."""
    region = region_of(zone)
    if region in _REGION_CIDR:
        return _REGION_CIDR[region]
    second = 128 + int(hashlib.sha256(region.encode()).hexdigest(), 16) % 64
    return f"10.{second}.0.0/20"


def parse(accelerator_type: str) -> tuple[str, int]:
    """("v4", 16) from "v4-16"; ValueError for a name that is not of that shape or an unknown generation."""
    match = _ACCELERATOR.match(accelerator_type)
    if not match or match["gen"] not in GENERATIONS or int(match["size"]) <= 0:
        raise ValueError(accelerator_type)
    return match["gen"], int(match["size"])


def chips(accelerator_type: str) -> int:
    generation, size = parse(accelerator_type)
    return max(1, size // 2) if generation in _COUNTS_CORES else size


def hosts(accelerator_type: str) -> int:
    """TPU VM hosts (so networkEndpoints) in a slice, after Google's system-architecture pages.

    v2/v3: the suffix counts TensorCores, 8 cores (4 chips) per host: v2-8 -> 1, v3-32 -> 4.
    v4/v5p: the suffix counts TensorCores (2 per chip), 4 chips per host: v4-8 -> 1, v4-32 -> 4.
    v5litepod/v6e: the suffix counts chips; up to 8 chips sit on one host (-1/-4/-8 -> 1),
    larger slices have 4 chips per host: -16 -> 4, -32 -> 8.
    """
    generation, size = parse(accelerator_type)
    if generation in ("v2", "v3"):
        return max(1, size // 8)
    if generation in ("v4", "v5p"):
        return max(1, (size // 2) // 4)
    return 1 if size <= 8 else size // 4


def topology(accelerator_type: str) -> str:
    """Chip topology Google reports for a type: v4-8 -> 2x2x1, v4-32 -> 2x2x4, v5litepod-16 -> 4x4.

    Grows from the smallest shape by doubling the last of the smallest dimensions,
    which reproduces the published shapes for the power-of-two sizes offered.
    """
    generation, _ = parse(accelerator_type)
    n = chips(accelerator_type)
    dims = [2, 2, 1] if generation in _THREE_D and n >= 4 else ([1, 1, 1] if generation in _THREE_D else [1, 1])
    while _product(dims) < n:
        smallest = min(dims)
        index = max(i for i, d in enumerate(dims) if d == smallest)
        dims[index] *= 2
    return "x".join(str(d) for d in dims)


def accelerator_config(accelerator_type: str) -> dict[str, str]:
    """Node.acceleratorConfig for a type name, as the API fills it in when only acceleratorType is given."""
    generation, _ = parse(accelerator_type)
    return {"type": GENERATIONS[generation], "topology": topology(accelerator_type)}


def type_from_config(config_type: str, topo: str) -> str:
    """The acceleratorType name for an acceleratorConfig; ValueError when the pair is malformed."""
    generation = TYPE_TO_GENERATION.get(config_type)
    if generation is None or not _TOPOLOGY.match(topo):
        raise ValueError(f"{config_type} {topo}")
    dims = [int(d) for d in topo.split("x")]
    if (len(dims) == 3) != (generation in _THREE_D) or 0 in dims:
        raise ValueError(f"{config_type} {topo}")
    n = _product(dims)
    return f"{generation}-{n * 2 if generation in _COUNTS_CORES else n}"


def quota_metric(accelerator_type: str, preemptible: bool, region: bool = False) -> str:
    """The id of the TPU quota a create of this type draws on, per zone or per region, as the TPU API's quota errors
    name it: TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI, TPUV6EPreemptiblePerProjectPerRegionForTPUAPI,
    TPUV5sLitepodServingPerProjectPerZoneForTPUAPI for a one-host v5e (tpu/docs/quota: v5litepod-1, -4, -8 draw on
    the serving quotas), TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI, TPUV5PPerProjectPerZoneForTPUAPI; v2 and
    v3 as SkyPilot's GCP failover handler quotes one (TPUV2sPreemptiblePodPerProjectPerRegionForTPUAPI)."""
    generation, _ = parse(accelerator_type)
    spot = "Preemptible" if preemptible else ""
    if generation == "v5litepod":
        serving = "Serving" if hosts(accelerator_type) == 1 and chips(accelerator_type) in (1, 4, 8) else ""
        stem = f"TPUV5s{spot}Litepod{serving}"
    elif generation in ("v2", "v3", "v4"):
        stem = f"TPU{generation.upper()}s{spot}{'Pod' if generation == 'v4' or hosts(accelerator_type) > 1 else ''}"
    else:
        stem = {"v5p": "TPUV5P", "v6e": "TPUV6E"}[generation] + spot
    return f"{stem}PerProjectPer{'Region' if region else 'Zone'}ForTPUAPI"


def _product(dims: list[int]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total

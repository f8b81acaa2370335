"""The one table of TPU generations, and every name other products give a TPU slice.

A user names a TPU the way `tpuctl create` takes it: a type name such as `v4-32`
or `v5litepod-16`. The TPU API may instead describe a node by an AcceleratorConfig
(`{type: V4, topology: 2x2x4}`). Both come to one `Shape` here (chips, TensorCores,
hosts, chips per host, topology), and from a type name come the other products'
names for the same slice: GKE's node label and topology, the Compute Engine machine
type of its hosts, a Vertex AI machineSpec.

The facts are data in the tables below, each with the page it was read from; the
functions only combine them, so a new generation is one row. Pure and cheap to
import (`tpuctl --help` and the worker runtime load it): no I/O, no Google or
TensorFlow import. Every refusal is a one-line TpuctlError with exit code 2.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Literal

from tpuctl.inputs.errors import USAGE, TpuctlError, one_line

TYPE_HINT = "a TPU type such as v4-8, v5litepod-16, v5p-8 or v6e-8"
TOPOLOGY_HINT = "e.g. 2x4 (v5e, v6e) or 2x2x4 (v4, v5p)"

# The one grammar of a type name (GENERATION-N) and of a topology (AxB or AxBxC). Bounded,
# so hostile input cannot make huge integers.
_TYPE_NAME = re.compile(r"(v[0-9]{1,2}[a-z]{0,12})-([0-9]{1,7})")
_TOPOLOGY = re.compile(r"[1-9][0-9]{0,3}(?:x[1-9][0-9]{0,3}){1,2}")

# The most cube-like shape of each power-of-two slice: the default topology of a type name.
# 2-D: https://cloud.google.com/tpu/docs/v5e and /v6e (1x1 .. 16x16), /v3 (up to 32x32).
_SHAPES_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32")
# 3-D: https://cloud.google.com/tpu/docs/v4 and /v5p (2x2x1 .. 16x16x16, v5p up to 16x16x24).
_SHAPES_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16", "16x16x16", "16x16x24")


@dataclass(frozen=True)
class Vertex:
    """How a Vertex AI CustomJob's machineSpec asks for this generation.

    `machine_type` "cloud-tpu" takes acceleratorCount TensorCores: 8 (one host) or a
    multiple of `count_step` (a Pod slice). None: the host's Compute Engine machine
    type with tpuTopology, the way Vertex runs TPU VMs.
    """

    accelerator_type: str
    machine_type: str | None = None
    count_step: int = 0


@dataclass(frozen=True)
class Generation:
    """What a generation's type names mean, and what every product calls it."""

    name: str  # the prefix of type names: "v4" in v4-32
    config_type: str  # the TPU API's AcceleratorConfig.Type
    cores_per_chip: int
    size_counts: Literal["cores", "chips"]  # what the N of NAME-N counts
    chips_per_host: int  # in a multi-host slice
    single_host_chips: int  # a slice of at most this many chips is one host
    dims: int  # topology dimensions: 2 (AxB) or 3 (AxBxC)
    smallest_chips: int  # the range of slices with a documented default topology
    largest_chips: int
    aliases: tuple[str, ...] = ()
    gke_label: str | None = None  # cloud.google.com/gke-tpu-accelerator for training slices
    machine_types: tuple[tuple[int, str], ...] = ()  # (chips per host, Compute Engine machine type)
    vertex: Vertex | None = None
    no_vertex: str = ""  # why Vertex AI cannot train on it, when vertex is None
    megacore: bool = False  # a chip's two TensorCores are one TensorFlow device (one replica per chip)

    @property
    def topologies(self) -> tuple[str, ...]:
        """The default topology of each slice size, smallest first."""
        shapes = _SHAPES_3D if self.dims == 3 else _SHAPES_2D
        return tuple(t for t in shapes if self.smallest_chips <= _product(t) <= self.largest_chips)

    def size(self, chips: int) -> int:
        """The N of NAME-N for a slice of `chips` chips."""
        return chips * self.cores_per_chip if self.size_counts == "cores" else chips


# Cores per chip, what -N counts, hosts: https://cloud.google.com/tpu/docs/system-architecture-tpu-vm
# and each version's page (tpu/docs/v2 .. v6e); AcceleratorConfig.Type: tpu/docs/reference/rest/v2/AcceleratorConfig.
# Machine types: GKE "Plan TPUs in GKE" (ct4p), tpu/docs/v5e (ct5lp), tpu/docs/v5p (ct5p), tpu/docs/v6e (ct6e).
# Vertex: vertex-ai/docs/training/configure-compute#tpu and the v1 MachineSpec.AcceleratorType enum, which has
# TPU_V2, TPU_V3, TPU_V4_POD and TPU_V5_LITEPOD only.
# Megacore (tpu/docs/system-architecture-tpu-vm, "TensorCores"): v4 and v5p present each chip's two TensorCores
# as one device, so TPUStrategy has one replica per chip there and one per TensorCore on v2 and v3.
# v2-v4 and v5p: 2 TensorCores per chip, -N counts cores, 4 chips per host. v5e and v6e: 1 core per chip,
# -N counts chips, hosts of 1, 4 or 8 chips (4 in a multi-host slice).
_TABLE = (
    Generation(
        "v2", "V2", cores_per_chip=2, size_counts="cores", chips_per_host=4, single_host_chips=4,
        dims=2, smallest_chips=4, largest_chips=256, vertex=Vertex("TPU_V2", "cloud-tpu", 32),
    ),
    Generation(
        "v3", "V3", cores_per_chip=2, size_counts="cores", chips_per_host=4, single_host_chips=4,
        dims=2, smallest_chips=4, largest_chips=1024, vertex=Vertex("TPU_V3", "cloud-tpu", 32),
    ),
    Generation(
        "v4", "V4", cores_per_chip=2, size_counts="cores", chips_per_host=4, single_host_chips=4,
        dims=3, smallest_chips=4, largest_chips=4096,
        gke_label="tpu-v4-podslice", machine_types=((4, "ct4p-hightpu-4t"),), vertex=Vertex("TPU_V4_POD", "cloud-tpu", 8),
        megacore=True,
    ),
    Generation(
        "v5litepod", "V5LITE_POD", cores_per_chip=1, size_counts="chips", chips_per_host=4, single_host_chips=8,
        dims=2, smallest_chips=1, largest_chips=256, aliases=("v5e",),
        gke_label="tpu-v5-lite-podslice",
        machine_types=((1, "ct5lp-hightpu-1t"), (4, "ct5lp-hightpu-4t"), (8, "ct5lp-hightpu-8t")),
        vertex=Vertex("TPU_V5_LITEPOD"),
    ),
    Generation(
        "v5p", "V5P", cores_per_chip=2, size_counts="cores", chips_per_host=4, single_host_chips=4,
        dims=3, smallest_chips=4, largest_chips=6144,
        gke_label="tpu-v5p-slice", machine_types=((4, "ct5p-hightpu-4t"),), megacore=True,
        no_vertex="Vertex AI custom training offers no TPU v5p (its acceleratorType has TPU_V2, TPU_V3, TPU_V4_POD, TPU_V5_LITEPOD)",
    ),
    Generation(
        "v6e", "V6E", cores_per_chip=1, size_counts="chips", chips_per_host=4, single_host_chips=8,
        dims=2, smallest_chips=1, largest_chips=256,
        gke_label="tpu-v6e-slice",
        machine_types=((1, "ct6e-standard-1t"), (4, "ct6e-standard-4t"), (8, "ct6e-standard-8t")),
        no_vertex="TPU v6e and later are not offered for TensorFlow training on Vertex AI",
    ),
)  # fmt: skip
GENERATIONS: dict[str, Generation] = {g.name: g for g in _TABLE}
_BY_WORD: dict[str, Generation] = {w: g for g in _TABLE for w in (g.name, *g.aliases)}
_BY_CONFIG: dict[str, Generation] = {g.config_type: g for g in _TABLE}
KNOWN = "v2, v3, v4, v5p, v5litepod (v5e) and v6e"


@dataclass(frozen=True)
class GkeNodes:
    """A `cloud.google.com/gke-tpu-accelerator` value and the hosts its node pools have."""

    label: str
    generation: str
    chips_per_host: int  # in a multi-host slice
    single_host_chips: int  # up to this many chips fit one node (machine types with 1, 4 or 8 chips)
    multi_host: bool = True


# https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus (topology and machine type tables).
GKE_NODES: dict[str, GkeNodes] = {
    n.label: n
    for n in (
        GkeNodes("tpu-v4-podslice", "v4", chips_per_host=4, single_host_chips=4),
        GkeNodes("tpu-v5p-slice", "v5p", chips_per_host=4, single_host_chips=4),
        GkeNodes("tpu-v5-lite-podslice", "v5litepod", chips_per_host=4, single_host_chips=8),
        GkeNodes("tpu-v5-lite-device", "v5litepod", chips_per_host=8, single_host_chips=8, multi_host=False),
        GkeNodes("tpu-v6e-slice", "v6e", chips_per_host=4, single_host_chips=8),
    )
}


@dataclass(frozen=True)
class Shape:
    """One slice: what a type name or an AcceleratorConfig amounts to."""

    accelerator_type: str
    generation: str
    chips: int
    cores: int
    hosts: int
    chips_per_host: int
    topology: str | None  # None: a size with no documented default shape (give one explicitly)


@dataclass(frozen=True)
class GkeSlice:
    """A slice as GKE schedules it: node label, topology, and the pods (one per host) it takes."""

    accelerator: str
    topology: str
    chips: int
    hosts: int
    chips_per_host: int


@dataclass(frozen=True)
class VertexMachine:
    """The machineSpec fields of a Vertex AI worker pool for one slice."""

    machine_type: str
    accelerator_type: str
    accelerator_count: int | None  # None: implied by the machine type and tpu_topology
    tpu_topology: str | None


def _product(topology: str) -> int:
    return math.prod(int(d) for d in topology.split("x"))


def _refuse(message: str, hint: str | None = None) -> TpuctlError:
    return TpuctlError(message, hint=hint, exit_code=USAGE)


# TPU7x (Ironwood) is made by Compute Engine and GKE, not the Cloud TPU API this table serves: the API's runtimes page
# (https://cloud.google.com/tpu/docs/runtimes) says "The Cloud TPU API is not supported on TPU7x and later TPU
# versions" (FIELD-NOTES 2026-12-07), so it has no type here and no TPU VM image; a name for it is told so.
_TPU7X = re.compile(r"(tpu7x?|v7x?|ironwood)([-_].*)?\Z", re.IGNORECASE)
NO_TPU7X = "TPU7x (Ironwood) is not in the Cloud TPU API (its runtimes page: not supported on TPU7x and later), so it has no TPU VM image to name"
NO_TPU7X_HINT = "make TPU7x with Compute Engine or GKE; tpuctl's TPU VMs go up to v6e: v4-8, v5litepod-16, v6e-8"


def is_tpu7x(text: str) -> bool:
    """A name for TPU7x as people and Google's other services write it (tpu7x-8, v7x-16, Ironwood)."""
    return _TPU7X.match(text.strip()) is not None


# What JAX sees of a TPU7x slice, for rehearsals (a JAX script's; TPU7x runs no TensorFlow): each chip has two
# TensorCores (https://cloud.google.com/tpu/docs/tpu7x) and JAX makes a device of each (jax/_src/pallas/mosaic/
# tpu_info.py, ChipVersion: two per chip from TPU7x on); each TPU7x VM holds four chips (GKE's "About Ironwood (TPU7x)"
# page; its machine type tpu7x-standard-4t). The name tpu7x-N counts TensorCores, as MaxText's compile_topology does
# ("tpu7x-128": 128 devices, 64 chips) and as gcloud's --accelerator-type=tpu7x-8 writes a one-VM slice.
_TPU7X_TYPE = re.compile(r"tpu7x-([0-9]{1,7})")
TPU7X_DEVICES_PER_CHIP = 2
TPU7X_CHIPS_PER_HOST = 4


def jax_devices(accelerator_type: str) -> tuple[int, int]:
    """(devices JAX sees in the whole slice, hosts) of a type name, TPU7x's included; a one-line error otherwise."""
    match = _TPU7X_TYPE.fullmatch(accelerator_type.strip().lower())
    if match is None:
        shape = shape_of(accelerator_type)
        return replicas(shape), shape.hosts
    devices, per_host = int(match[1]), TPU7X_DEVICES_PER_CHIP * TPU7X_CHIPS_PER_HOST
    if devices == 0 or devices % TPU7X_DEVICES_PER_CHIP or (devices > per_host and devices % per_host):
        raise _refuse(
            f"{accelerator_type!r}: a TPU7x slice has {TPU7X_DEVICES_PER_CHIP} TensorCores a chip and {per_host} a host",
            "e.g. tpu7x-8 (one host) or tpu7x-32 (four hosts)",
        )
    return devices, max(1, devices // per_host)


def generation(word: str) -> Generation:
    """A generation by its name or alias (v5e), any case; an unknown one is a one-line error."""
    found = _BY_WORD.get(word.lower())
    if found is None:
        raise _refuse(f"unknown TPU generation {one_line(word, 40)!r}", f"tpuctl knows {KNOWN}: v4-8, v5litepod-16, v6e-8, ...")
    return found


def split_type(text: str) -> tuple[str, int]:
    """GENERATION-N checked as text only: ("v4", 8) from v4-8, even for a generation tpuctl does not know.

    `create` and the settings stop here, so a newer generation still reaches the TPU API,
    which is the judge of what a zone offers.
    """
    if is_tpu7x(text):
        raise _refuse(f"{one_line(text, 40)}: {NO_TPU7X}", NO_TPU7X_HINT)
    match = _TYPE_NAME.fullmatch(text)
    if not match or int(match[2]) == 0:
        raise _refuse(f"{one_line(text, 60)!r} is not a TPU accelerator type", TYPE_HINT)
    return match[1], int(match[2])


def is_type_name(text: str) -> bool:
    """Whether `text` is written GENERATION-N (v4-8), known generation or not."""
    match = _TYPE_NAME.fullmatch(text)
    return match is not None and int(match[2]) > 0


def topology_dims(topology: str) -> tuple[int, ...]:
    """(2, 2, 4) from 2x2x4: the one topology parser."""
    if not _TOPOLOGY.fullmatch(topology):
        raise _refuse(f"{one_line(topology, 40)!r} is not a TPU topology", TOPOLOGY_HINT)
    return tuple(int(d) for d in topology.split("x"))


def _shape(gen: Generation, chips: int, topology: str | None) -> Shape:
    hosts = 1 if chips <= gen.single_host_chips else -(-chips // gen.chips_per_host)
    per_host = chips if hosts == 1 else gen.chips_per_host
    return Shape(f"{gen.name}-{gen.size(chips)}", gen.name, chips, chips * gen.cores_per_chip, hosts, per_host, topology)


def default_topology(gen: Generation, chips: int) -> str | None:
    return next((t for t in gen.topologies if _product(t) == chips), None)


def shape_of(accelerator_type: str) -> Shape:
    """Chips, TensorCores and hosts of a type name: v2-8 -> 4 chips, 8 cores, 1 host, 2x2.

    An alias keeps the name it was given (v5e-4 stays v5e-4). A malformed name, an
    unknown generation or a TensorCore count that is not whole chips is an error.
    """
    word, size = split_type(accelerator_type)
    gen = generation(word)
    if size % gen.cores_per_chip:
        raise _refuse(
            f"{accelerator_type!r} is not a TPU accelerator type: the number must be a multiple of {gen.cores_per_chip} TensorCores",
            f"e.g. {gen.name}-8",
        )
    chips = size // gen.cores_per_chip if gen.size_counts == "cores" else size
    return replace(_shape(gen, chips, default_topology(gen, chips)), accelerator_type=accelerator_type)


def shape_from_config(config_type: str, topology: str) -> Shape:
    """The same from the API's AcceleratorConfig ({type: V4, topology: 2x2x4}): chips are the topology's product."""
    gen = _BY_CONFIG.get(config_type)
    if gen is None:
        raise _refuse(f"unknown TPU accelerator config type {one_line(config_type, 40)!r}", f"tpuctl knows {', '.join(_BY_CONFIG)}")
    dims = topology_dims(topology)
    if len(dims) != gen.dims:
        raise _refuse(f"{topology!r} is not a {gen.config_type} topology: {gen.name} slices have {gen.dims} dimensions", TOPOLOGY_HINT)
    return _shape(gen, math.prod(dims), topology)


def replicas(shape: Shape) -> int:
    """TPUStrategy's num_replicas_in_sync on the whole slice: one per TensorFlow TPU device."""
    return shape.chips if GENERATIONS[shape.generation].megacore else shape.cores


def config_of(accelerator_type: str) -> tuple[str, str]:
    """(AcceleratorConfig.Type, topology) of a type name: v4-32 -> ("V4", "2x2x4")."""
    shape = shape_of(accelerator_type)
    gen = GENERATIONS[shape.generation]
    if shape.topology is None:
        raise _refuse(
            f"{accelerator_type} has no default topology in tpuctl's table",
            f"name the shape itself, e.g. --type {gen.name} --topology {gen.topologies[-1]}",
        )
    return gen.config_type, shape.topology


def config_type_of(word: str) -> str:
    """The AcceleratorConfig.Type for a generation word as `create --type` takes it (v5e -> V5LITE_POD)."""
    return generation(word).config_type


def machine_type(shape: Shape) -> str | None:
    """The Compute Engine machine type of the slice's hosts, where Google publishes one."""
    return dict(GENERATIONS[shape.generation].machine_types).get(shape.chips_per_host)


# --- GKE -----------------------------------------------------------------------------------------


def gke_slice(accelerator: str, topology: str | None = None, chips_per_host: int | None = None) -> GkeSlice:
    """A slice as GKE runs it, from a type name (v4-8: its label and default topology) or a GKE
    node label with a topology (tpu-v4-podslice 2x2x1, as GKE's own manifests name it).

    `chips_per_host` picks between node pools where a topology comes in two machine types
    (v5e 2x4: one host of 8 chips, or two of 4); by default a slice is one host while it fits one.
    A tpu-* label tpuctl does not know works when `chips_per_host` is given.
    """
    if accelerator.startswith("tpu-"):
        if not topology:
            raise _refuse(f"--accelerator {accelerator} needs --topology", TOPOLOGY_HINT)
        nodes = GKE_NODES.get(accelerator)
        if nodes is None:
            if chips_per_host is None:
                raise _refuse(
                    f"--accelerator {one_line(accelerator, 60)!r}: unknown TPU type",
                    f"{TYPE_HINT}, one of {', '.join(GKE_NODES)}, or give --tpu-chips-per-host for another tpu-* node label",
                )
            return _hosts_of(accelerator, topology, topology_dims(topology), chips_per_host)
        dims = _dims_for(nodes, topology)
    else:
        shape = shape_of(accelerator)
        label = GENERATIONS[shape.generation].gke_label
        if label is None:
            raise _refuse(f"--accelerator {accelerator}: GKE has no {shape.generation} node pools tpuctl knows", f"on GKE: {_gke_names()}")
        nodes = GKE_NODES[label]
        topology = topology or shape.topology
        if topology is None:
            raise _refuse(f"--accelerator {accelerator} has no default topology in tpuctl's table", f"give --topology, {TOPOLOGY_HINT}")
        dims = _dims_for(nodes, topology)
        if math.prod(dims) != shape.chips:
            raise _refuse(f"--topology {topology} has {math.prod(dims)} chips; {accelerator} has {shape.chips}")
    return _hosts_of(nodes.label, topology, dims, chips_per_host if chips_per_host is not None else _default_per_host(nodes, math.prod(dims)))


def _gke_names() -> str:
    types = [f"{g.name}-{g.size(g.single_host_chips)}" for g in _TABLE if g.gke_label]
    return f"{', '.join(types)}, ... or a node label with --topology"


def _dims_for(nodes: GkeNodes, topology: str) -> tuple[int, ...]:
    dims = topology_dims(topology)
    want = GENERATIONS[nodes.generation].dims
    if len(dims) != want:
        raise _refuse(f"--topology {topology}: {nodes.label} slices have {want} dimensions", "e.g. " + ("2x2x4" if want == 3 else "2x4"))
    return dims


def _default_per_host(nodes: GkeNodes, chips: int) -> int:
    if chips <= nodes.single_host_chips:
        return chips
    if not nodes.multi_host:
        raise _refuse(f"--accelerator {nodes.label} is single-host: at most {nodes.single_host_chips} chips, not {chips}")
    return nodes.chips_per_host


def _hosts_of(label: str, topology: str, dims: tuple[int, ...], chips_per_host: int) -> GkeSlice:
    chips = math.prod(dims)
    if chips_per_host < 1 or chips % chips_per_host:
        raise _refuse(f"--topology {topology} has {chips} chips: not a whole number of hosts with {chips_per_host} chips each")
    return GkeSlice(label, topology, chips, chips // chips_per_host, chips_per_host)


# --- Vertex AI -----------------------------------------------------------------------------------


def vertex_machine(accelerator_type: str) -> VertexMachine:
    """The machineSpec of a Vertex AI worker pool for a type name, or why Vertex cannot run it."""
    shape = shape_of(accelerator_type)
    gen = GENERATIONS[shape.generation]
    offer = gen.vertex
    if offer is None:
        raise _refuse(f"{accelerator_type}: {gen.no_vertex}", _vertex_names())
    if offer.machine_type is not None:
        if shape.cores != 8 and shape.cores % offer.count_step:
            raise _refuse(
                f"{accelerator_type}: Vertex AI takes {gen.name} as 8 TensorCores or a multiple of {offer.count_step}",
                f"e.g. {gen.name}-8 or {gen.name}-{offer.count_step}",
            )
        return VertexMachine(offer.machine_type, offer.accelerator_type, shape.cores, None)
    host = machine_type(shape)
    if host is None or shape.topology is None:
        raise _refuse(f"{accelerator_type}: Vertex AI has no machine type for this size", f"e.g. {gen.name}-{gen.size(gen.single_host_chips)}")
    return VertexMachine(host, offer.accelerator_type, None, shape.topology)


def _vertex_names() -> str:
    offered = [f"{g.name}-{g.size(g.single_host_chips)}" for g in _TABLE if g.vertex]
    return f"Vertex AI trains on {', '.join(offered)}, ..."


# GPUs on Vertex AI: the v1 MachineSpec.AcceleratorType name and the machine type that carries each
# count of them (vertex-ai/docs/training/configure-compute#gpu-compatibility-table). N1 machines take
# their GPUs attached; A2, A3, A4 and G2 machine types come with a fixed count built in.
_N1 = {1: "n1-standard-4", 2: "n1-standard-8", 4: "n1-standard-16", 8: "n1-standard-32"}
VERTEX_GPUS: dict[str, dict[int, str]] = {
    "NVIDIA_TESLA_T4": {k: v for k, v in _N1.items() if k <= 4},
    "NVIDIA_TESLA_V100": _N1,
    "NVIDIA_TESLA_P100": {k: v for k, v in _N1.items() if k <= 4},
    "NVIDIA_TESLA_P4": {k: v for k, v in _N1.items() if k <= 4},
    "NVIDIA_TESLA_A100": {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g", 16: "a2-megagpu-16g"},
    "NVIDIA_A100_80GB": {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g"},
    "NVIDIA_L4": {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
    "NVIDIA_H100_80GB": {1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"},
    "NVIDIA_H200_141GB": {8: "a3-ultragpu-8g"},
    "NVIDIA_B200": {8: "a4-highgpu-8g"},
}
VERTEX_CPU_MACHINE = "n1-standard-4"


def vertex_gpu_machine(accelerator: str, count: int) -> VertexMachine:
    """The machineSpec of Vertex workers with `count` GPUs of one type, or a one-line refusal."""
    counts = VERTEX_GPUS.get(accelerator.upper())
    if counts is None:
        raise _refuse(f"{one_line(accelerator, 40)!r} is neither a TPU type nor a Vertex AI GPU", f"{TYPE_HINT}, or one of {', '.join(VERTEX_GPUS)}")
    count = count or min(counts)
    if count not in counts:
        raise _refuse(f"Vertex AI offers {accelerator.upper()} in counts of {', '.join(map(str, counts))} per machine, not {count}")
    return VertexMachine(counts[count], accelerator.upper(), count, None)


# --- GPUs as CUDA numbers them ---------------------------------------------------------------------

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# An index, or a GPU's or MIG instance's UUID (or its first characters, which CUDA also accepts).
_CUDA_ENTRY = re.compile(r"[0-9]{1,4}|(?:GPU|MIG)-[0-9A-Za-z/-]{1,120}")


def visible_entries(value: str, devices: int | None = None) -> tuple[str, ...]:
    """The GPUs a CUDA_VISIBLE_DEVICES value leaves visible, as CUDA reads it (CUDA C++ Programming Guide, "CUDA
    Environment Variables"): its entries up to the first that names no device (`-1`, empty, an index past the
    machine's `devices` when that is known), and none at all when one is named twice.

    Measured with CUDA 12 on one H200: "0,1" shows 1 device, "-1,0" and "0,0" none, "GPU-329700ca" (a UUID's
    first characters) 1."""
    found: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not _CUDA_ENTRY.fullmatch(entry) or (devices is not None and entry.isdigit() and int(entry) >= devices):
            break
        if entry in found:
            return ()
        found.append(entry)
    return tuple(found)

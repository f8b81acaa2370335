"""What a check gives (one line: status, what was found, the fix) and what every check reads the facts by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpuctl.doctor import versions
from tpuctl.doctor.facts import Dist, Facts
from tpuctl.tpu import software as sw

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One check's verdict on one machine."""

    name: str
    status: Status
    found: str
    fix: str = ""


@dataclass(frozen=True)
class Context:
    """What the checks need beyond the facts: what the launch will ask of the machine."""

    model_dir: str | None = None
    workers: int = 2
    workers_given: bool = False  # --workers was given: a count to judge, not the default that sizes the port check
    runtime_version: str | None = None  # the TPU VM's image, from the TPU API (--tpu NAME)
    framework: str = "tensorflow"  # what the workers run: "jax" checks JAX's stack instead of TensorFlow's (jax_checks.py)
    script: str | None = None  # the SCRIPT doctor was given, for the commands its fixes name


def ok(name: str, found: str) -> Check:
    return Check(name, "ok", found)


def tf_dist(facts: Facts) -> Dist | None:
    """The TensorFlow distribution an import finds first (the tensorflow check fails several in one folder)."""
    dists = facts.tensorflow_dists
    return dists[0] if dists else None


def tf_minor(facts: Facts) -> tuple[int, int] | None:
    dist = tf_dist(facts)
    return versions.minor(dist.version) if dist else None


def tpu_chips(facts: Facts) -> list[tuple[str, sw.Chip | None]]:
    """(PCI address, chip) for every Google function on the bus; None for an id the table does not know."""
    return [(f.address, sw.chip(f.device)) for f in facts.pci if f.vendor == sw.GOOGLE_PCI_VENDOR]


def pin(name: str, version: tuple[int, int] | None) -> str:
    return f"'{name}=={version[0]}.{version[1]}.*'" if version else name

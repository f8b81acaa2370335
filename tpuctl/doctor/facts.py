"""The probe's answer (tpuctl/doctor/probe.py), read into typed facts.

The answer may come from another machine over ssh, so it is untrusted: every
field is checked for its type and size as it is read, a wrong one reads as
absent, and no text from it reaches the terminal unescaped (checks show it
through tpuctl.inputs.errors.one_line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.runs import compact

MARK = "tpuctl-doctor "
MAX_ANSWER = 1 << 20
TENSORFLOW_DISTS = re.compile(r"(tensorflow(-(cpu|gpu|tpu|intel|macos|aarch64|rocm))?|intel-tensorflow|tf-nightly(-(cpu|tpu))?)\Z")


def _str(value: Any, limit: int = 400) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _token(value: Any, limit: int = 400) -> str | None:
    """A name, version, address or device path: printable or absent. These are shown bare in found/fix lines
    (`tensorflow 2.16.1`), so an escape sequence a hostile answer put in one must not survive the read."""
    found = _str(value, limit)
    return found if found is not None and found.isprintable() else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any, limit: int = 256) -> list[Any]:
    return value[:limit] if isinstance(value, list) else []


@dataclass(frozen=True)
class Dist:
    """An installed distribution: its name as pip knows it, its version, the folder it is in, what it requires."""

    name: str
    version: str
    location: str = ""
    requires: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class PciFunction:
    address: str
    vendor: int
    device: int
    driver: str | None


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    """One machine's interpreter and devices, as one probe saw them."""

    hostname: str
    python: tuple[int, int, int] | None
    executable: str
    dists: tuple[Dist, ...]
    tensorflow_package: str | None
    env: Mapping[str, str]
    on_gce: bool
    pci: tuple[PciFunction, ...]
    accel: tuple[str, ...]
    vfio: tuple[str, ...]
    holders: tuple[Holder, ...]
    unreadable_processes: int
    lockfile: bool
    libtpu_files: tuple[str, ...]
    ports: Mapping[str, Any]
    credentials: Mapping[str, Any]
    paths: Mapping[str, bool]
    metadata: Mapping[str, Any]
    nvidia_smi: Mapping[str, Any]
    tf_import: Mapping[str, Any] = field(default_factory=dict)

    def dist(self, name: str) -> Dist | None:
        """The distribution of that name that an import finds: the first on sys.path where several are (a PYTHONPATH
        copy shadows the venv's; the probe lists them in path order)."""
        found = [d for d in self.dists if d.name == name]
        return found[0] if found else None

    @property
    def tensorflow_dists(self) -> list[Dist]:
        return [d for d in self.dists if TENSORFLOW_DISTS.match(d.name)]


def parse(output: str, where: str) -> Facts:
    """The facts in a probe's output (its line starts with MARK; whatever a sitecustomize printed is skipped)."""
    lines = [line for line in output[-MAX_ANSWER:].splitlines() if line.startswith(MARK)]
    try:
        raw = json.loads(lines[-1][len(MARK) :]) if lines else None
    except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        raw = None
    if not isinstance(raw, dict):
        tail = one_line(output, 200, last=True) if output.strip() else "no output"
        raise TpuctlError(f"{where}: the doctor's probe gave no answer ({tail})", exit_code=FAILED)
    return from_json(raw)


def from_json(raw: Mapping[str, Any]) -> Facts:
    py = _map(raw.get("python"))
    version = _list(py.get("version"), 3)
    dists = []
    for item in _list(raw.get("distributions")):
        item = _map(item)
        name, ver = _token(item.get("name"), 100), _token(item.get("version"), 100)
        if name and ver:
            requires = tuple(r for r in (_token(x) for x in _list(item.get("requires"), 20)) if r)
            dists.append(Dist(name.lower().replace("_", "-"), ver, _str(item.get("location"), 1000) or "", requires))
    pci = []
    for item in _list(raw.get("pci")):
        item = _map(item)
        try:
            vendor, device = int(str(item.get("vendor")), 16), int(str(item.get("device")), 16)
        except ValueError:
            continue
        pci.append(PciFunction(_token(item.get("address"), 64) or "?", vendor, device, _token(item.get("driver"), 64)))
    dev = _map(raw.get("dev"))
    busy = _map(raw.get("holders"))
    holders = []
    for item in _list(busy.get("held"), 20):
        item = _map(item)
        pid = _int(item.get("pid"))
        if pid is not None:
            devices = tuple(d for d in (_token(x, 64) for x in _list(item.get("devices"), 16)) if d)
            holders.append(Holder(pid, _str(item.get("command"), 200) or "?", devices))
    env = {k: v[:400] for k, v in _map(raw.get("env")).items() if isinstance(v, str)}
    paths = {k[:1000]: bool(v) for k, v in _map(raw.get("paths")).items() if isinstance(v, bool)}
    return Facts(
        hostname=_str(raw.get("hostname"), 255) or "?",
        python=(version[0], version[1], version[2]) if len(version) == 3 and all(_int(v) is not None for v in version) else None,
        executable=_str(py.get("executable"), 1000) or "?",
        dists=tuple(dists),
        tensorflow_package=_str(raw.get("tensorflow_package"), 1000),
        env=env,
        on_gce=raw.get("on_gce") is True,
        pci=tuple(pci),
        accel=tuple(p for p in (_token(x, 64) for x in _list(dev.get("accel"))) if p),
        vfio=tuple(p for p in (_token(x, 64) for x in _list(dev.get("vfio"))) if p),
        holders=tuple(holders),
        unreadable_processes=_int(busy.get("unreadable")) or 0,
        lockfile=busy.get("lockfile") is True,
        libtpu_files=tuple(p for p in (_str(x, 1000) for x in _list(raw.get("libtpu_files"), 16)) if p),
        ports=_map(raw.get("ports")),
        credentials=_map(raw.get("credentials")),
        paths=paths,
        metadata=_map(raw.get("metadata")),
        nvidia_smi=_map(raw.get("nvidia_smi")),
        tf_import=_map(raw.get("import")),
    )


def number(mapping: Mapping[str, Any], key: str) -> float | None:
    return compact.number(mapping.get(key))  # JSON as Python reads it allows Infinity, NaN and integers too large for a float


def text(mapping: Mapping[str, Any], key: str, limit: int = 400) -> str | None:
    return _str(mapping.get(key), limit)

"""The files a worker needs to run tpuctl's runtime, and nothing more: what ssh hosts and Vertex jobs get.

tpuctl/runtime/ and the few modules it imports (RUNTIME_IMPORTS). Not the CLI's
dependencies (click, rich, Google's libraries): a host needs only Python and TensorFlow.
tests/unit/test_runtime_files.py traces the runtime's imports, so a module the runtime
starts to import without being listed here fails there, not on a user's host.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from pathlib import Path

from tpuctl.backends.ssh.cache import digest_of, manifest_of

_PACKAGE = Path(__file__).resolve().parents[1]

# tpuctl's modules outside tpuctl/runtime/ that the runtime imports, as paths in the package.
RUNTIME_IMPORTS = (
    "tpuctl/__init__.py",
    "tpuctl/accelerators.py",
    "tpuctl/cluster.py",
    "tpuctl/devices/__init__.py",
    "tpuctl/errors.py",
    "tpuctl/hosts.py",
    "tpuctl/inputs.py",
    "tpuctl/reaper.py",
    "tpuctl/stack_dump.py",
    "tpuctl/worker_contract.py",
)


@dataclass(frozen=True)
class Shipment:
    """The runtime's files (sorted by path), their manifest and its digest, which names a copy on a host."""

    files: tuple[tuple[str, bytes], ...]
    manifest: bytes
    digest: str

    @property
    def size(self) -> int:
        return sum(len(data) for _, data in self.files)

    @functools.cached_property
    def payload(self) -> bytes:
        """What the installer reads (tpuctl/backends/ssh/install.py): zlib of the manifest, a NUL, every file's bytes in order.
        Made once, whatever the number of hosts that lack the runtime."""
        return zlib.compress(self.manifest + b"\0" + b"".join(data for _, data in self.files), 6)


def runtime_paths() -> list[str]:
    runtime = sorted(f"tpuctl/runtime/{path.name}" for path in (_PACKAGE / "runtime").glob("*.py"))
    return sorted([*RUNTIME_IMPORTS, *runtime])


@functools.cache
def shipment() -> Shipment:
    """Read once per launch: a few dozen small files, ~2 ms."""
    files = tuple((name, (_PACKAGE.parent / name).read_bytes()) for name in runtime_paths())
    manifest = manifest_of(files)
    return Shipment(files, manifest, digest_of(manifest))

"""This tpuctl's runtime as one shipment for ssh hosts: its files (tpuctl/launch/runtime_files.py), their manifest
and the digest that names the host's copy (cache.py), and the payload install.py reads where that copy is missing."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

from tpuctl.launch import runtime_files
from tpuctl.ssh.cache import digest_of, manifest_of


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
        """What the installer reads (tpuctl/ssh/install.py): zlib of the manifest, a NUL, every file's bytes in order.
        Made once, whatever the number of hosts that lack the runtime."""
        return zlib.compress(self.manifest + b"\0" + b"".join(data for _, data in self.files), 6)


@functools.cache
def shipment() -> Shipment:
    files = runtime_files.files()
    manifest = manifest_of(files)
    return Shipment(files, manifest, digest_of(manifest))


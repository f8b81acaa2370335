"""A GCS emulator in this process (gcp-storage-emulator), in memory, for google-cloud-storage via STORAGE_EMULATOR_HOST."""

from __future__ import annotations

import socket
from collections.abc import Iterator


def serve() -> Iterator[str]:
    """The emulator's URL while it runs (a generator for a fixture: it stops when the fixture ends)."""
    from gcp_storage_emulator.server import create_server

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()

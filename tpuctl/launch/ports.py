"""Ports for local workers that two concurrent launches can never both pick.

TensorFlow's gRPC server refuses SO_REUSEPORT, so a port cannot be shared with
it; instead a bound socket holds each port from the moment it is chosen until
the worker's runtime closes its inherited copy right before TensorFlow binds
the port. For that last short window a per-user lock file, held for as long as
the launch runs, keeps every other tpuctl launch away from the port.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"tpuctl-{os.getuid()}" / "ports"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class PortReservation:
    """Holds `count` loopback ports: a bound socket and a lock file each."""

    sockets: list[socket.socket] = field(default_factory=list)
    locks: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [f"{LOOPBACK}:{port}" for port in self.ports]

    def close_sockets(self) -> None:
        """Drop the launcher's copies once each worker has inherited its own."""
        for sock in self.sockets:
            sock.close()

    def release(self) -> None:
        self.close_sockets()
        for fd in self.locks:
            os.close(fd)
        self.locks.clear()


def reserve(count: int, *, max_tries: int = 1000) -> PortReservation:
    """Reserve `count` distinct free ports on the loopback interface."""
    held = PortReservation()
    rejected: list[socket.socket] = []
    locks = _lock_dir()
    try:
        for _ in range(max_tries):
            if len(held.sockets) == count:
                return held
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
            lock_fd = os.open(locks / str(port), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Another launch is handing this port to its worker; keep the
                # socket bound until we are done so the kernel offers another.
                os.close(lock_fd)
                rejected.append(sock)
                continue
            held.sockets.append(sock)
            held.locks.append(lock_fd)
            held.ports.append(port)
        if len(held.sockets) == count:
            return held
        raise OSError(f"could not reserve {count} free ports on {LOOPBACK}")
    except BaseException:
        held.release()
        raise
    finally:
        for sock in rejected:
            sock.close()

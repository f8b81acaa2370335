"""Ports for local workers that two concurrent launches can never both pick.

TensorFlow's gRPC server refuses SO_REUSEPORT, so a port cannot be shared with
it; instead a bound socket holds each port from the moment it is chosen until
the worker's runtime closes its inherited copy right before TensorFlow binds
the port. For that last short window a per-user lock file, held for as long as
the launch runs, keeps every other tpuctl launch away from the port.

The lock folder ($TMPDIR/tpuctl-$UID/ports) has a name anyone can guess, so it
must be this user's and private (0700): another user who could create or write
it could hold every lock (no launch would find a port) or swap lock files. A
lock file is removed by its holder on release, while still locked; whoever
opened the old file in the meantime notices (the path no longer names the
inode it locked) and opens afresh, so a port is never held by two launches.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.private_files import check_private

LOOPBACK = "127.0.0.1"


def _lock_dir() -> Path:
    base = Path(tempfile.gettempdir()) / f"tpuctl-{os.getuid()}"
    path = base / "ports"
    for folder in (base, path):
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            info = check_private(folder)  # someone else's would let them hold or swap our locks
        except OSError as err:
            raise TpuctlError(f"cannot create the port-lock folder {folder}: {err.strerror}", exit_code=FAILED) from None
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)  # ours (checked), from a tpuctl that made it 0755: close it
    _sweep(path)  # the lock files of launches that never released them (SIGKILL): they lock nothing
    return path


def _sweep(path: Path) -> None:
    """Remove lock files nobody holds, each under its own lock, as a release does; a held one is a live launch's."""
    for entry in os.scandir(path):
        if entry.name.isdigit():
            fd = _lock(path, int(entry.name))
            if fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path / entry.name)
                os.close(fd)


def _lock(locks: Path, port: int) -> int | None:
    """The lock fd for `port`, locked; None while another launch holds it.

    A holder unlinks the file on release; if that happened between our open and
    our flock we locked a file nobody can find any more, so open the path again.
    """
    path = locks / str(port)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        mine = os.fstat(fd)
        if current is not None and (current.st_ino, current.st_dev) == (mine.st_ino, mine.st_dev):
            return fd
        os.close(fd)


@dataclass
class PortReservation:
    """Holds `count` loopback ports: a bound socket and a lock file each."""

    sockets: list[socket.socket] = field(default_factory=list)
    locks: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    lock_dir: Path | None = None

    @property
    def addresses(self) -> list[str]:
        return [f"{LOOPBACK}:{port}" for port in self.ports]

    def close_sockets(self) -> None:
        """Drop the launcher's copies once each worker has inherited its own."""
        for sock in self.sockets:
            sock.close()

    def release(self) -> None:
        """Free the ports; each lock file is removed while still locked (see the module's note)."""
        self.close_sockets()
        for port, fd in zip(self.ports[: len(self.locks)], self.locks, strict=True):  # empty once released
            if self.lock_dir is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.lock_dir / str(port))
            os.close(fd)
        self.locks.clear()


def reserve(count: int, *, max_tries: int = 1000) -> PortReservation:
    """Reserve `count` distinct free ports on the loopback interface."""
    locks = _lock_dir()
    held = PortReservation(lock_dir=locks)
    rejected: list[socket.socket] = []
    try:
        for _ in range(max_tries):
            if len(held.sockets) == count:
                return held
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
            lock_fd = _lock(locks, port)
            if lock_fd is None:
                # Another launch is handing this port to its worker; keep the
                # socket bound until we are done so the kernel offers another.
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

"""The lock: the exact wheels one resolution chose for a run, what every host installs and nothing else.

A host's answer is read into a Lock only through `Lock.of`, which takes nothing a resolution does not make (a file
name with a path in it, a hash that is no SHA-256, a size that is no size): the lock names files the launcher keeps
and hands to other hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tpuctl.backends.ssh.environment.host_env import MAX_WHEEL_BYTES, lock_digest

MAX_WHEELS = 5_000  # a resolution of the largest stacks installs a few hundred
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,198}[a-z0-9])?\Z")  # PEP 503-normalised
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]{1,100}\Z")
_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,254}\.whl\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Wheel:
    name: str  # PEP 503-normalised
    version: str
    file: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "file": self.file, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class Lock:
    wheels: tuple[Wheel, ...]
    # What each locked project requires, by name (from the resolution's report): says what pulled a package in.
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, value: object, needs: object = None) -> Lock:
        """A lock from a host's answer; ValueError for anything a resolution does not write."""
        if not isinstance(value, list) or len(value) > MAX_WHEELS:
            raise ValueError("a lock is a list of wheels")
        wheels = []
        for item in value:
            if not isinstance(item, dict):
                raise ValueError("a wheel of a lock is an object")
            name, version, file, sha256, size = (item.get(key) for key in ("name", "version", "file", "sha256", "size"))
            checks = ((name, _NAME), (version, _VERSION), (file, _FILE), (sha256, _SHA256))
            if not all(isinstance(text, str) and pattern.match(text) for text, pattern in checks):
                raise ValueError(f"not a wheel of a lock: {item!r:.200}")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_WHEEL_BYTES:
                raise ValueError(f"not a wheel's size: {size!r:.40}")
            wheels.append(Wheel(str(name), str(version), str(file), str(sha256), size))
        if len({wheel.file for wheel in wheels}) != len(wheels) or len({wheel.name for wheel in wheels}) != len(wheels):
            raise ValueError("a lock names each project and file once")
        required: dict[str, tuple[str, ...]] = {}
        if isinstance(needs, dict):
            required = {str(k): tuple(str(v) for v in vs) for k, vs in needs.items() if isinstance(vs, list)}
        return cls(tuple(sorted(wheels, key=lambda wheel: wheel.name)), required)

    @property
    def digest(self) -> str:
        """The lock's hash (host_env.lock_digest: the hosts name its wheels' folder by it too)."""
        return lock_digest(self.to_json())

    @property
    def size(self) -> int:
        return sum(wheel.size for wheel in self.wheels)

    def to_json(self) -> list[dict[str, Any]]:
        return [wheel.to_json() for wheel in self.wheels]

    def pulled_in_by(self, name: str) -> list[str]:
        """The locked projects that require `name` (what the user's lines asked for, or what those asked for)."""
        return sorted(project for project, required in self.needs.items() if name in required)

    def summary(self, most: int = 6) -> str:
        """`3 wheels, 12 MiB: keras-hub 0.18.1, ...` for a notice."""
        if not self.wheels:
            return "no wheel (the image has every package the file asks for)"
        shown = ", ".join(f"{wheel.name} {wheel.version}" for wheel in self.wheels[:most])
        more = f" and {len(self.wheels) - most} more" if len(self.wheels) > most else ""
        return f"{len(self.wheels)} wheel(s), {_mib(self.size)}: {shown}{more}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{max(1, size >> 10)} KiB"

"""The list of backends, by name, and how one is loaded.

Each entry names a backend's `runner` module (tpuctl/launch/runner.py says what it
defines). They are loaded by name, as plugins are, so that the launch flow, which
every backend builds on, never imports one: adding a backend is one package under
tpuctl/backends/ plus one line here (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from tpuctl.launch.runner import BackendOptions, Runner

BACKENDS: dict[str, str] = {
    "local": "tpuctl.backends.local.runner",
    "ssh": "tpuctl.backends.ssh.runner",
    "kubernetes": "tpuctl.backends.kubernetes.runner",
    "vertex": "tpuctl.backends.vertex.runner",
}


class BackendModule(Protocol):
    Options: type[BackendOptions]

    def runner(self, options: Any) -> Runner: ...


def backend_module(name: str) -> BackendModule:
    module: BackendModule = importlib.import_module(BACKENDS[name])
    return module

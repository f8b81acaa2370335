"""The files a worker needs to run tpuctl's runtime, and nothing more: what ssh hosts and Vertex jobs get.

tpuctl/runtime/ and the few modules it imports (RUNTIME_IMPORTS). Not the CLI's
dependencies (click, rich, Google's libraries): a host needs only Python and TensorFlow.
tests/unit/test_runtime_files.py traces the runtime's imports, so a module the runtime
starts to import without being listed here fails there, not on a user's host.
"""

from __future__ import annotations

import functools
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]

# tpuctl's modules outside tpuctl/runtime/ that the runtime imports, as paths in the package.
RUNTIME_IMPORTS = (
    "tpuctl/__init__.py",
    "tpuctl/cluster/__init__.py",
    "tpuctl/cluster/hosts.py",
    "tpuctl/cluster/jax_cluster.py",
    "tpuctl/cluster/tf_config.py",
    "tpuctl/cluster/worker_contract.py",
    "tpuctl/devices/__init__.py",
    "tpuctl/endings.py",
    "tpuctl/inputs/__init__.py",
    "tpuctl/inputs/errors.py",
    "tpuctl/inputs/parse.py",
    "tpuctl/inputs/private_files.py",
    "tpuctl/inputs/terminal.py",
    "tpuctl/safety/__init__.py",
    "tpuctl/safety/child_output.py",
    "tpuctl/safety/reaper.py",
    "tpuctl/safety/stack_dump.py",
    "tpuctl/tpu/__init__.py",
    "tpuctl/tpu/accelerators.py",
)


def runtime_paths() -> list[str]:
    runtime = sorted(f"tpuctl/{path.relative_to(_PACKAGE).as_posix()}" for path in (_PACKAGE / "runtime").rglob("*.py"))
    return sorted([*RUNTIME_IMPORTS, *runtime])


@functools.cache
def files() -> tuple[tuple[str, bytes], ...]:
    """Every runtime file's path in the package and bytes, sorted by path; read once per launch: a few dozen small files, ~2 ms."""
    return tuple((name, (_PACKAGE.parent / name).read_bytes()) for name in runtime_paths())

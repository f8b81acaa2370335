"""TensorFlow or Keras 3 on JAX: what a script runs on, read from its source before any worker starts.

A worker for TensorFlow imports TensorFlow before the script (to build its
strategy), and TensorFlow 2.16+ imports Keras as it loads: Keras then settles
on its TensorFlow backend before the script's own first line can set
KERAS_BACKEND=jax (FIELD-NOTES, 2026-12-07). So the choice must be made before
the worker starts, from the script's text: `--framework auto` reads it here,
with `ast`, never running it. A script's own choice is never overridden: a
script that sets KERAS_BACKEND itself decides, and `--framework tensorflow` on
a script that sets another backend is refused rather than run on the wrong one.

What the scan takes as the script's choice (each said in the plan with its line):
- KERAS_BACKEND set to a string in the script (`os.environ["KERAS_BACKEND"] = "jax"`,
  `os.environ.setdefault(...)`, `os.putenv(...)`, `os.environ.update(KERAS_BACKEND=...)`),
  or given with `--env KERAS_BACKEND=...`;
- otherwise `import jax` together with `import keras` (Keras 3's multi-backend package), or
  `import jax` without TensorFlow (a plain JAX script).
Anything unreadable (binary, oversized, not Python) is left to TensorFlow's path, tpuctl's usual behaviour.
"""

from __future__ import annotations

import ast
import os
import stat
from dataclasses import dataclass

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError

# A training script is kilobytes; past this it is not parsed (ast's memory grows with the text).
MAX_SCANNED_BYTES = 4 * 1024 * 1024
BACKEND_VARIABLE = "KERAS_BACKEND"
# Keras 3's backends that run on something other than TensorFlow or JAX: tpuctl starts neither's workers.
OTHER_BACKENDS = ("torch", "numpy", "openvino")


@dataclass(frozen=True)
class Found:
    """What the source says: the backend it sets (and its line), and the first line importing each package."""

    backend: tuple[str, int] | None = None
    imports: tuple[tuple[str, int], ...] = ()

    def line_of(self, package: str) -> int | None:
        return next((line for name, line in self.imports if name == package), None)


def scan(data: bytes) -> Found:
    if len(data) > MAX_SCANNED_BYTES or b"\0" in data:
        return Found()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return Found()
    backend: tuple[str, int] | None = None
    imports: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imports.setdefault(alias.name.partition(".")[0], node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imports.setdefault(node.module.partition(".")[0], node.lineno)
        value = _backend_set(node)
        line = getattr(node, "lineno", 0)
        if value is not None and (backend is None or line < backend[1]):
            backend = (value, line)
    return Found(backend=backend, imports=tuple(sorted(imports.items(), key=lambda item: item[1])))


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _backend_set(node: ast.AST) -> str | None:
    """The string a statement sets KERAS_BACKEND to: a subscript assignment, a call naming it first, or a keyword."""
    if isinstance(node, ast.Assign) and isinstance(value := _text(node.value), str):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and _text(target.slice) == BACKEND_VARIABLE:
                return value
    if isinstance(node, ast.Call):
        if len(node.args) >= 2 and _text(node.args[0]) == BACKEND_VARIABLE:
            return _text(node.args[1])
        for keyword in node.keywords:
            if keyword.arg == BACKEND_VARIABLE:
                return _text(keyword.value)
    return None


def read(path: str) -> Found:
    """A regular file's source only: a FIFO or a device named as the script would block or never end (opened without
    blocking, then looked at before any read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return Found()  # the launch says "script not found" itself, as it always did
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Found()
        with os.fdopen(fd, "rb", closefd=False) as source:
            return scan(source.read(MAX_SCANNED_BYTES + 1))
    except OSError:
        return Found()
    finally:
        os.close(fd)


def choose(asked: str, script: str, env: tuple[tuple[str, str], ...]) -> tuple[str, str | None]:
    """The framework a launch runs (tensorflow or jax) and, where auto chose JAX, why (for the plan)."""
    found = read(script)
    given = next((value for name, value in env if name == BACKEND_VARIABLE), None)
    backend = (given.strip().lower(), "--env KERAS_BACKEND") if given is not None else None
    if backend is None and found.backend is not None:
        backend = (found.backend[0].strip().lower(), f"{script} line {found.backend[1]} sets KERAS_BACKEND")
    if backend is not None and backend[0] in OTHER_BACKENDS:
        raise TpuctlError(
            f"{backend[1]}={backend[0]}: tpuctl runs Keras on TensorFlow or JAX, not {backend[0]}",
            hint="set KERAS_BACKEND=jax (Keras 3 on JAX) or tensorflow",
        )
    if asked == contract.TENSORFLOW:
        if backend is not None and backend[0] == contract.JAX:
            raise TpuctlError(
                f"--framework tensorflow, but {backend[1]}=jax: the worker would import TensorFlow first, and Keras would "
                "run on TensorFlow instead of the backend the script chose",
                hint="leave --framework at auto, or pass --framework jax",
            )
        return contract.TENSORFLOW, None
    if asked == contract.JAX:
        if backend is not None and backend[0] == contract.TENSORFLOW:
            raise TpuctlError(f"--framework jax, but {backend[1]}=tensorflow", hint="leave --framework at auto, or pass --framework tensorflow")
        return contract.JAX, None
    if backend is not None:
        return (contract.JAX, f"{backend[1]}=jax") if backend[0] == contract.JAX else (contract.TENSORFLOW, None)
    jax = found.line_of("jax")
    if jax is None:
        return contract.TENSORFLOW, None
    keras = found.line_of("keras")
    if keras is not None:
        return contract.JAX, f"{script} imports jax (line {jax}) and keras (line {keras})"
    if found.line_of("tensorflow") is None:
        return contract.JAX, f"{script} imports jax (line {jax}) and not TensorFlow"
    return contract.TENSORFLOW, None

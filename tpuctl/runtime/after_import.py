"""Run a function on a module the moment it has been imported, without importing it first.

A worker whose script builds its own strategy must not have TensorFlow
imported before the script runs (the script may set its environment first,
or turn graph mode on before anything distributed exists). Yet the runtime
needs to see that strategy being built, and to put deadlines on the TPU
connections the script makes. So it asks to be called back when TensorFlow's
modules load: right after a module's code has run, before any other module
can import names from it (TensorFlow's public API modules bind its functions
by `from ... import`; patching a module later would miss them).

A finder at the front of sys.meta_path answers for the names asked about:
it lets the other finders find the module as usual, then wraps that one
loader's exec_module. The loader keeps its class (code that checks for a
SourceFileLoader still sees one).

The same finder lets a package import with the cyclic garbage collector
paused (`frozen_after`): TensorFlow's import builds ~300,000 tracked objects
and almost no garbage (about 1,300 objects), yet the collector's passes over
them cost a fifth of the import's CPU; frozen afterwards, they are never
scanned again, by the script's collections or at the exit.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

_hooks: dict[str, list[Callable[[ModuleType], None]]] = {}
_frozen_after: set[str] = set()
_lock = threading.RLock()
_finding = threading.local()


class _Finder:
    """A meta path finder for the hooked names only; every other import passes it by at once."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if (name not in _hooks and name not in _frozen_after) or getattr(_finding, "name", None) == name:
            return None
        _finding.name = name
        try:
            spec = _find_with_the_others(name, path, target)
        finally:
            _finding.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader: Any = spec.loader
        own = "exec_module" in vars(loader) if hasattr(loader, "__dict__") else False
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            # Once: a loader that serves several modules (a zip archive's) gets its own method back.
            if own:
                loader.exec_module = original
            else:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module
            pause = module.__name__ == name and name in _frozen_after
            _frozen_after.discard(name)
            with _collector_paused(pause):
                original(module)
            if module.__name__ == name:
                _run_hooks(name, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader without an instance dict: leave the module alone
            return spec
        return spec

    @staticmethod
    def invalidate_caches() -> None:
        return None


def _find_with_the_others(name: str, path: Sequence[str] | None, target: ModuleType | None) -> ModuleSpec | None:
    for finder in list(sys.meta_path):
        if isinstance(finder, _Finder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec: ModuleSpec | None = find(name, path, target)
        if spec is not None:
            return spec
    return None


@contextlib.contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    paused = pause and gc.isenabled()  # a collector the script turned off stays off, and nothing is frozen
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
            gc.freeze()


def _run_hooks(name: str, module: ModuleType) -> None:
    with _lock:
        hooks = _hooks.pop(name, [])
    for hook in hooks:
        hook(module)


_FINDER = _Finder()


def when_imported(name: str, hook: Callable[[ModuleType], None]) -> None:
    """Call `hook(module)` once `name` has been imported: now, if it already has been."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _hooks.setdefault(name, []).append(hook)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    hook(module)


def frozen_after(name: str) -> None:
    """Import `name`, whenever that happens, with the cyclic collector paused, then freeze what exists (see above)."""
    with _lock:
        if name in sys.modules:
            return
        _frozen_after.add(name)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)

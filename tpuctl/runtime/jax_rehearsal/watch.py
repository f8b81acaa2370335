"""`--rehearse ACCELERATOR` for a JAX script (Keras 3 on JAX, or plain JAX): the TPU's devices on this CPU, and what
a TPU would refuse or pay for, seen as the script runs.

The launcher gives each process the devices of one of the TPU's hosts as JAX
sees them (XLA_FLAGS=--xla_force_host_platform_device_count, set by jax_run.py;
tpuctl/launch/prepare.py check_rehearsal), and one process per host where the
slice has few hosts. Nothing of JAX is imported here: as the script's imports
load JAX, two of its entry points are watched (after_import.py):

- `jax._src.compiler.compile_or_get_cached`, through which every XLA program
  JAX compiles passes (jax/_src/interpreters/pxla.py _cached_compilation, JAX
  0.4.30 to 0.10): its name, its StableHLO text (float64 or complex128 types),
  its host callbacks (jax.debug.callback, pure_callback, io_callback), and
  whether it is one eager operation (jax/_src/dispatch.py apply_primitive) or a
  jitted step: Keras' (by name) or one the script itself calls (the first caller
  outside JAX is the script);
- `jax.device_put` and `jax.make_array_from_process_local_data` (what
  keras.distribution.DataParallel feeds each batch through): how an array's
  first axis splits over the mesh, and whether JAX refused the split.

Where JAX has moved these, the checks they feed say "not checked". The report is
written as JSON when the process ends (process 0's; every process runs the same
program) and judged in rules.py.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys

from tpuctl.cluster import worker_contract as contract
from tpuctl.runtime import after_import
from tpuctl.runtime.jax_rehearsal import rules
from tpuctl.tpu import accelerators

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from types import FrameType, ModuleType
    from typing import Any

# StableHLO element types: tensor<4x8xf64>, tensor<f64>, complex<f64> (complex128).
_F64 = re.compile(r"[<x]f64>")
_C128 = re.compile(r"complex<f64>")
_JAX_FILES = (os.sep + "jax" + os.sep, os.sep + "jaxlib" + os.sep)


class Rehearsal:
    """What one process of a JAX rehearsal saw, and its report."""

    def __init__(self, accelerator: str, devices: int, hosts: int, processes: int, script: str, report_path: str | None) -> None:
        self.accelerator, self.devices, self.hosts, self.processes = accelerator, devices, hosts, processes
        self.script_files = {script, os.path.abspath(script)}
        self.report_path = report_path
        self.seen = rules.Seen()
        self.watched: set[str] = set()  # which of JAX's entry points were found and watched

    # --- compiles ---------------------------------------------------------------------------

    def watch_compiles(self, compiler: ModuleType) -> None:
        original = getattr(compiler, "compile_or_get_cached", None)
        if original is None or not callable(original):
            return

        def compile_or_get_cached(backend: Any, computation: Any, *args: Any, **kwargs: Any) -> Any:
            self._compiled(computation, args[2] if len(args) > 2 else kwargs.get("host_callbacks", ()), sys._getframe(1))
            return original(backend, computation, *args, **kwargs)

        compile_or_get_cached.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(compiler, "compile_or_get_cached", compile_or_get_cached)  # noqa: B010 - JAX's module, typed as any module
        self.watched.add("compiles")

    def _compiled(self, computation: Any, host_callbacks: Any, frame: FrameType | None) -> None:
        try:
            name = str(computation.operation.attributes["sym_name"]).strip('"')
            body = computation.operation.get_asm(enable_debug_info=False)  # the program alone: no file names in it
            eager, caller = _called_from(frame)
            step = not eager and (name in rules.KERAS_STEPS or caller in self.script_files)
        except Exception:  # noqa: BLE001 - a module JAX shaped otherwise: this one is not judged
            return
        self.seen.compiled.append(
            rules.Compiled(
                name, eager=eager, step=step, float64=bool(_F64.search(body)), complex128=bool(_C128.search(body)),
                callbacks=len(host_callbacks or ()),
            )
        )  # fmt: skip

    # --- batches ----------------------------------------------------------------------------

    def watch_batches(self, jax: ModuleType) -> None:
        put, local = getattr(jax, "device_put", None), getattr(jax, "make_array_from_process_local_data", None)
        if callable(put):

            def device_put(x: Any, device: Any = None, *args: Any, **kwargs: Any) -> Any:
                return self._split(put, (x, device, *args), kwargs, _first_axis_split(getattr(x, "shape", None), device, 1))

            jax.device_put = device_put  # type: ignore[attr-defined]
        if callable(local):

            def make_array_from_process_local_data(sharding: Any, local_data: Any, *args: Any, **kwargs: Any) -> Any:
                whole = args[0] if args else kwargs.get("global_shape")  # given: the global shape; else the local rows times the processes
                shape, processes = (whole, 1) if whole else (getattr(local_data, "shape", None), _processes_along(sharding))
                split = _first_axis_split(shape, sharding, processes)
                return self._split(local, (sharding, local_data, *args), kwargs, split)

            jax.make_array_from_process_local_data = make_array_from_process_local_data  # type: ignore[attr-defined]
        self.watched.add("batches")

    def _split(self, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any], split: rules.Split | None) -> Any:
        try:
            result = call(*args, **kwargs)
        except ValueError:  # JAX's IndivisibleError among them: recorded where it is the split's
            if split is not None and split.rows % split.ways:
                self.seen.splits.append(rules.Split(split.rows, split.ways, split.axes, refused=True))
            raise
        if split is not None and not self.seen.splits:  # the first is the report's batch; one per step would pile up
            self.seen.splits.append(split)
        return result

    # --- the report -------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        checks = rules.verdicts(self.seen, self.accelerator, self.devices)
        if "compiles" not in self.watched:  # JAX was never imported, or moved its compiler: nothing seen, nothing judged
            checks = [c if c["check"] == "batch split" else {**c, "verdict": "not checked", "detail": _UNWATCHED} for c in checks]
        first = self.seen.splits[0] if self.seen.splits else None
        return {
            "framework": "jax",
            "accelerator": self.accelerator,
            "jax": _version("jax"),
            "keras": _version("keras"),
            "devices": self.devices,
            "hosts": self.hosts,
            "processes": self.processes,
            "replicas": self.devices,
            "steps": 0,
            "rehearsed_as": _rehearsed_as(self.devices, self.hosts, self.processes),
            "global_batch": first.rows if first is not None else None,
            "per_replica_batch": first.rows // first.ways if first is not None and not first.refused else None,
            "compiles": len(self.seen.compiled),
            "checks": checks,
        }

    def write_report(self) -> None:
        if not self.report_path:
            return
        try:
            with open(self.report_path, "w", encoding="utf-8") as out:
                json.dump(self.report(), out)
        except OSError as err:
            print(f"tpuctl: warning: cannot write the rehearsal report {self.report_path}: {err.strerror or err}", flush=True)


_UNWATCHED = "JAX's compiler was never seen (the script imported no JAX, or this JAX moved compile_or_get_cached)"


def _called_from(frame: FrameType | None) -> tuple[bool, str | None]:
    """Whether this compile is one operation run eagerly (JAX's dispatch.apply_primitive is on the way to it), and the
    file of the first caller outside JAX: the code that called the jitted function (the script's own loop, Keras')."""
    eager = False
    while frame is not None:
        code = frame.f_code
        if not any(part in code.co_filename for part in _JAX_FILES):
            return eager, code.co_filename
        eager = eager or code.co_name == "apply_primitive"
        frame = frame.f_back
    return eager, None


def _first_axis_split(shape: Any, sharding: Any, processes: int) -> rules.Split | None:
    """How the first axis of an array of `shape` splits under a NamedSharding (its spec's mesh axes), counted over every
    process's rows; None for anything else (a pytree, a device, a sharding of another kind)."""
    spec, mesh = getattr(sharding, "spec", None), getattr(sharding, "mesh", None)
    if not shape or spec is None or mesh is None or len(spec) == 0 or spec[0] is None:
        return None
    axes = spec[0] if isinstance(spec[0], tuple) else (spec[0],)
    sizes = dict(getattr(mesh, "shape", {}))
    ways = 1
    for axis in axes:
        ways *= int(sizes.get(axis, 1))
    if ways <= 1:
        return None
    return rules.Split(int(shape[0]) * processes, ways, "/".join(map(str, axes)))


def _processes_along(sharding: Any) -> int:
    """The processes whose local rows make up the global batch: those holding the sharding's devices (a batch split
    over every device of a multi-process mesh, as DataParallel's is), one where the devices are this process's."""
    devices = getattr(sharding, "device_set", None) or ()
    return max(1, len({getattr(d, "process_index", 0) for d in devices}))


def _version(module: str) -> str | None:
    """The version of `module` where the script loaded it (asking would import it now, at exit)."""
    loaded = sys.modules.get(module)
    version = getattr(loaded, "__version__", None) if loaded is not None else None
    return None if version is None else str(version)


def _rehearsed_as(devices: int, hosts: int, processes: int) -> str:
    if processes > 1:
        return f"{processes} processes, one per host, {devices // processes} CPU devices each, joined as JAX's cluster over loopback"
    if hosts > 1:
        return (
            f"one process with all {devices} devices, standing in for all {hosts} hosts: per-host input pipelines and "
            "collectives between hosts are not rehearsed"
        )
    return f"one process, {devices} CPU devices"


def install(accelerator: str, script: str) -> None:
    """Before the script: watch JAX's compiler and its batch entry points as they load, and report at exit (process 0's
    report; the others run the same program)."""
    devices, hosts = accelerators.jax_devices(accelerator)
    processes = contract.num_workers(os.environ)
    first = os.environ.get(contract.WORKER_INDEX, "0") == "0"
    report = os.environ.get(contract.REHEARSAL_REPORT) if first else None
    rehearsal = Rehearsal(accelerator, devices, hosts, processes, script, report)
    after_import.when_imported("jax._src.compiler", rehearsal.watch_compiles)
    after_import.when_imported("jax", rehearsal.watch_batches)
    atexit.register(rehearsal.write_report)

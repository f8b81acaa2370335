"""What a TPU would refuse or pay for in a JAX program, judged from what a rehearsal saw compile and shard.

Pure: the observations come in as data (__init__.py gathers them from JAX), the
verdicts go out in the report's shape (tpuctl/launch/rehearsal_report.py). Only
what JAX and XLA on a TPU really do is said, each with its source; a program
that shows none of it is "ok", and what was never seen is "not checked".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Keras 3's JAX trainer jits its steps under these names (keras/src/backend/jax/trainer.py make_*_function).
KERAS_STEPS = frozenset({"jit_train_step", "jit_test_step", "jit_predict_step"})
# A step compiled this often changes its input shapes from call to call: full batches, a last partial batch and an
# evaluation batch account for three compiles of a step that is fine.
RECOMPILE_AT = 4

X64_SOURCES = (
    "jax-ml/jax#19769: 'TPU does not have support for many 64-bit operations'; "
    "jax-ml/jax#21108: XLA rewrites a TPU program 'to not contain X64 element types'; "
    "https://docs.jax.dev/en/latest/default_dtypes.html"
)
JIT_SOURCE = "https://docs.jax.dev/en/latest/jit-compilation.html: a jitted function is traced and compiled again for each new input shape or dtype"
CALLBACK_SOURCE = "https://docs.jax.dev/en/latest/external-callbacks.html: each call runs on the host, its operands copied from the device and its results back"
SHARDING_SOURCE = "jax/_src/sharding.py IndivisibleError: a dimension must divide evenly by the ways it is split, on a TPU as here"


@dataclass(frozen=True)
class Compiled:
    """One XLA program JAX compiled: `eager` one operation dispatched on its own (jax/_src/dispatch.py
    apply_primitive), `step` a jitted step (Keras' train/test/predict step, or code of the script's)."""

    name: str
    eager: bool = False
    step: bool = False
    float64: bool = False
    complex128: bool = False
    callbacks: int = 0


@dataclass(frozen=True)
class Split:
    """An array put on the mesh with its first axis split: its rows (the global count) over `ways` devices along
    mesh axes `axes`; `refused`: JAX raised on it."""

    rows: int
    ways: int
    axes: str
    refused: bool = False


@dataclass
class Seen:
    compiled: list[Compiled] = field(default_factory=list)
    splits: list[Split] = field(default_factory=list)


def _verdict(check: str, verdict: str, detail: str) -> dict[str, str]:
    return {"check": check, "verdict": verdict, "detail": detail}


def _names(found: list[Compiled], limit: int = 4) -> str:
    names = list(dict.fromkeys(c.name for c in found))
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def float64(seen: Seen) -> dict[str, str]:
    """complex128 a TPU refuses outright ("Element type C128 is not supported on TPU"); float64 it runs only as XLA's
    software rewrite into 32-bit pairs, slower, and some operations it cannot rewrite fail to compile."""
    c128 = [c for c in seen.compiled if c.complex128]
    if c128:
        return _verdict("float64", "failed", f"{_names(c128)} compute in complex128, which a TPU refuses ({X64_SOURCES})")
    f64 = [c for c in seen.compiled if c.float64]
    if f64:
        return _verdict(
            "float64", "warning",
            f"{_names(f64)} compute in float64 (jax_enable_x64): a TPU has no float64 unit; XLA emulates it in software, "
            f"slower, and refuses the operations it cannot rewrite ({X64_SOURCES})",
        )  # fmt: skip
    return _verdict("float64", "ok", f"no float64 in the {len(seen.compiled)} program(s) compiled")


def recompiles(seen: Seen) -> dict[str, str]:
    steps = Counter(c.name for c in seen.compiled if c.step and not c.eager)
    if not steps:
        return _verdict("recompiles", "not checked", "no jitted step (Keras' or the script's own) was compiled")
    over = {name: count for name, count in steps.items() if count >= RECOMPILE_AT}
    if over:
        said = ", ".join(f"{name} {count} times" for name, count in over.items())
        return _verdict(
            "recompiles", "warning",
            f"compiled {said}: its inputs change shape from call to call, and a TPU compiles each new shape anew, "
            f"for seconds to minutes each time ({JIT_SOURCE}); pad or bucket the shapes, or drop the last partial batch",
        )  # fmt: skip
    return _verdict("recompiles", "ok", ", ".join(f"{name} compiled {count} time(s)" for name, count in steps.items()))


def host_callbacks(seen: Seen) -> dict[str, str]:
    calling = [c for c in seen.compiled if c.callbacks and not c.eager]
    if calling:
        return _verdict(
            "host callbacks", "warning",
            f"{_names(calling)} call back to the host (jax.debug.callback or print, jax.pure_callback, io_callback) in "
            f"every execution: on a TPU each call is a round trip between the device and the host inside the step ({CALLBACK_SOURCE})",
        )  # fmt: skip
    jitted = sum(1 for c in seen.compiled if not c.eager)
    return _verdict("host callbacks", "ok", f"none in the {jitted} jitted program(s)")


def batch_split(seen: Seen, accelerator: str, devices: int) -> dict[str, str]:
    refused = next((s for s in seen.splits if s.refused), None)
    if refused is not None:
        return _verdict(
            "batch split", "failed",
            f"an array of {refused.rows} rows split {refused.ways} ways over mesh axis {refused.axes} "
            f"({devices} devices on a {accelerator}) does not divide: JAX refuses it ({SHARDING_SOURCE}); make the "
            f"global batch a multiple of {refused.ways}, and drop or pad a last partial batch",
        )  # fmt: skip
    if not seen.splits:
        return _verdict(
            "batch split", "not checked",
            "no array was split along its first axis by jax.device_put or jax.make_array_from_process_local_data "
            "(keras.distribution.DataParallel uses the latter)",
        )  # fmt: skip
    first = seen.splits[0]
    return _verdict("batch split", "ok", f"{first.rows} rows over {first.ways} devices (mesh axis {first.axes}): {first.rows // first.ways} per device")


def verdicts(seen: Seen, accelerator: str, devices: int) -> list[dict[str, str]]:
    return [batch_split(seen, accelerator, devices), float64(seen), recompiles(seen), host_callbacks(seen)]

"""`--rehearse ACCELERATOR` on the launcher's side: what may be rehearsed, and the report at the end.

The rehearsing worker (tpuctl/runtime/rehearsal/; a JAX script's: tpuctl/runtime/jax_rehearsal/) writes its report as JSON
when the script ends; the launcher reads it back here, checks its shape (it is
a file on disk, so anything may be in it), prints it, and fails the launch when
a check found something a TPU would refuse.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.launch.cause import Cause
from tpuctl.tpu import accelerators

# Each replica is a thread over a virtual CPU: past this a laptop rehearses thread scheduling, not the job.
MAX_REPLICAS = 256
VERDICTS = ("ok", "warning", "failed", "not checked")
FILE_NAME = "rehearsal.json"
_MAX_BYTES = 1 << 20


def replicas_of(accelerator: str, *, jax: bool = False) -> int:
    """The replica count a rehearsal of `accelerator` runs (a JAX script's: the devices JAX sees, TPU7x's included),
    or a one-line refusal."""
    count = accelerators.jax_devices(accelerator)[0] if jax else accelerators.replicas(accelerators.shape_of(accelerator))
    if count > MAX_REPLICAS:
        raise TpuctlError(
            f"--rehearse {accelerator}: {count} replicas; tpuctl rehearses at most {MAX_REPLICAS} on one machine",
            hint="rehearse a smaller slice of the same generation: the per-replica batch and the checks are the same",
        )
    return count


def read(path: Path) -> dict[str, Any] | None:
    """The worker's report, or None where it wrote none or something else (the run's outcome says why)."""
    try:
        with path.open("rb") as stream:
            raw = stream.read(_MAX_BYTES + 1)
        report = json.loads(raw) if len(raw) <= _MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    return report if _well_formed(report) else None


def _well_formed(report: Any) -> bool:
    if not isinstance(report, dict) or not isinstance(report.get("checks"), list):
        return False
    for key in ("replicas", "steps"):
        if not isinstance(report.get(key), int):
            return False
    for key in ("global_batch", "per_replica_batch", "hosts", "devices", "processes", "compiles"):
        if report.get(key) is not None and not isinstance(report.get(key), int):
            return False
    per_step = report.get("seconds_per_step")
    if per_step is not None and not (isinstance(per_step, (int, float)) and math.isfinite(per_step)):
        return False
    return all(
        isinstance(c, dict) and c.get("verdict") in VERDICTS and isinstance(c.get("check"), str) and isinstance(c.get("detail"), str)
        for c in report["checks"]
    )


def problems(report: dict[str, Any]) -> list[dict[str, str]]:
    return [c for c in report["checks"] if c["verdict"] == "failed"]


def render(report: dict[str, Any]) -> list[str]:
    """The report as lines for a person: what was rehearsed, the batch, the steps, then one line per check."""
    batch = report.get("global_batch")
    per_replica = report.get("per_replica_batch")
    per_step = report.get("seconds_per_step")
    accelerator = one_line(str(report.get("accelerator", "?")), 40)
    jax = report.get("framework") == "jax"
    of_hosts = f" of {report['hosts']} hosts" if isinstance(report.get("hosts"), int) and report["hosts"] > 1 else ""
    lines = [
        f"rehearsal of {accelerator}: {report['replicas']} {'JAX devices' if jax else 'replicas'}{of_hosts}"
        + f" on {_jax(report) if jax else _tensorflow(report)}; rehearsed as {one_line(str(report.get('rehearsed_as', '?')), 200)}",
        "  batch: "
        + ("unknown" if batch is None else f"{batch} global")
        + ("" if per_replica is None else f", {per_replica} per {'device' if jax else 'replica'}"),
        f"  programs compiled: {report.get('compiles', '?')}"
        if jax
        else f"  steps: {report['steps']}" + ("" if per_step is None else f", {per_step:.3f}s per step on this CPU (not a TPU's speed)"),
    ]
    width = max(len(c["check"]) for c in report["checks"]) if report["checks"] else 0
    for check in report["checks"]:
        mark = {"ok": "ok", "warning": "WARN", "failed": "FAIL", "not checked": "--"}[check["verdict"]]
        lines.append(f"  {mark:>4}  {one_line(check['check'], 40):<{width}}  {one_line(check['detail'], 300)}")
    return lines


def _tensorflow(report: dict[str, Any]) -> str:
    """The TensorFlow (and Keras) the rehearsal ran on, and the TPU image it stood for where it was one's (`runtime`)."""
    said = f"TensorFlow {one_line(str(report.get('tensorflow') or 'unknown'), 40)}"
    if report.get("keras"):
        said += f" (Keras {one_line(str(report['keras']), 40)})"
    if report.get("runtime"):
        said += f", as on {one_line(str(report['runtime']), 100)}"
    return said


def _jax(report: dict[str, Any]) -> str:
    """The JAX (and Keras) a JAX script's rehearsal ran on: this machine's, no TPU image's."""
    said = f"this machine's JAX {one_line(str(report.get('jax') or 'unknown'), 40)}"
    return said + (f" (Keras {one_line(str(report['keras']), 40)})" if report.get("keras") else "")


def explained(cause: Cause, report: dict[str, Any]) -> Cause:
    """A failure's cause with the rehearsal's finding first: what a TPU refuses can break the CPU run too (Keras 3
    reducing an uneven first batch fails in add_n on both), where TensorFlow's own error names an op, not the reason."""
    found = problems(report)
    if not found:
        return cause
    first = found[0]
    finding = f"the rehearsal's {one_line(first['check'], 40)} check failed ({one_line(first['detail'], 200)})"
    return Cause(cause.kind, f"{finding}; then {cause.summary}")


def verdict_line(report: dict[str, Any]) -> str | None:
    """The launch's last word on the rehearsal, where a check failed."""
    found = problems(report)
    if not found:
        return None
    return f"the rehearsal found {len(found)} problem(s) a {one_line(str(report.get('accelerator', 'TPU')), 40)} would refuse: " + "; ".join(
        one_line(c["check"], 40) for c in found
    )

"""`python -m tpuctl.profiling.convert FILE.xplane.pb...`: xprof's numbers for each worker's file, one JSON line each.

It runs in a process of its own because xprof's converters are C++ that log a lot and can crash on a bad file;
the CLI reads the lines (tpuctl/profiling/verdict.py) and survives whatever happens here. It imports xprof and the
standard library only (never TensorFlow, never the rest of tpuctl), so any interpreter with xprof can run it.

Each file is converted on its own: several files in one call give xprof's merged "all hosts" view (per-step maxima
across hosts), not per-worker numbers. Each is read from a private folder: the converter caches its op statistics
beside the file (ALL_HOSTS.op_stats_v2.pb) and reuses that cache for whichever file comes next, and a cache left
in the session folder would also mislead TensorBoard's own view of it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

MISSING_EXIT = 3  # xprof cannot be imported: the verdict says how to install it
TOP_OPS = 5
# Step-table columns (ms per step) that count as computing; input is infeedTimeMs, communication is
# deviceCollectivesTimeMs plus the collectives' part of hostComputeTimeMs (below), the rest is "other"
# (Python between steps, I/O, compilation).
_COMPUTE = ("deviceComputeTimeMs", "hostComputeTimeMs", "kernelLaunchTimeMs")
# TensorFlow's op types that move data between replicas or tasks (tensorflow/core/ops/collective_ops.cc,
# nccl_ops.cc, sendrecv_ops.cc), and XLA's collective HLO categories as xprof's smart_suggestion/signal_provider.h
# lists them (IsCollective). xprof's step breakdown counts a GPU kernel whose name starts with "nccl" as
# DEVICE_COLLECTIVES (xplane_to_step_events.cc, ClassifyGpuEvent), but a collective run on the host (CPU workers
# under MultiWorkerMirroredStrategy) as HOST_COMPUTE (ClassifyCpuEvent): these are told apart by op type here.
COLLECTIVE_TYPES = frozenset(
    {
        "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather", "CollectiveGatherV2",
        "CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveBcastSendV2", "CollectiveBcastRecvV2",
        "CollectiveAllToAllV2", "CollectiveAllToAllV3", "CollectiveReduceScatterV2",
        "NcclAllReduce", "NcclReduce", "NcclBroadcast", "_NcclReduceSend", "_NcclReduceRecv", "_NcclBroadcastSend", "_NcclBroadcastRecv",
        "_Send", "_Recv", "_HostSend", "_HostRecv",
        "all-reduce", "all-reduce fusion", "all-reduce-scatter fusion", "all-to-all", "all-gather", "all-gather-start",
        "all-gather-done", "all-gather fusion", "reduce-scatter", "collective-permute", "collective-permute-start",
        "collective-permute-done", "host send", "host send-done", "host recv", "host recv-done",
    }
)  # fmt: skip

Convert = Callable[[list[str], str, dict[str, Any]], tuple[Any, str]]


def _rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A Google DataTable (xprof's gviz output) as one dict per row, keyed by column id."""
    ids = [column["id"] for column in table.get("cols", [])]
    return [dict(zip(ids, [(cell or {}).get("v") for cell in row["c"]], strict=False)) for row in table.get("rows", [])]


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """The converter reports why it cannot read a file only on fd 2, in C++; catch it there to name the reason."""
    saved = os.dup(2)
    with path.open("wb") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _reason(log: Path, file: str) -> str:
    """The converter's last error line, without its log prefix and the private copy's path."""
    errors = [line.split("] ", 1)[-1] for line in log.read_text(errors="replace").splitlines() if line.startswith("E")]
    return errors[-1].replace(file, "the file").strip() if errors else "xprof returned nothing for it"


def is_collective(op_type: str) -> bool:
    """Whether an op of this type is communication between replicas: xprof's rule for GPU kernels ("nccl..."),
    or one of COLLECTIVE_TYPES."""
    return op_type in COLLECTIVE_TYPES or op_type.lower().startswith("nccl")


def host_collective_share(ops: list[dict[str, Any]]) -> float:
    """The collectives' share (0-1) of the host ops' self time, which xprof counts as host compute whole."""
    share = sum(float(r.get("host_total_self_time_percent") or 0.0) for r in ops if r.get("host_or_device") == "Host" and is_collective(str(r.get("type"))))
    return min(1.0, max(0.0, share))


def classified(ops: list[dict[str, Any]]) -> bool:
    """Whether xprof put any op of the file in its op statistics (IDLE, its row for the time no op ran, is none).

    A JAX program on CPU gets none (jax 0.10 / xprof 2.24, measured: its framework_op_stats hold IDLE alone, and its
    step breakdown counts the whole step, Gloo's cross-process all-reduce inside XLA's CPU program included, as host
    compute), so there no share of it can be told to be communication: unknown, not 0%."""
    return any(str(row.get("type")) != "IDLE" for row in ops)


def _share(row: dict[str, Any]) -> float:
    side = "device" if row.get("host_or_device") == "Device" else "host"
    return round(100 * float(row.get(f"{side}_total_self_time_percent") or 0.0), 1)


def numbers(convert: Convert, file: str, scratch: Path) -> dict[str, Any]:
    """One worker file's step times, input, compute and communication shares and top ops, or the reason it has none (under "error").
    `file` comes back as given: it is how the reader matches the answer to its question."""
    found: dict[str, Any] = {"file": file}
    path = Path(file)
    try:
        size = path.stat().st_size
    except OSError as exc:
        return {**found, "error": f"cannot be read: {exc.strerror}"}
    if size == 0:
        return {**found, "error": "is empty (0 bytes): the capture did not finish writing it"}
    private = scratch / "copy.xplane.pb"
    os.symlink(path.resolve(), private)
    log = scratch / "stderr.log"
    try:
        with _stderr_to(log):
            pipeline, _ = convert([str(private)], "input_pipeline_analyzer", {"use_saved_result": False})
            ops, _ = convert([str(private)], "framework_op_stats", {}) if pipeline else (None, "")
    except Exception as exc:  # noqa: BLE001 - the converter's errors have no common type; the verdict names them
        return {**found, "error": f"could not be read by xprof: {type(exc).__name__}: {exc}"}
    if not pipeline or not ops:
        return {**found, "error": f"could not be read by xprof: {_reason(log, str(private))}"}
    steps_table = json.loads(pipeline)[1]
    steps = _rows(steps_table)
    op_rows = _rows(json.loads(ops)[1])
    top = [{"type": r["type"], "name": r["operation"], "self_pct": _share(r)} for r in op_rows[:TOP_OPS]]
    if not steps and not top:
        return {**found, "error": "holds no trace events: the worker recorded nothing during the capture"}
    times = [float(r["stepTimeMs"]) for r in steps]
    total = sum(times)
    found |= {"steps": len(steps), "markers": bool(steps), "top_ops": top}
    if not total:
        return {**found, "step_ms": None, "input_pct": None, "compute_pct": None, "communication_pct": None, "other_pct": None}
    input_pct = 100 * sum(float(r["infeedTimeMs"]) for r in steps) / total
    host_comm = host_collective_share(op_rows) * sum(float(r.get("hostComputeTimeMs") or 0.0) for r in steps)
    device_comm = sum(float(r.get("deviceCollectivesTimeMs") or 0.0) for r in steps)
    communication_pct = 100 * (host_comm + device_comm) / total if classified(op_rows) or device_comm else None
    compute_pct = 100 * sum(float(r.get(c) or 0.0) for r in steps for c in _COMPUTE) / total - 100 * host_comm / total
    return found | {
        "step_ms": {
            "mean": round(statistics.fmean(times), 3),
            "stdev": round(statistics.pstdev(times), 3),
            "min": round(min(times), 3),
            "max": round(max(times), 3),
        },
        "input_pct": round(input_pct, 1),
        "compute_pct": round(compute_pct, 1),
        "communication_pct": None if communication_pct is None else round(communication_pct, 1),
        "other_pct": round(max(0.0, 100 - input_pct - compute_pct - (communication_pct or 0.0)), 1),
    }


def main(paths: list[str], out: TextIO) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # read when the converter loads: its INFO/WARNING logs are noise here
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as exc:
        out.write(json.dumps({"missing": "xprof", "error": str(exc)}) + "\n")
        return MISSING_EXIT
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="tpuctl-xprof-") as scratch:
            out.write(json.dumps(numbers(raw_to_tool_data.xspace_to_tool_data, path, Path(scratch))) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    # Only the JSON lines go to stdout: anything the converter itself prints there is moved to stderr.
    result = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.exit(main(sys.argv[1:], result))

"""How a worker's step time is split and judged: collectives are communication, apart from compute, as xprof keeps
them (docs/profile.md). The real capture of an all-reduce-bound run is tests/integration/test_profile_collectives.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuctl.profiling import convert, verdict
from tpuctl.profiling.convert import host_collective_share, is_collective
from tpuctl.profiling.verdict import StepTimes, Worker


@pytest.mark.parametrize(
    "op_type",
    [
        "CollectiveReduceV2",  # MultiWorkerMirroredStrategy's gradient all-reduce (ring or auto, on CPU)
        "CollectiveGatherV2",  # all-gather, e.g. of a metric's values
        "CollectiveBcastSendV2",
        "CollectiveAllToAllV3",
        "NcclAllReduce",  # MirroredStrategy's NCCL all-reduce on GPUs
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",  # an NCCL kernel: xprof's own rule (a name that starts with nccl)
        "_Send",
        "_Recv",  # a parameter server's variables reaching a worker
        "all-reduce",  # XLA's HLO categories on TPU (xprof's IsCollective)
        "all-gather-start",
        "collective-permute-done",
    ],
)
def test_communication_is_what_moves_data_between_replicas(op_type: str) -> None:
    assert is_collective(op_type)


@pytest.mark.parametrize(
    "op_type", ["_MklMatMul", "MatMul", "AddV2", "Conv2D", "Dataset", "IteratorGetNext", "SplitV", "fusion", "convolution", "CollectiveAssignGroupV2"]
)
def test_compute_and_input_are_not_communication(op_type: str) -> None:
    assert not is_collective(op_type)


def _op(side: str, op_type: str, share: float) -> dict[str, object]:
    """A row of xprof's framework_op_stats table, as convert.py reads it (a share is a fraction of the side's self time)."""
    return {"host_or_device": side, "type": op_type, f"{side.lower()}_total_self_time_percent": share}


def test_the_host_share_counts_host_collectives_only() -> None:
    """A device row's collectives are xprof's own deviceCollectivesTimeMs column already: not counted twice."""
    rows = [_op("Host", "CollectiveReduceV2", 0.6), _op("Host", "_MklMatMul", 0.3), _op("Device", "NcclAllReduce", 0.9), _op("Host", "_Recv", 0.05)]
    assert host_collective_share(rows) == pytest.approx(0.65)


@given(st.lists(st.tuples(st.sampled_from(["Host", "Device"]), st.text(max_size=30), st.floats(allow_nan=False, allow_infinity=False))))
def test_the_host_share_is_a_fraction_whatever_the_table_says(rows: list[tuple[str, str, float]]) -> None:
    assert 0.0 <= host_collective_share([_op(*row) for row in rows]) <= 1.0


def _worker(input_pct: float, compute_pct: float, communication_pct: float) -> Worker:
    other = round(100 - input_pct - compute_pct - communication_pct, 1)
    return Worker("worker:0", "/m/a.xplane.pb", 4, StepTimes(300.0, 20.0, 280.0, 330.0), input_pct, compute_pct, communication_pct, other, (), True)


def test_a_step_that_is_mostly_all_reduce_is_communication_bound_not_compute_bound() -> None:
    w = _worker(0.0, 21.0, 78.0)
    [line] = [line for line in verdict.Verdict(None, (w,)).lines() if line.startswith("worker:0")]
    assert line.endswith("communication 78%  other 1%  communication-bound"), line


def test_communication_past_xprofs_threshold_is_named_where_compute_is_larger() -> None:
    """xprof's CollectiveBoundRule speaks from 30% of the step; below it the larger share says what bounds the step."""
    assert verdict._bound(_worker(0.0, 60.0, 35.0))[0] == "partly communication-bound"
    assert verdict._bound(_worker(0.0, 70.0, 25.0))[0] == "compute-bound"
    assert verdict._bound(_worker(60.0, 10.0, 30.0))[0] == "input-bound"


def test_the_hint_is_said_once_for_the_workers_it_fits() -> None:
    bound, fine = _worker(0.0, 20.0, 79.0), replace(_worker(0.0, 95.0, 1.0), worker="worker:1")
    notes = verdict._communication_note([bound, fine])
    assert len(notes) == 1 and notes[0].startswith("worker:0: ") and "larger per-replica batch" in notes[0]
    assert verdict._communication_note([fine]) == []


def _table(ids: list[str], rows: list[list[object]]) -> dict[str, object]:
    """A Google DataTable as xprof's gviz output writes it."""
    return {"cols": [{"id": i} for i in ids], "rows": [{"c": [{"v": v} for v in row]} for row in rows]}


def test_a_profile_whose_ops_xprof_did_not_classify_has_unknown_communication_and_no_bound(tmp_path: Path) -> None:
    """A JAX program on CPU, as xprof 2.24 reads jax 0.10's profile of a 2-process DataParallel fit: steps of host
    compute only, and op statistics that hold IDLE alone (its cross-process all-reduce runs inside XLA's CPU program).
    Its communication is unknown, not 0%, and the verdict names no bound from a compute share that may be all-reduce."""
    file = tmp_path / "host_worker-0.xplane.pb"
    file.write_bytes(b"\x00" * 64)
    step_ids = ["stepnum", "deviceComputeTimeMs", "hostComputeTimeMs", "kernelLaunchTimeMs", "infeedTimeMs", "deviceCollectivesTimeMs", "stepTimeMs"]
    steps = _table(step_ids, [[f"train {n}", 0.0, 16.0, 0.0, 0.0, 0.0, 16.2] for n in range(5, 9)])
    op_ids = ["host_or_device", "type", "operation", "host_total_self_time_percent"]
    ops = [_table(op_ids, [["Host", "IDLE", "IDLE", 0.0]]), _table(op_ids, [])]

    def xprof(files: list[str], tool: str, options: dict[str, object]) -> tuple[str, str]:
        return json.dumps([{}, steps] if tool == "input_pipeline_analyzer" else ops), ""

    numbers = convert.numbers(xprof, str(file), tmp_path)
    assert numbers["markers"] and numbers["steps"] == 4 and numbers["communication_pct"] is None, numbers
    worker = verdict._worker("worker:0", numbers)
    [line] = [line for line in verdict.Verdict(None, (worker,)).lines() if line.startswith("worker:0")]
    assert "communication unknown" in line and "bound" not in line, line
    # Input is xprof's own word there too: a step that waits for input is still said to.
    assert verdict._bound(replace(worker, input_pct=70.0, compute_pct=30.0))[0] == "input-bound"

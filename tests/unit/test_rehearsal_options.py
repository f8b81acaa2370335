"""`launch --rehearse` before anything runs: the replica count of each TPU type, refusals of
options a rehearsal cannot honour, the dry run, and the worker's report read back from disk."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_tpuctl
from tpuctl.launch import rehearsal_report
from tpuctl.launch.outcome import Outcome, summarise
from tpuctl.tpu import accelerators as acc

EXAMPLE = str(ROOT / "examples" / "train_tpu.py")


@pytest.mark.parametrize(
    ("accelerator", "replicas"),
    [
        ("v2-8", 8), ("v3-8", 8), ("v3-32", 32),  # one replica per TensorCore
        ("v4-8", 4), ("v4-32", 16), ("v5p-8", 4),  # megacore: one per chip
        ("v5litepod-8", 8), ("v5e-4", 4), ("v6e-8", 8),  # one core per chip
    ],
)
def test_replicas_are_tpustrategys_count_on_that_slice(accelerator: str, replicas: int) -> None:
    assert acc.replicas(acc.shape_of(accelerator)) == replicas


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rehearse", "v9-8"], "unknown TPU generation 'v9'"),
        (["--rehearse", "gpu"], "'gpu' is not a TPU accelerator type"),
        (["--rehearse", "v3-2048"], "--rehearse v3-2048: 2048 replicas; tpuctl rehearses at most 256"),
        (["--rehearse", "v2-8", "--workers", "2"], "does not combine with --workers"),
        (["--rehearse", "v2-8", "--simulate-devices", "4"], "does not combine with --simulate-devices"),
        (["--rehearse", "v2-8", "--strategy", "mirrored"], "does not combine with --strategy mirrored"),
        (["--rehearse", "v2-8", "--tpu-timeout", "5"], "does not combine with --tpu-timeout"),
        (["--rehearse", "v2-8", "--hosts", "a,b"], "does not combine with --backend ssh"),
        (["--rehearse", "v2-8", "--backend", "kubernetes"], "does not combine with --backend kubernetes"),
    ],
)
def test_what_a_rehearsal_cannot_honour_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_tpuctl("launch", EXAMPLE, *args, "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2 and "Traceback" not in result.stderr


def test_the_dry_run_shows_the_rehearsal_in_the_workers_environment() -> None:
    result = run_tpuctl("launch", EXAMPLE, "--rehearse", "v5litepod-8", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    (worker,) = json.loads(result.stdout)["workers"]
    assert worker["env"]["TPUCTL_REHEARSE"] == "v5litepod-8"


REPORT = {
    "accelerator": "v2-8",
    "tensorflow": "2.15.1",
    "keras": "2.15.0",
    "runtime": "tpu-vm-tf-2.15.1-pjrt",
    "replicas": 8,
    "hosts": 1,
    "rehearsed_as": "one process, one virtual CPU per replica",
    "global_batch": 100,
    "per_replica_batch": None,
    "steps": 12,
    "seconds_per_step": 0.05,
    "checks": [
        {"check": "batch split", "verdict": "warning", "detail": "global batch 100 does not split evenly across 8 replicas"},
        {"check": "static shapes", "verdict": "warning", "detail": "partial batch"},
        {"check": "XLA ops", "verdict": "failed", "detail": "no XLA kernel for PyFunc"},
        {"check": "float64", "verdict": "not checked", "detail": "no step ran inside tf.function"},
    ],
}


def test_a_report_with_a_failed_check_is_shown_and_named_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "rehearsal.json"
    path.write_text(json.dumps(REPORT))
    report = rehearsal_report.read(path)
    assert report == REPORT
    lines: list[str] = []
    summarise(Outcome(1, 1, 3.0, rehearsal=report), "1 worker(s)", tmp_path, lambda line: lines.append("tpuctl: " + line), lines.append)
    assert lines[:3] == [
        "tpuctl: rehearsal of v2-8: 8 replicas on TensorFlow 2.15.1 (Keras 2.15.0), as on tpu-vm-tf-2.15.1-pjrt; "
        "rehearsed as one process, one virtual CPU per replica",
        "tpuctl:   batch: 100 global",
        "tpuctl:   steps: 12, 0.050s per step on this CPU (not a TPU's speed)",
    ]
    assert "tpuctl:   WARN  batch split    global batch 100 does not split evenly across 8 replicas" in lines
    assert "tpuctl:   FAIL  XLA ops        no XLA kernel for PyFunc" in lines
    assert "tpuctl:     --  float64        no step ran inside tf.function" in lines
    assert lines[-1] == (
        f"tpuctl: 1 worker(s) finished in 3.0s, but the rehearsal found 1 problem(s) a v2-8 would refuse: XLA ops; logs: {tmp_path}"
    )


def test_a_report_names_the_tensorflow_it_ran_on_and_says_so_where_it_does_not_know() -> None:
    here = {**REPORT, "keras": None, "runtime": None, "tensorflow": "2.21.0"}
    assert rehearsal_report.render(here)[0].startswith("rehearsal of v2-8: 8 replicas on TensorFlow 2.21.0; rehearsed as")
    unknown = {key: value for key, value in REPORT.items() if key not in ("tensorflow", "keras", "runtime")}
    assert rehearsal_report.render(unknown)[0].startswith("rehearsal of v2-8: 8 replicas on TensorFlow unknown; rehearsed as")


@pytest.mark.parametrize(
    "text",
    [
        "", "{", "[]", "null", '{"checks": 5}', '{"replicas": 8, "steps": 1, "checks": [{"verdict": "maybe"}]}',
        '{"replicas": "8", "steps": 1, "checks": []}', '{"replicas": 8, "steps": 1, "seconds_per_step": NaN, "checks": []}',
        "[" * 100_000, "x" * (2 << 20),
    ],
)
def test_a_damaged_report_is_no_report(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rehearsal.json"
    path.write_text(text)
    assert rehearsal_report.read(path) is None


def test_a_missing_report_is_no_report(tmp_path: Path) -> None:
    assert rehearsal_report.read(tmp_path / "absent.json") is None
    assert rehearsal_report.read(tmp_path) is None  # a folder in its place


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)))
def test_whatever_json_the_file_holds_reads_and_renders_without_a_traceback(value: object) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rehearsal.json"
        path.write_text(json.dumps(value))
        report = rehearsal_report.read(path)
    if report is not None:
        assert rehearsal_report.render(report)

"""`tail --tags` shows what was asked for: no "other summaries" line for the summaries it filtered out (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tests.conftest import run_tpuctl


def _run(folder: Path) -> Path:
    """A scalar and a histogram, written by TensorBoard's own event writer."""
    writer = EventFileWriter(str(folder))
    histogram = summary_pb2.HistogramProto(min=0.0, max=1.0, num=2.0, sum=1.0, sum_squares=1.0, bucket_limit=[1.0], bucket=[2.0])
    values = [summary_pb2.Summary.Value(tag="loss", simple_value=0.5), summary_pb2.Summary.Value(tag="weights", histo=histogram)]
    writer.add_event(event_pb2.Event(step=1, wall_time=1.0, summary=summary_pb2.Summary(value=values)))
    writer.close()
    return folder


def test_tags_leave_other_summaries_out(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    everything = run_tpuctl("tail", str(run), "--once", timeout=60)
    assert everything.returncode == 0 and "other summaries" in everything.stdout, everything.stdout + everything.stderr
    only = run_tpuctl("tail", str(run), "--once", "--tags", "loss", timeout=60)
    assert only.returncode == 0 and "loss step=1 value=0.5" in only.stdout
    assert "other summaries" not in only.stdout, only.stdout
    as_json = run_tpuctl("tail", str(run), "--once", "--json", "--tags", "loss", timeout=60)
    kinds = {json.loads(line)["kind"] for line in as_json.stdout.splitlines()}
    assert kinds == {"scalar"}, as_json.stdout

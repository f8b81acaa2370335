"""TensorBoard event files written in the test's own process without importing TensorFlow.

TensorBoard's EventFileWriter opens its file through `tensorboard.compat.tf.io.gfile`, which imports TensorFlow
wherever TensorFlow is installed: ~3 CPU-seconds in a unit test's process for a file of a few records. The bytes
are TensorBoard's own RecordWriter's (tensorboard/summary/writer/record_writer.py, pure Python), on a file of the
name EventFileWriter gives and with the file_version event it writes first: the same file, opened with `open`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

_files = 0


def write_events(folder: Path, events: Iterable[event_pb2.Event], filename_suffix: str = "") -> Path:
    """One writer's event file in `folder` (created), as EventFileWriter names and starts it; returns its path."""
    global _files
    _files += 1
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{_files}{filename_suffix}"
    with path.open("wb") as file:
        writer = RecordWriter(file)
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        for event in events:
            writer.write(event.SerializeToString())
    return path


def scalar(tag: str, step: int, value: float) -> event_pb2.Event:
    """A scalar as TensorBoard's summary writers of the callers' tests wrote it: a simple_value at a step."""
    return event_pb2.Event(step=step, wall_time=1.0 + step, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]))

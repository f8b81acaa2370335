"""TensorBoard event files written in the test's own process without importing TensorFlow.

TensorBoard's EventFileWriter opens its file through `tensorboard.compat.tf.io.gfile`, which imports TensorFlow
wherever TensorFlow is installed: ~3 CPU-seconds in a unit test's process for a file of a few records. The bytes
are TensorBoard's own RecordWriter's (tensorboard/summary/writer/record_writer.py, pure Python), on a file of the
name EventFileWriter gives and with the file_version event it writes first: the same file, opened with `open`.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from tpuctl.watch.events import Scalar
from tpuctl.watch.records import FOOTER_SIZE, HEADER_SIZE, frame

DATA = Path(__file__).resolve().parents[1] / "data" / "tfevents"  # files TensorFlow's own writers made (README.md there)
_FLOAT = struct.Struct("<f")
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


# --- records as bytes, framed as TFRecord frames them: for files written byte by byte ------------------------------


def scalar_event(tag: str, step: int, value: float, *, tf2: bool = True, plugin: str = "") -> bytes:
    """An event in TensorFlow's layouts, serialized by TensorBoard's own protos (not ours). TF2's
    writers name the plugin in every event (pass plugin="scalars"); the files they really write are
    in tests/data/tfevents, read by `test_tail_reads_what_keras_fit_wrote`."""
    if tf2:
        tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
        tensor.tensor_shape.SetInParent()
        entry = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    else:
        entry = summary_pb2.Summary.Value(tag=tag, simple_value=value)
    if plugin:
        entry.metadata.plugin_data.plugin_name = plugin
    return frame(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[entry])).SerializeToString())


def header_event() -> bytes:
    return frame(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())


def _varint(number: int) -> bytes:
    out = b""
    while True:
        low, number = number & 0x7F, number >> 7
        if not number:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def malformed_events() -> list[bytes]:
    """CRC-valid records whose Event parses but whose value's metadata / tensor bytes are no protobuf."""
    bad_metadata = _field(1, b"x") + _field(9, b"\x0a\xff")  # metadata: a string field that runs past its end
    bad_tensor = _field(1, b"y") + _field(8, b"\x22\x7f\x00")  # tensor: tensor_content claims 127 bytes, has 1
    bad_varint = _field(1, b"z") + _field(8, b"\x08" + b"\xff" * 11)  # dtype: an 11-byte varint
    return [frame(b"\x10\x03" + _field(5, _field(1, value))) for value in (bad_metadata, bad_tensor, bad_varint)]


# --- what TensorBoard's protos read in a file (the reference the tail's reader is checked against) ------------------


def bodies(data: bytes) -> list[bytes]:
    """The records' payloads, framed as TensorFlow frames them (the files are whole and undamaged)."""
    found = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        found.append(data[pos + HEADER_SIZE : pos + HEADER_SIZE + length])
        pos += HEADER_SIZE + length + FOOTER_SIZE
    return found


def expected(data: bytes) -> tuple[list[Scalar], Counter[str], int]:
    """(scalars, other summaries by plugin, records of the common float-scalar layout) by TensorBoard's protos."""
    plugins: dict[str, str] = {}
    scalars: list[Scalar] = []
    others: Counter[str] = Counter()
    common = 0
    for body in bodies(data):
        event = event_pb2.Event.FromString(body)
        for value in event.summary.value:
            plugin = plugins.setdefault(value.tag, value.metadata.plugin_data.plugin_name)
            kind = value.WhichOneof("value")
            tensor = value.tensor
            if plugin not in ("", "scalars"):
                others[plugin] += 1
            elif kind == "simple_value":
                scalars.append((value.tag, event.step, value.simple_value, event.wall_time))
            elif kind == "tensor" and tensor.dtype == 1 and not tensor.tensor_shape.dim:
                number = _FLOAT.unpack(tensor.tensor_content)[0] if tensor.tensor_content else tensor.float_val[0]
                scalars.append((value.tag, event.step, number, event.wall_time))
                # What the bulk path is for: one float scalar per event, in a record shorter than 128 bytes.
                common += len(event.summary.value) == 1 and len(body) < 128
            else:
                others[plugin or kind or "empty"] += 1
    return scalars, others, common

"""The event decoder's fast path and slow path agree with TensorBoard's own protos on any event."""

from __future__ import annotations

import math
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2

from tpuctl.watch.events import Decoder
from tpuctl.watch.records import RecordBuffer, frame, masked_crc

tags = st.text(min_size=1, max_size=40).filter(lambda t: "\x00" not in t)
floats = st.floats(width=32, allow_nan=False)


@st.composite
def events(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, int, float]]]:
    """One serialized event and the scalars it holds, in the layouts TF, Keras and TF1 write: "tf2" as
    tf.summary.scalar and Keras' callback (the plugin named in every event), "tensorboard" as
    tensorboard.summary.Writer (a data class, the value in float_val), the rest as older writers."""
    step = draw(st.one_of(st.just(0), st.integers(0, 200), st.integers(0, 2**40)))
    layout = draw(st.sampled_from(["tf2", "tensorboard", "content", "content+shape", "float_val", "double", "int64", "simple", "image", "text", "two"]))
    tag = draw(tags)
    value = draw(floats)
    expected: list[tuple[str, int, float]] = []
    entries = []
    if layout in ("tf2", "tensorboard"):
        field = {"tf2": "tensor_content", "tensorboard": "float_val"}[layout]
        tensor = tensor_pb2.TensorProto(dtype=1, **{field: struct.pack("<f", value) if field == "tensor_content" else [value]})
        tensor.tensor_shape.SetInParent()
        entry = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
        entry.metadata.plugin_data.plugin_name = "scalars"
        if layout == "tensorboard":
            entry.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
        entries.append(entry)
        expected.append((tag, step, value))
    elif layout in ("content", "content+shape"):
        tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
        if layout == "content+shape":
            tensor.tensor_shape.SetInParent()
        entries.append(summary_pb2.Summary.Value(tag=tag, tensor=tensor))
        expected.append((tag, step, value))
    elif layout == "float_val":
        entries.append(summary_pb2.Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(dtype=1, float_val=[value])))
        expected.append((tag, step, value))
    elif layout == "double":
        entries.append(summary_pb2.Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(dtype=2, tensor_content=struct.pack("<d", value))))
        expected.append((tag, step, value))
    elif layout == "int64":
        number = draw(st.integers(-(2**40), 2**40))
        entries.append(summary_pb2.Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(dtype=9, int64_val=[number])))
        expected.append((tag, step, float(number)))
    elif layout == "simple":
        entries.append(summary_pb2.Summary.Value(tag=tag, simple_value=value))
        expected.append((tag, step, value))
    elif layout == "image":
        entries.append(summary_pb2.Summary.Value(tag=tag, image=summary_pb2.Summary.Image(height=1, width=1, encoded_image_string=b"\x42\x08")))
    elif layout == "text":
        # "\x00" keeps the text plugin's tag apart from the drawn scalar tags, as TF keeps plugins per tag
        text = summary_pb2.Summary.Value(tag="\x00" + tag, tensor=tensor_pb2.TensorProto(dtype=7, string_val=[b"hi"]))
        text.metadata.plugin_data.plugin_name = "text"
        entries.append(text)
    else:  # two scalars in one event
        for name in (tag, tag + "_2"):
            tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
            entries.append(summary_pb2.Summary.Value(tag=name, tensor=tensor))
            expected.append((name, step, value))
    event = event_pb2.Event(wall_time=draw(st.floats(0, 2e9)), step=step, summary=summary_pb2.Summary(value=entries))
    return event.SerializeToString(), expected


@settings(max_examples=300)
@given(st.lists(events(), min_size=1, max_size=20), st.integers(1, 200))
def test_scan_agrees_with_tensorboard(stream: list[tuple[bytes, list[tuple[str, int, float]]]], chunk: int) -> None:
    data = b"".join(frame(body) for body, _ in stream)
    decoder, buffer = Decoder(), RecordBuffer()
    got = []
    records = 0
    for start in range(0, len(data), chunk):
        scalars, count = decoder.scan(buffer, data[start : start + chunk])
        got += scalars
        records += count
    assert records == len(stream) and buffer.pending == b"" and not buffer.damage
    expected = [item for _, items in stream for item in items]
    assert [(tag, step) for tag, step, _, _ in got] == [(tag, step) for tag, step, _ in expected]
    for (_, _, value, _), (_, _, want) in zip(got, expected, strict=True):
        assert value == want or (math.isnan(value) and math.isnan(want))


def test_a_tag_of_another_plugin_is_counted_not_shown() -> None:
    first = summary_pb2.Summary.Value(tag="weights", tensor=tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", 1.0)))
    first.metadata.plugin_data.plugin_name = "histograms"
    later = summary_pb2.Summary.Value(tag="weights", tensor=tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", 2.0)))
    data = b"".join(frame(event_pb2.Event(step=s, summary=summary_pb2.Summary(value=[v])).SerializeToString()) for s, v in ((1, first), (2, later)))
    decoder = Decoder()
    scalars, records = decoder.scan(RecordBuffer(), data)
    assert scalars == [] and records == 2 and decoder.others == {"histograms": 2}


def _scalar_record(tag: str, step: int, value: float) -> bytes:
    tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
    entry = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    return event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[entry])).SerializeToString()


def test_a_header_claiming_unwritten_bytes_waits_inside_a_run() -> None:
    """A row the bulk path matches but whose (valid) header claims more bytes than are written:
    the scan stops there and waits, as for any half-written record (this once looped forever)."""
    good = [frame(_scalar_record("loss", step, 0.5)) for step in range(3)]
    body = _scalar_record("loss", 3, 0.25)
    longer = struct.pack("<Q", len(body) + 50)
    claimed = longer + struct.pack("<I", masked_crc(longer)) + body + struct.pack("<I", masked_crc(body))
    decoder, buffer = Decoder(), RecordBuffer()
    scalars, records = decoder.scan(buffer, b"".join(good) + claimed + frame(_scalar_record("loss", 4, 1.0)))
    assert [step for _, step, _, _ in scalars] == [0, 1, 2] and records == 3
    assert not buffer.damage and buffer.consumed == len(b"".join(good))


def test_damage_inside_a_run_is_reported_and_the_run_goes_on() -> None:
    records = [bytearray(frame(_scalar_record("loss", step, float(step)))) for step in range(6)]
    records[2][-6] ^= 0x01  # the value: the data CRC fails
    records[4][5] ^= 0x01  # the length's upper bytes: the header is damaged
    data = b"".join(records)
    decoder, buffer = Decoder(), RecordBuffer()
    scalars, _ = decoder.scan(buffer, data)
    assert [step for _, step, _, _ in scalars] == [0, 1, 3, 5]
    offsets = [sum(map(len, records[:i])) for i in (2, 4)]
    assert [d.offset for d in buffer.damage] == offsets


def test_inconsistent_nested_lengths_go_through_protobuf() -> None:
    """A CRC-valid record of the float-scalar layout whose summary length is wrong is not taken
    by the bulk path: protobuf decides (here: it is no valid event)."""
    body = bytearray(_scalar_record("loss", 7, 0.5))
    summary = body.index(b"\x2a")
    body[summary + 1] -= 1
    decoder, buffer = Decoder(), RecordBuffer()
    scalars, _ = decoder.scan(buffer, frame(bytes(body)))
    assert scalars == []

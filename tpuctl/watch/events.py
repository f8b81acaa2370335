"""Events out of record payloads: scalars to show, everything else counted by kind.

TF2's `tf.summary.scalar` stores its value as a 0-d tensor (float32 in
`tensor_content`) and names the "scalars" plugin only in a tag's first event;
TF1 and Keras' old paths use `simple_value`. Both are scalars here. Images,
histograms, text, audio and other plugins are counted, not shown.

This loop is the tail's hot path (benchmarks/tail_reader.py): the common
float-scalar tensor is recognised by its bytes, without a message object.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tpuctl.watch.event_proto import Event, SummaryMetadata, TensorProto
from tpuctl.watch.records import _MASK_DELTA, FOOTER_SIZE, HEADER_SIZE, RecordBuffer

# TensorFlow DataType numbers -> how a 0-d tensor's content decodes.
_CONTENT = {1: struct.Struct("<f"), 2: struct.Struct("<d"), 3: struct.Struct("<i"), 9: struct.Struct("<q"), 19: struct.Struct("<e")}
_REPEATED = {1: "float_val", 2: "double_val", 3: "int_val", 9: "int64_val"}
# A serialized 0-d DT_FLOAT TensorProto without its 4 content bytes: dtype 1, then
# tensor_content of length 4, with or without an explicit empty tensor_shape.
_FLOAT_HEADS = (b"\x08\x01\x22\x04", b"\x08\x01\x12\x00\x22\x04")
_SCALAR_PLUGINS = ("", "scalars")

# (tag, step, value, wall_time)
Scalar = tuple[str, int, float, float]

# One whole framed record holding one TF2 float scalar, exactly as TensorFlow writes
# it: length < 128, header CRC, Event{wall_time, step?, summary{value{tag, tensor}}},
# data CRC. Fields come in field-number order, so the layout is fixed but for the
# tag. Matched in C at the record's start; anything else takes the general path.
_SCALAR_RECORD = re.compile(
    rb"([\x00-\x7f])\x00{7}.{4}"  # length, header CRC
    rb"\x09.{8}"  # wall_time (read by offset: 13 bytes into the record)
    rb"(?:\x10([\x80-\xff]{0,9}[\x00-\x7f]))?"  # step (absent when 0)
    rb"\x2a[\x00-\x7f]\x0a[\x00-\x7f]\x0a([\x00-\x7f])([^\x42]{0,127})"  # summary, value, tag (a "B" in it: slow path)
    rb"\x42(?:\x08\x08\x01|\x0a\x08\x01\x12\x00)\x22\x04.{4}"  # 0-d DT_FLOAT tensor (value: last 4 bytes)
    rb".{4}",  # data CRC
    re.S,
)


@dataclass
class Decoder:
    """Per file: remembers tags of other plugins, which TF names only in a tag's first event."""

    plugins: dict[str, str] = field(default_factory=dict)
    not_scalars: set[str] = field(default_factory=set)  # tags another plugin claimed
    others: Counter[str] = field(default_factory=Counter)
    undecodable: int = 0
    _tag_names: dict[bytes, str] = field(default_factory=dict)

    def scan(self, buffer: RecordBuffer, chunk: bytes) -> tuple[list[Scalar], int]:
        """Frame and decode a chunk in one pass: (scalars, records). The tail's hot loop.

        Records of the common float-scalar layout are recognised by one anchored
        regex match and checked by their data CRC over exactly `length` bytes
        (a damaged length cannot pass both); every other record goes through
        RecordBuffer.step and the protobuf decoder.
        """
        import google_crc32c

        data, base = buffer.take(chunk)
        scalars: list[Scalar] = []
        append = scalars.append
        match = _SCALAR_RECORD.match
        crc32c = google_crc32c.value
        unpack_crc = _FOOTER.unpack_from
        unpack_double = _CONTENT[2].unpack_from
        unpack_float = _CONTENT[1].unpack_from
        tags = self._tag_names
        header, footer, mask_delta = HEADER_SIZE, FOOTER_SIZE, _MASK_DELTA  # locals: this loop runs per event
        slow_records = slow_scalars = 0
        pos = 0
        end = len(data)
        while pos + header <= end:
            found = match(data, pos)
            if found is not None:
                size, step_bytes, tag_size, tag_bytes = found.groups()
                stop = found.end() - footer
                if stop - pos - header == size[0] and len(tag_bytes) == tag_size[0]:
                    crc = crc32c(data[pos + header : stop])
                    tag = tags.get(tag_bytes)
                    if tag is None:
                        tag = self._scalar_tag(tag_bytes)
                    if (((crc >> 15) | (crc << 17)) + mask_delta) & 0xFFFFFFFF == unpack_crc(data, stop)[0] and tag:
                        # The step's varint, inlined for the sizes of real runs (below 2 million).
                        if step_bytes is None:
                            step = 0
                        else:
                            width = len(step_bytes)
                            if width == 1:
                                step = step_bytes[0]
                            elif width == 2:
                                step = (step_bytes[0] & 0x7F) | step_bytes[1] << 7
                            elif width == 3:
                                step = (step_bytes[0] & 0x7F) | (step_bytes[1] & 0x7F) << 7 | step_bytes[2] << 14
                            else:
                                step = _varint(step_bytes)
                        append((tag, step, unpack_float(data, stop - 4)[0], unpack_double(data, pos + 13)[0]))
                        pos = stop + footer
                        continue
            body, after = buffer.step(data, pos, base)
            if after == pos:
                break  # the last record is not all written yet
            pos = after
            if body is not None:
                decoded = self.decode([body])
                slow_records += 1
                slow_scalars += len(decoded)
                scalars += decoded
        records = len(scalars) - slow_scalars + slow_records
        buffer.keep(data, pos)
        return scalars, records

    def decode(self, records: list[bytes]) -> list[Scalar]:
        scalars: list[Scalar] = []
        append = scalars.append
        parse = Event.FromString
        unpack_float = _CONTENT[1].unpack_from
        short_head, long_head = _FLOAT_HEADS
        not_scalars = self.not_scalars
        for data in records:
            try:
                event = parse(data)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError (its class depends on the backend): CRC-valid bytes that are no Event
                self.undecodable += 1
                continue
            values = event.summary.value
            if not values:
                continue
            step = event.step
            wall_time = event.wall_time
            for value in values:
                tag = value.tag
                if value.metadata:
                    self._learn(tag, value.metadata)
                tensor = value.tensor
                size = len(tensor)
                if tag not in not_scalars and (
                    (size == 8 and tensor.startswith(short_head)) or (size == 10 and tensor.startswith(long_head))
                ):
                    append((tag, step, unpack_float(tensor, size - 4)[0], wall_time))
                    continue
                number = self._other(value, tag, tensor)
                if number is not None:
                    append((tag, step, number, wall_time))
        return scalars

    def _learn(self, tag: str, metadata: bytes) -> None:
        plugin = SummaryMetadata.FromString(metadata).plugin_data.plugin_name
        self.plugins[tag] = plugin
        if plugin not in _SCALAR_PLUGINS:
            self.not_scalars.add(tag)
            self._tag_names.clear()

    def _scalar_tag(self, raw: bytes) -> str:
        """The tag's text for the fast path, "" when its plugin is not scalars; cached per raw tag."""
        tag = raw.decode("utf-8", "replace")
        self._tag_names[raw] = name = "" if tag in self.not_scalars else tag
        return name

    def _other(self, value: Any, tag: str, tensor: bytes) -> float | None:
        """The slow path: simple_value, other tensor layouts, and everything that is not a scalar."""
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            return float(value.simple_value)
        plugin = self.plugins.get(tag, "")
        if kind == "tensor" and plugin in _SCALAR_PLUGINS:
            number = _tensor_scalar(TensorProto.FromString(tensor))
            if number is not None:
                return number
        self.others[plugin or kind or "empty"] += 1
        return None


_FOOTER = struct.Struct("<I")


def _varint(raw: bytes) -> int:
    number = 0
    for shift, byte in enumerate(raw):
        number |= (byte & 0x7F) << (7 * shift)
    return number


def _tensor_scalar(tensor: Any) -> float | None:
    """The number in a 0-d numeric tensor, or None for anything else (strings, shaped tensors)."""
    if tensor.tensor_shape:
        return None
    dtype = tensor.dtype
    unpack = _CONTENT.get(dtype)
    if unpack is None:
        return None
    content = tensor.tensor_content
    if content:
        return float(unpack.unpack(content)[0]) if len(content) == unpack.size else None
    repeated = getattr(tensor, _REPEATED[dtype]) if dtype in _REPEATED else None
    return float(repeated[0]) if repeated else None

"""Events out of record payloads: scalars to show, everything else counted by kind.

TF2's `tf.summary.scalar` stores its value as a 0-d tensor (float32 in
`tensor_content`) and names the "scalars" plugin only in a tag's first event;
TF1 and Keras' old paths use `simple_value`. Both are scalars here. Images,
histograms, text, audio and other plugins are counted, not shown.

This loop is the tail's hot path (benchmarks/tail_reader.py): the common
float-scalar tensor is recognised by its bytes, without a message object.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tpuctl.watch.event_proto import Event, SummaryMetadata, TensorProto

# TensorFlow DataType numbers -> how a 0-d tensor's content decodes.
_CONTENT = {1: struct.Struct("<f"), 2: struct.Struct("<d"), 3: struct.Struct("<i"), 9: struct.Struct("<q"), 19: struct.Struct("<e")}
_REPEATED = {1: "float_val", 2: "double_val", 3: "int_val", 9: "int64_val"}
# A serialized 0-d DT_FLOAT TensorProto without its 4 content bytes: dtype 1, then
# tensor_content of length 4, with or without an explicit empty tensor_shape.
_FLOAT_HEADS = (b"\x08\x01\x22\x04", b"\x08\x01\x12\x00\x22\x04")
_SCALAR_PLUGINS = ("", "scalars")

# (tag, step, value, wall_time)
Scalar = tuple[str, int, float, float]


@dataclass
class Decoder:
    """Per file: remembers tags of other plugins, which TF names only in a tag's first event."""

    plugins: dict[str, str] = field(default_factory=dict)
    not_scalars: set[str] = field(default_factory=set)  # tags another plugin claimed
    others: Counter[str] = field(default_factory=Counter)
    undecodable: int = 0

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
            except Exception:  # protobuf's DecodeError: CRC-valid bytes that are no Event
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

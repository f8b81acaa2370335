"""The parts of TensorFlow's Event proto a tail needs, declared here instead of imported.

TensorFlow (2.5 s, 600 MB) and TensorBoard are heavy to import, and a laptop
tailing a bucket may have neither. Field numbers and types follow
tensorflow/core/util/event.proto, framework/summary.proto and tensor.proto;
payloads we only count (images, histograms, audio, shapes) are declared as
plain bytes, which the protobuf wire format allows and which keeps parsing
cheap. A value's tensor and metadata are bytes too: almost every tensor a
tail meets is a float scalar with one of two fixed layouts, recognised
without building a message; the rest are parsed with TensorProto on demand. The messages live in a private descriptor pool, so they never clash
with TensorBoard's or TensorFlow's own when those are loaded too.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
PACKAGE = "tpuctl_events"


def _message(file: Any, name: str, fields: list[tuple[str, int, int, str | None, bool]], oneof: tuple[str, list[str]] | None = None) -> None:
    message = file.message_type.add(name=name)
    if oneof:
        message.oneof_decl.add(name=oneof[0])
    for field_name, number, kind, type_name, repeated in fields:
        field = message.field.add(name=field_name, number=number, type=kind)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if type_name:
            field.type_name = f".{PACKAGE}.{type_name}"
        if oneof and field_name in oneof[1]:
            field.oneof_index = 0


def _build() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(name="tpuctl_events.proto", package=PACKAGE, syntax="proto3")
    _message(file, "PluginData", [("plugin_name", 1, _F.TYPE_STRING, None, False)])
    _message(file, "SummaryMetadata", [("plugin_data", 1, _F.TYPE_MESSAGE, "PluginData", False)])
    _message(
        file,
        "TensorProto",
        [
            ("dtype", 1, _F.TYPE_INT32, None, False),
            ("tensor_shape", 2, _F.TYPE_BYTES, None, False),  # empty: a scalar
            ("tensor_content", 4, _F.TYPE_BYTES, None, False),
            ("float_val", 5, _F.TYPE_FLOAT, None, True),
            ("double_val", 6, _F.TYPE_DOUBLE, None, True),
            ("int_val", 7, _F.TYPE_INT32, None, True),
            ("int64_val", 10, _F.TYPE_INT64, None, True),
        ],
    )
    kinds = ["simple_value", "image", "histo", "audio", "tensor", "obsolete_old_style_histogram"]
    _message(
        file,
        "Value",
        [
            ("tag", 1, _F.TYPE_STRING, None, False),
            ("simple_value", 2, _F.TYPE_FLOAT, None, False),
            ("obsolete_old_style_histogram", 3, _F.TYPE_BYTES, None, False),
            ("image", 4, _F.TYPE_BYTES, None, False),
            ("histo", 5, _F.TYPE_BYTES, None, False),
            ("audio", 6, _F.TYPE_BYTES, None, False),
            ("tensor", 8, _F.TYPE_BYTES, None, False),  # a serialized TensorProto
            ("metadata", 9, _F.TYPE_BYTES, None, False),  # a serialized SummaryMetadata
        ],
        oneof=("value", kinds),
    )
    _message(file, "Summary", [("value", 1, _F.TYPE_MESSAGE, "Value", True)])
    _message(
        file,
        "Event",
        [
            ("wall_time", 1, _F.TYPE_DOUBLE, None, False),
            ("step", 2, _F.TYPE_INT64, None, False),
            ("file_version", 3, _F.TYPE_STRING, None, False),
            ("graph_def", 4, _F.TYPE_BYTES, None, False),
            ("summary", 5, _F.TYPE_MESSAGE, "Summary", False),
        ],
        oneof=("what", ["file_version", "graph_def", "summary"]),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    names = ("Event", "TensorProto", "SummaryMetadata")
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in names}


_CLASSES = _build()
Event: Any = _CLASSES["Event"]
TensorProto: Any = _CLASSES["TensorProto"]
SummaryMetadata: Any = _CLASSES["SummaryMetadata"]

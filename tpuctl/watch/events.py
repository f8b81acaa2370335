"""Events out of record payloads: scalars to show, everything else counted by kind.

TF2's `tf.summary.scalar` (TF 2.15 and 2.21, and Keras' TensorBoard callback,
Keras 3 and tf-keras alike, which call it) stores its value as a 0-d tensor
(float32 in `tensor_content`) and names the "scalars" plugin in every event, not
only a tag's first: it is TF1's `FileWriter` that strips repeated metadata.
TensorBoard's own `tensorboard.summary.Writer` adds a data class and stores the
value in `float_val`. TF1 and Keras' old paths use `simple_value`. All are
scalars here. Images, histograms, text, audio, graphs and other plugins are
counted, not shown. As in TensorBoard, a tag's first metadata decides its plugin.

This loop is the tail's hot path (benchmarks/tail_reader.py): runs of the common
float-scalar record are recognised by their bytes a window at a time and checked
over whole columns, without a message object or a Python step per record.
"""

from __future__ import annotations

import re
import struct
import sys
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import google_crc32c

from tpuctl.watch.event_proto import Event, SummaryMetadata, TensorProto
from tpuctl.watch.records import _MASK_DELTA, FOOTER_SIZE, HEADER_SIZE, Damage, RecordBuffer, masked_crc

# TensorFlow DataType numbers -> how a 0-d tensor's content decodes.
_CONTENT = {1: struct.Struct("<f"), 2: struct.Struct("<d"), 3: struct.Struct("<i"), 9: struct.Struct("<q"), 19: struct.Struct("<e")}
_REPEATED = {1: "float_val", 2: "double_val", 3: "int_val", 9: "int64_val"}
# A serialized 0-d DT_FLOAT TensorProto without its 4 content bytes: dtype 1, then
# tensor_content of length 4, with or without an explicit empty tensor_shape.
_FLOAT_HEADS = (b"\x08\x01\x22\x04", b"\x08\x01\x12\x00\x22\x04")
_SCALAR_PLUGINS = ("", "scalars")
_FLOAT = _CONTENT[1]
NOT_AN_EVENT = "record is not a valid event (malformed protobuf); skipped"

# (tag, step, value, wall_time)
Scalar = tuple[str, int, float, float]

# The metadata a float-scalar record may carry after its tensor, as the writers lay
# it out (Summary.Value field 9): none (TF1's FileWriter after a tag's first
# event), plugin_data{plugin_name: "scalars"} (tf.summary.scalar, TF 2.15 to 2.21,
# in every event), and the same plus data_class: DATA_CLASS_SCALAR
# (tensorboard.summary.Writer). b"" last: `_shape_tag` tells them apart by suffix.
_SCALAR_METADATA = (b"J\x0b\n\t\n\x07scalars", b"J\r\n\t\n\x07scalars \x01", b"")
_CLAIMS = _SCALAR_METADATA[:2]

# A run of whole framed records each holding one TF2 float scalar, exactly as
# TensorFlow writes them: length < 128 and its CRC, then Event{wall_time, step?,
# summary{value{tag, tensor, metadata?}}}, then the data CRC. Fields come in
# field-number order, so the layout is fixed but for the step's varint, the tag and
# which of `_SCALAR_METADATA` ends it. One findall per window returns every such
# record as a row of groups; the final `|.+` alternative swallows the rest of the
# window at the first record that is not one, so the rows are contiguous from where
# the search starts and their offsets follow from their lengths. Every group is
# checked in bulk (`Decoder._run`).
_RUN = re.compile(
    rb"([\x00-\x7f]\x00{7}.{4})"  # 1 header: length, length CRC
    rb"(\x09(.{8})"  # 2 body; 3 wall_time
    rb"(?:\x10([\x80-\xff]{0,7}[\x00-\x7f]))?"  # 4 step: absent when 0; 8 bytes at most (below 2**56)
    # 5 shape: summary, value, tag, then the tensor: dtype 1, shape {} or none, 4 bytes of content or float_val
    rb"(\x2a[\x00-\x7f]\x0a[\x00-\x7f]\x0a[\x00-\x7f].{0,113}?\x42(?:\x08\x08\x01|\x0a\x08\x01\x12\x00)[\x22\x2a]\x04)"
    rb"(.{4})"  # 6 the float32 value
    rb"(J\x0b\n\t\n\x07scalars|J\r\n\t\n\x07scalars \x01)?)"  # 7 metadata (_SCALAR_METADATA)
    rb"(.{4})"  # 8 data CRC
    rb"|.+",
    re.S,
)
# The 12-byte header of every length a row can have: the length CRC is checked by comparison.
_HEADERS = tuple(struct.pack("<QI", n, masked_crc(struct.pack("<Q", n))) if n < 128 else b"" for n in range(256))
# Bytes scanned per findall: bounds the rows held at once and what a resync makes us scan again.
WINDOW = 256 << 10
# A shape group's tensor head -> the tensor's length: tensor_content (\x22) or packed float_val (\x2a).
_TENSOR_HEADS = {b"\x42\x08\x08\x01" + field + b"\x04": 8 for field in (b"\x22", b"\x2a")} | {
    b"\x42\x0a\x08\x01\x12\x00" + field + b"\x04": 10 for field in (b"\x22", b"\x2a")
}


@dataclass
class Decoder:
    """Per file: remembers each tag's plugin, from its first metadata (TF1 writes it only there)."""

    plugins: dict[str, str] = field(default_factory=dict)
    not_scalars: set[str] = field(default_factory=set)  # tags another plugin claimed
    others: Counter[str] = field(default_factory=Counter)
    undecodable: int = 0
    fast: int = 0  # records taken by the bulk path (`_run`): how tests tell it met a writer's layout
    _shapes: dict[bytes, str] = field(default_factory=dict)  # a row's shape + metadata groups -> tag ("" if not a scalar's)

    def scan(self, buffer: RecordBuffer, chunk: bytes) -> tuple[list[Scalar], int]:
        """Frame and decode a chunk in one pass: (scalars, records). The tail's hot loop.

        Per record, Python-level work is what costs (a million records in a 50 MB
        file), so runs of the common float-scalar record are taken a window at a
        time by `_run`, every check done over whole columns in C. The first record
        of another kind, a damaged one or an incomplete last one goes through
        RecordBuffer.step and the protobuf decoder, and the next run starts after it.
        """
        data, base = buffer.take(chunk)
        scalars: list[Scalar] = []
        records = 0
        pos = 0
        end = len(data)
        while pos + HEADER_SIZE <= end:
            pos, gap, taken = self._run(data, pos, min(end, pos + WINDOW), buffer, base, scalars)
            records += taken
            if not gap or pos + HEADER_SIZE > end:
                continue
            after, taken = self._slow(data, pos, buffer, base, scalars)
            if after == pos:
                break  # the last record is not all written yet
            records += taken
            pos = after
        buffer.keep(data, pos)
        return scalars, records

    def _run(self, data: bytes, pos: int, stop: int, buffer: RecordBuffer, base: int, scalars: list[Scalar]) -> tuple[int, bool, int]:
        """Take the float-scalar records from `pos` on, up to `stop`: (where they end, whether
        a record of another kind starts there, records taken).

        A row is taken only if its header is the one its body's length has (length
        and length CRC), its data CRC holds and its shape and metadata name a scalar
        tag with consistent nested lengths (`_shape_tag`); all rows pass in the common case,
        checked by comparing whole lists. Otherwise rows are taken one by one, and a
        failing row goes through `_slow`, which reports it exactly as before; a tag it
        gives another plugin clears the cache, so later rows are looked up again. Rows
        with scalars metadata claim their tag when taken, in file order (`_claim`).
        """
        rows = _RUN.findall(data, pos, stop)
        gap = bool(rows) and not rows[-1][0]
        if gap:
            rows.pop()
        if not rows:
            return pos, gap, 0
        headers, bodies, walls, steps, shapes, values, metadata, footers = zip(*rows, strict=True)
        sizes = list(map(len, bodies))
        masked = _masked_crcs(bodies)
        sums = array("Q", array("I", b"".join(footers)))
        if _SWAP:
            sums.byteswap()
        keys = list(map(bytes.__add__, shapes, metadata))  # a record's nested lengths count its metadata
        distinct = set(keys)
        for key in distinct.difference(self._shapes):  # each new one once, not per row
            self._shape_tag(key)
        numbers = _steps(steps)
        if masked == sums and tuple(map(_HEADERS.__getitem__, sizes)) == headers and all(map(self._shapes.__getitem__, distinct)):
            scalars += zip(map(self._shapes.__getitem__, keys), numbers, _numbers("f", values), _numbers("d", walls), strict=True)
            self._claim(distinct)
            self.fast += len(rows)
            return pos + sum(sizes) + (HEADER_SIZE + FOOTER_SIZE) * len(rows), gap, len(rows)
        taken = 0
        for index, size in enumerate(sizes):
            after = pos + HEADER_SIZE + size + FOOTER_SIZE
            key = keys[index]
            tag = self._shapes.get(key)
            if tag is None:  # a record read by `_slow` gave a tag another plugin
                tag = self._shape_tag(key)
            if masked[index] == sums[index] and headers[index] == _HEADERS[size] and tag:
                scalars.append((tag, numbers[index], _FLOAT.unpack(values[index])[0], _DOUBLE.unpack(walls[index])[0]))
                self._claim((key,))
                pos, taken = after, taken + 1
                self.fast += 1
                continue
            resume, counted = self._slow(data, pos, buffer, base, scalars)
            taken += counted
            if resume == pos:
                return pos, True, taken  # its header claims more bytes than are written: scan waits there
            if resume != after:
                return resume, False, taken  # framing differs from the rows (a damaged length): search again there
            pos = resume
        return pos, gap, taken

    def _slow(self, data: bytes, pos: int, buffer: RecordBuffer, base: int, scalars: list[Scalar]) -> tuple[int, int]:
        """The record at `pos` through RecordBuffer.step and protobuf: (where the next starts, records
        taken). `pos` back means the record is not all written yet; damage is recorded on the buffer."""
        body, after = buffer.step(data, pos, base)
        if body is None:
            return after, 0
        decoded = self.decode_record(body)
        if decoded is None:
            buffer.damage.append(Damage(base + pos, NOT_AN_EVENT))
        else:
            scalars += decoded
        return after, 1

    def decode(self, records: list[bytes]) -> list[Scalar]:
        """The scalars in record payloads; payloads that are no valid Event are counted in `undecodable`."""
        scalars: list[Scalar] = []
        for data in records:
            scalars += self.decode_record(data) or []
        return scalars

    def decode_record(self, data: bytes) -> list[Scalar] | None:
        """The scalars in one record's payload, or None when its bytes are no valid Event.

        The CRC says the bytes are as written, not that they are an Event: a
        record of another format, or nested bytes (a value's tensor or metadata,
        parsed only on demand) that are malformed protobuf. Such a record's
        scalars are not shown (none of them: never half an event), and it never
        ends the tail; the caller notes it as damage at its offset."""
        try:
            return self._decode(data)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError (its class depends on the backend), struct.error, RecursionError on hostile nesting
            self.undecodable += 1
            return None

    def _decode(self, data: bytes) -> list[Scalar]:
        scalars: list[Scalar] = []
        event = Event.FromString(data)
        values = event.summary.value
        if not values:
            return scalars
        step = event.step
        wall_time = event.wall_time
        short_head, long_head = _FLOAT_HEADS
        for value in values:
            tag = value.tag
            if value.metadata:
                self._learn(tag, value.metadata)
            tensor = value.tensor
            size = len(tensor)
            if tag not in self.not_scalars and ((size == 8 and tensor.startswith(short_head)) or (size == 10 and tensor.startswith(long_head))):
                scalars.append((tag, step, _FLOAT.unpack_from(tensor, size - 4)[0], wall_time))
                continue
            number = self._other(value, tag, tensor)
            if number is not None:
                scalars.append((tag, step, number, wall_time))
        return scalars

    def _learn(self, tag: str, metadata: bytes) -> None:
        """A tag's plugin, from its first metadata only, as TensorBoard's EventAccumulator keeps it:
        TF2 repeats the metadata in every event, and parsing it again would decide nothing."""
        if tag in self.plugins:
            return
        plugin = SummaryMetadata.FromString(metadata).plugin_data.plugin_name
        self.plugins[tag] = plugin
        if plugin not in _SCALAR_PLUGINS:
            self.not_scalars.add(tag)
            self._shapes.clear()

    def _shape_tag(self, key: bytes) -> str:
        """The tag in a row's shape and metadata groups (`summary{value{tag, tensor head}}` around
        the tag, then one of `_SCALAR_METADATA`), or "" when its plugin is not scalars or its nested
        lengths are not those of exactly that layout (then protobuf decides what it is). Checked
        once per distinct tag and metadata, then cached."""
        metadata = next(suffix for suffix in _SCALAR_METADATA if key.endswith(suffix))
        shape = key[: len(key) - len(metadata)]
        size = shape[5]
        head = _TENSOR_HEADS.get(shape[6 + size :])
        ok = head is not None and shape[3] == size + head + 4 + len(metadata) and shape[1] == shape[3] + 2
        tag = _utf8(shape[6 : 6 + size]) if ok else ""
        self._shapes[key] = name = "" if tag in self.not_scalars else tag
        return name

    def _claim(self, taken: Iterable[bytes]) -> None:
        """Taken rows whose metadata names the scalars plugin give a new tag to it, as `_learn`
        does for the same record on the general path (a tag's first metadata decides)."""
        for key in taken:
            if key.endswith(_CLAIMS):
                self.plugins.setdefault(self._shapes[key], "scalars")

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


_DOUBLE = _CONTENT[2]
# Lane masks for the big-integer arithmetic below: one 64-bit lane per row of a window.
_LANES = WINDOW // (HEADER_SIZE + 25 + FOOTER_SIZE) + 1  # the smallest row: a 25-byte body


def _lanes(value: int) -> int:
    return int.from_bytes(value.to_bytes(8, "little") * _LANES, "little")


_ROTATE_LOW, _ROTATE_HIGH, _DELTAS, _LOW32 = (_lanes(mask) for mask in (0x1FFFF, 0xFFFE0000, _MASK_DELTA, 0xFFFFFFFF))
_VARINT_BITS = tuple((shift, _lanes(0x7F << 7 * shift)) for shift in range(8))
_crc32c = google_crc32c.value
_SWAP = sys.byteorder != "little"
assert array("I").itemsize == 4  # the data CRCs are read as one array


def _masked_crcs(bodies: tuple[bytes, ...]) -> array[int]:
    """Each body's masked CRC (`masked_crc`), as 64-bit lanes. Rotating and adding per row in
    Python costs more than the CRCs themselves, so every lane is done at once: the CRCs
    become one big integer, rotated, offset and masked with a few whole-integer operations
    (64-bit lanes leave room for the carry, which the last mask drops)."""
    crcs = array("Q", map(_crc32c, bodies))
    if _SWAP:
        crcs.byteswap()
    lanes = int.from_bytes(crcs, "little")
    deltas = _DELTAS >> 64 * (_LANES - len(crcs))  # one per row: every lane of _DELTAS is the same
    lanes = ((((lanes >> 15) & _ROTATE_LOW) | ((lanes << 17) & _ROTATE_HIGH)) + deltas) & _LOW32
    masked = array("Q", lanes.to_bytes(8 * len(crcs), "little"))
    if _SWAP:
        masked.byteswap()
    return masked


def _steps(raws: tuple[bytes, ...]) -> list[int]:
    """The steps' varints (b"" for 0), decoded at once: each padded to a 64-bit lane, then
    its 7-bit groups gathered with one shift and mask per group over all lanes (a group's
    bits never leave their lane), instead of a loop per row."""
    lanes = int.from_bytes(b"".join(map(bytes.ljust, raws, repeat(8, len(raws)), repeat(b"\x00", len(raws)))), "little")
    steps = 0
    for shift, mask in _VARINT_BITS:
        steps |= (lanes >> shift) & mask
    numbers = array("Q", steps.to_bytes(8 * len(raws), "little"))
    if _SWAP:
        numbers.byteswap()
    return numbers.tolist()


def _numbers(typecode: str, parts: tuple[bytes, ...]) -> list[Any]:
    """Little-endian numbers, one per part, decoded in one call rather than one unpack each."""
    numbers = array(typecode, b"".join(parts))
    if _SWAP:
        numbers.byteswap()
    return numbers.tolist()


def _utf8(raw: bytes) -> str:
    """A tag's text, or "" when it is not UTF-8: protobuf refuses such a string field, so the
    record goes to it and is reported as it would be there."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""


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

"""Record framing read incrementally: split writes, a half-written end, flipped bytes, hostile bytes."""

from __future__ import annotations

import itertools
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl.watch.records import RecordBuffer, frame, masked_crc

PAYLOADS = [b"first", b"", b"x" * 300, bytes(range(256)), b"last"]
FILE = b"".join(frame(p) for p in PAYLOADS)


def test_known_crc() -> None:
    # The masked CRC of TFRecord's empty header length, as TensorFlow writes it.
    assert masked_crc(struct.pack("<Q", 0)) == struct.unpack("<I", frame(b"")[8:12])[0]


@given(st.lists(st.integers(min_value=0, max_value=len(FILE)), max_size=12))
def test_any_split_into_writes_gives_every_record_once_in_order(cuts: list[int]) -> None:
    points = sorted({0, len(FILE), *cuts})
    reader = RecordBuffer()
    got: list[bytes] = []
    for start, end in itertools.pairwise(points):
        got += reader.feed(FILE[start:end])
    assert got == PAYLOADS
    assert reader.pending == b"" and reader.damage == [] and reader.offset == len(FILE)


def test_a_half_written_record_waits_for_its_end() -> None:
    reader = RecordBuffer()
    cut = len(frame(b"first")) + 5
    assert reader.feed(FILE[:cut]) == [b"first"]
    assert reader.consumed == len(frame(b"first")) and reader.damage == []
    assert reader.feed(FILE[cut:]) == PAYLOADS[1:]


def test_a_flipped_data_byte_skips_that_record_only() -> None:
    damaged = bytearray(FILE)
    start = len(frame(b"first")) + len(frame(b""))  # the 300-byte record
    damaged[start + 12 + 100] ^= 0x01
    reader = RecordBuffer()
    assert reader.feed(bytes(damaged)) == [b"first", b"", bytes(range(256)), b"last"]
    assert [(d.offset, d.reason) for d in reader.damage] == [(start, "record data fails its CRC; skipped")]


def test_a_flipped_length_byte_resyncs_at_the_next_record() -> None:
    damaged = bytearray(FILE)
    start = len(frame(b"first")) + len(frame(b""))
    damaged[start + 2] ^= 0x40  # the length now claims 16 MB
    reader = RecordBuffer()
    got = reader.feed(bytes(damaged))
    assert got == [b"first", b"", bytes(range(256)), b"last"]
    assert len(reader.damage) == 1 and reader.damage[0].offset == start and "header" in reader.damage[0].reason


@settings(max_examples=300)
@given(st.binary(max_size=2000), st.integers(min_value=1, max_value=64))
def test_hostile_bytes_never_raise_and_yield_only_checked_records(data: bytes, step: int) -> None:
    reader = RecordBuffer()
    got: list[bytes] = []
    for start in range(0, len(data), step):
        got += reader.feed(data[start : start + step])
    assert reader.consumed + len(reader.pending) == len(data)
    for record in got:
        assert frame(record) in data


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=600), st.text(max_size=300))
def test_hostile_files_in_a_model_dir_never_crash_the_tail(tmp_path_factory: object, events: bytes, state: str) -> None:
    """Any bytes in an event file and any text in a checkpoint state file: warnings at most."""
    from tpuctl.watch.sources import LocalSource
    from tpuctl.watch.tailer import Tailer

    folder = tmp_path_factory.mktemp("run")  # type: ignore[attr-defined]
    (folder / "events.out.tfevents.x").write_bytes(events)
    (folder / "checkpoint").write_text(state, encoding="utf-8", errors="surrogateescape")
    (folder / "ckpt-1.index").write_bytes(b"")
    update = Tailer(LocalSource(str(folder))).poll()
    for damage in update.damage:
        assert "\n" not in damage.reason

"""The tail's parsers under hostile bytes: skipping damage at disk speed, and fuzzing every parser.

The fuzz targets at the bottom run with modest example counts here; the long run
(>= 10,000 examples each, with a hang alarm) is `benchmarks/tail_fuzz.py`, which
calls the same functions with TPUCTL_FUZZ_EXAMPLES set.
"""

from __future__ import annotations

import json
import math
import os
import random
import struct
import time
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2

from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.seconds import Seconds
from tpuctl.watch import board
from tpuctl.watch.events import Decoder
from tpuctl.watch.records import HEADER, HEADER_SIZE, MAX_RECORD, RecordBuffer, _bulk_resync, frame, masked_crc
from tpuctl.watch.sources import LocalSource
from tpuctl.watch.tailer import Tailer

EXAMPLES = int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def scalar(tag: str, step: int, value: float) -> bytes:
    tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
    entry = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    return frame(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[entry])).SerializeToString())


def reference_resync(data: bytes, start: int, end: int) -> int:
    """The byte-by-byte search the reader used before: the semantics the fast one must keep."""
    pos = start
    while pos + HEADER_SIZE <= end:
        length, crc = HEADER.unpack_from(data, pos)
        if length <= MAX_RECORD and masked_crc(data[pos : pos + 8]) == crc:
            return pos
        pos += 1
    return pos


# --- skipping damage at disk speed ----------------------------------------------------------


def _repeated(period: bytes, size: int) -> bytes:
    """`period` over and over, `size` bytes of it."""
    return (period * (size // len(period) + 1))[:size]


@pytest.mark.parametrize("kind", ["random", "zeros", "small int64s", "int32 pairs"])
def test_five_megabytes_of_damage_are_skipped_well_under_a_second(kind: str) -> None:
    size = 5 << 20
    if kind == "random":
        garbage = random.Random(3).randbytes(size)
    elif kind == "zeros":
        garbage = bytes(size)
    elif kind == "small int64s":  # i % 251 for i in 0, 1, ...: one period of 251, repeated
        garbage = _repeated(b"".join(struct.pack("<q", i) for i in range(251)), size)
    else:
        garbage = _repeated(b"".join(struct.pack("<ii", i, 0) for i in range(7)), size)
    data = scalar("loss", 1, 0.5) + garbage + scalar("loss", 2, 0.25)
    decoder, buffer = Decoder(), RecordBuffer()
    started = time.thread_time()  # this thread's CPU: the suite's other workers share the cores
    got = []
    for at in range(0, len(data), 4 << 20):  # as the tailer reads: 4 MB chunks
        got += decoder.scan(buffer, data[at : at + (4 << 20)])[0]
    took = time.thread_time() - started
    assert [(tag, step) for tag, step, _, _ in got] == [("loss", 1), ("loss", 2)]
    assert buffer.damage and buffer.pending == b""
    # Random damage and zeroed blocks: milliseconds. Small integers every 8 bytes make a candidate
    # header every 2 bytes, tested in bulk: about 0.2 s on an idle 2-core machine.
    assert took < (0.5 if kind in ("random", "zeros") else 0.8), f"{kind}: {took:.2f} s"


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """Garbage of the kinds that make candidate headers: zero runs, small integers, real headers, random bytes."""
    parts = draw(
        st.lists(
            st.one_of(
                st.binary(max_size=64),
                st.integers(0, 64).map(bytes),
                st.integers(0, 300).map(lambda n: struct.pack("<Q", n)),
                st.binary(max_size=40).map(frame),
                st.binary(max_size=40).map(lambda b: frame(b)[: HEADER_SIZE]),
            ),
            max_size=12,
        )
    )
    return b"".join(parts)


@settings(max_examples=400, deadline=None)
@given(damaged(), st.integers(0, 50))
def test_fast_resync_finds_exactly_what_the_byte_by_byte_search_found(data: bytes, start: int) -> None:
    start = min(start, len(data))
    assert RecordBuffer._resync(data, start, len(data)) == reference_resync(data, start, len(data))
    # The dense-garbage path on its own (the search above reaches it only after many candidates).
    expected = reference_resync(data, start, len(data))
    bulk = _bulk_resync(data, start, len(data) - HEADER_SIZE)
    assert (bulk if bulk >= 0 else max(start, len(data) - HEADER_SIZE + 1)) == expected


def test_five_megabytes_of_random_small_integers_are_skipped_in_under_a_second() -> None:
    """Issue 12: small integers every 4 or 8 bytes make a candidate header every few bytes and no
    two alike; the bulk filter tests them all at once (about 0.2 s on an idle 2-core machine)."""
    rng = random.Random(5)
    garbage = b"".join(struct.pack("<ii", rng.randrange(1 << 16), 0) for _ in range((5 << 20) // 8))
    data = scalar("loss", 1, 0.5) + garbage + scalar("loss", 2, 0.25)
    decoder, buffer = Decoder(), RecordBuffer()
    started = time.thread_time()  # this thread's CPU: the suite's other workers share the cores
    got = []
    for at in range(0, len(data), 4 << 20):
        got += decoder.scan(buffer, data[at : at + (4 << 20)])[0]
    took = time.thread_time() - started
    assert [(tag, step) for tag, step, _, _ in got] == [("loss", 1), ("loss", 2)]
    assert took < 1.0, f"{took:.2f} s"  # 5x the idle figure, in CPU time: a filter testing candidates one by one takes many seconds


# --- malformed protobuf inside a valid record ---------------------------------------------


def test_a_record_with_malformed_metadata_or_tensor_is_skipped_and_noted() -> None:
    from tests.standins.event_files import malformed_events

    data = scalar("loss", 1, 0.5) + b"".join(malformed_events()) + scalar("loss", 2, 0.25)
    decoder, buffer = Decoder(), RecordBuffer()
    scalars, records = decoder.scan(buffer, data)
    assert [s[:2] for s in scalars] == [("loss", 1), ("loss", 2)] and records == 5
    assert len(buffer.damage) == 3 and all("not a valid event" in d.reason for d in buffer.damage)


def test_the_launch_follower_survives_malformed_records_and_reports_them(tmp_path: Path) -> None:
    from tests.standins.event_files import malformed_events
    from tpuctl.watch.follower import Follower

    (tmp_path / "events.out.tfevents.1").write_bytes(scalar("loss", 1, 0.5) + b"".join(malformed_events()) + scalar("loss\x1b[2J", 2, 0.25))
    lines: list[str] = []
    follower = Follower(str(tmp_path), lines.append, interval=0.05)
    follower.poll()
    summary = follower.finish()
    assert "[tail] . loss step=1 value=0.5" in lines and sum("not a valid event" in line for line in lines) == 3
    assert all("\x1b" not in line for line in lines + summary)


# --- the Seconds option type ------------------------------------------------------------------


def test_seconds_accepts_finite_positive_and_refuses_the_rest() -> None:
    seconds = Seconds()
    assert seconds.convert("1.5", None, None) == 1.5 and seconds.convert(" 2 ", None, None) == 2.0
    for bad in ("nan", "inf", "-inf", "-1", "0", "1e300", "", "x", "1e400", "infinity"):
        with pytest.raises(click.BadParameter) as refused:
            seconds.convert(bad, None, None)
        assert "\n" not in refused.value.format_message()
    assert Seconds(0.0, 10.0, inclusive_minimum=True).convert("0", None, None) == 0.0


@FUZZ
@given(st.one_of(st.text(max_size=30), st.floats().map(repr), st.integers().map(str)))
def test_fuzz_seconds(text: str) -> None:
    try:
        value = Seconds().convert(text, None, None)
    except click.BadParameter as refused:
        assert "\n" not in refused.format_message()
        return
    assert math.isfinite(value) and 0 < value <= 7 * 24 * 3600


# --- fuzz targets (benchmarks/tail_fuzz.py runs these >= 10,000 times each) -----------------


def _real_bodies() -> list[bytes]:
    """Every record payload of the event files TensorFlow's writers made (tests/data/tfevents):
    scalars with their metadata, graphs, histograms, images, text."""
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "data" / "tfevents").glob("*.tfevents")):
        found += RecordBuffer().feed(path.read_bytes())
    return found


REAL_BODIES = _real_bodies()


@st.composite
def mutated_events(draw: st.DrawFn) -> bytes:
    """Valid framing around event bodies that are real events with bytes flipped, cut or inserted:
    the CRC checks pass, so every byte reaches the decoders. Half are records TensorFlow wrote."""
    records = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            body = bytearray(draw(st.sampled_from(REAL_BODIES)))
        else:
            body = bytearray(scalar(draw(st.text(max_size=12)), draw(st.integers(0, 2**40)), draw(st.floats(width=32)))[HEADER_SIZE:-4])
        for _ in range(draw(st.integers(0, 4))):
            at = draw(st.integers(0, max(0, len(body) - 1)))
            action = draw(st.sampled_from(["flip", "cut", "insert"]))
            if action == "flip" and body:
                body[at] ^= draw(st.integers(1, 255))
            elif action == "cut":
                del body[at : at + draw(st.integers(1, 8))]
            else:
                body[at:at] = draw(st.binary(min_size=1, max_size=8))
        records.append(frame(bytes(body)) if draw(st.booleans()) else draw(st.binary(max_size=30)))
    return b"".join(records)


def _every_output(update_source: Tailer) -> None:
    """Poll, then render every way the CLI does: strict JSON, one-line plain text, the live table."""
    shown = board.Board()
    for update in update_source.updates(last=True):
        shown.add(update)
        for line in board.json_text(update).splitlines():
            json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}"))
        for line in board.plain_lines(update) + board.damage_lines(update):
            assert line.isprintable(), line
    for row in shown.rows():
        assert all(cell.isprintable() for cell in row)


@FUZZ
@given(st.one_of(mutated_events(), st.binary(max_size=600)), st.integers(1, 64))
def test_fuzz_event_files(tmp_path_factory: pytest.TempPathFactory, data: bytes, cut: int) -> None:
    folder = tmp_path_factory.mktemp("run")
    events = folder / "events.out.tfevents.x"
    events.write_bytes(data[:cut])
    tailer = Tailer(LocalSource(str(folder)))
    _every_output(tailer)
    events.write_bytes(data)  # the rest arrives
    _every_output(tailer)


@FUZZ
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))), st.lists(st.text(max_size=20), max_size=3))
def test_fuzz_checkpoint_state_files(tmp_path_factory: pytest.TempPathFactory, state: str, names: list[str]) -> None:
    folder = tmp_path_factory.mktemp("ckpt")
    (folder / "checkpoint").write_text(state, encoding="utf-8", errors="surrogateescape")
    for name in names:
        clean = name.replace("/", "").replace("\x00", "")
        assume(clean not in ("", ".", ".."))
        try:
            (folder / f"{clean}.index").write_bytes(b"")
        except OSError:
            assume(False)  # a name this filesystem refuses (too long)
    _every_output(Tailer(LocalSource(str(folder))))


@FUZZ
@given(st.one_of(st.none(), st.text(max_size=40)), st.lists(st.text(max_size=20), max_size=5))
def test_fuzz_tag_filter(patterns: str | None, tags: list[str]) -> None:
    from tpuctl.cli.tail import parse_tags

    try:
        parsed = parse_tags(patterns)
    except TpuctlError as refused:
        assert "\n" not in str(refused) and refused.exit_code == 2
        return
    tailer = Tailer(LocalSource("."), parsed)
    for tag in tags:
        assert isinstance(tailer.wanted(tag), bool)

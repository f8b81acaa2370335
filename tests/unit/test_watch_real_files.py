"""The tail's reader on event files TensorFlow's own writers made (tests/data/tfevents/README.md).

The expected scalars come from TensorBoard's protos, not from tpuctl: a tag's plugin is
decided by its first metadata (as TensorBoard's EventAccumulator does), and a scalar is a
simple_value or a 0-d float tensor. TF 2.15 and 2.21 write the "scalars" plugin's metadata
in every scalar event; the bulk path must take those records, not hand them all to protobuf.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2

from tests.standins.event_files import DATA, bodies, expected
from tpuctl.watch.events import Decoder, Scalar
from tpuctl.watch.records import RecordBuffer, frame

FILES = sorted(DATA.glob("*.tfevents"))
REAL_BODIES = [body for path in FILES for body in RecordBuffer().feed(path.read_bytes())]


def test_the_fixtures_are_what_the_writers_write() -> None:
    """Every kind named in the README is here, and TF's scalars carry their plugin in every event."""
    names = {path.name for path in FILES}
    assert {"tf2.21-summary.tfevents", "tf2.15-summary.tfevents", "keras3-fit-train.tfevents", "tf-keras-fit-train.tfevents"} <= names
    tail = b"J\x0b\n\t\n\x07scalars"
    data = (DATA / "tf2.21-summary.tfevents").read_bytes()
    scalar_bodies = [body for body in bodies(data) if b"\n\x07scalars" in body]
    assert len(scalar_bodies) == 21 and all(body.endswith(tail) for body in scalar_bodies)


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_real_files_take_the_bulk_path_and_agree_with_tensorboard(path: Path) -> None:
    data = path.read_bytes()
    want, others, common = expected(data)
    decoder, buffer = Decoder(), RecordBuffer()
    scalars, records = decoder.scan(buffer, data)
    assert scalars == want and decoder.others == others
    assert records == len(bodies(data)) and not buffer.damage and buffer.pending == b""
    # Before the bulk path knew the metadata TF repeats in every event, it took none of these.
    assert common and decoder.fast == common
    general = Decoder()
    assert general.decode(RecordBuffer().feed(data)) == want and general.others == others


@pytest.mark.parametrize("cut", [1, 7, 50, 333])
def test_real_files_read_in_any_pieces_give_the_same_scalars(cut: int) -> None:
    """As a tail sees a file being written: every record split across reads waits for its end."""
    for path in FILES:
        data = path.read_bytes()
        decoder, buffer = Decoder(), RecordBuffer()
        got: list[Scalar] = []
        for start in range(0, len(data), cut):
            got += decoder.scan(buffer, data[start : start + cut])[0]
        assert got == expected(data)[0] and not buffer.damage and buffer.pending == b"", path.name


def test_damage_inside_a_real_run_is_reported_and_the_rest_read() -> None:
    """A flipped value byte (the data CRC fails) and a flipped length byte (the header fails),
    in the middle of the run of scalars TF 2.21 wrote."""
    data = (DATA / "tf2.21-summary.tfevents").read_bytes()
    records = [bytearray(frame(body)) for body in bodies(data)]
    records[3][-20] ^= 0x01
    records[6][5] ^= 0x01
    damaged = b"".join(records)
    decoder, buffer = Decoder(), RecordBuffer()
    scalars, _ = decoder.scan(buffer, damaged)
    want = expected(b"".join(bytes(r) for i, r in enumerate(records) if i not in (3, 6)))[0]
    assert scalars == want
    assert [d.offset for d in buffer.damage] == [sum(map(len, records[:i])) for i in (3, 6)]


def test_a_tag_first_claimed_by_another_plugin_stays_with_it() -> None:
    """TensorBoard keeps a tag's first metadata: a later event naming "scalars" for a tag a
    histogram claimed does not make it a scalar, on either path."""
    data = (DATA / "tf2.21-summary.tfevents").read_bytes()
    histogram = next(body for body in bodies(data) if b"histograms" in body)
    loss = next(body for body in bodies(data) if b"\n\x04loss" in body)
    parsed = event_pb2.Event.FromString(histogram)
    parsed.summary.value[0].tag = "loss"
    stream = frame(parsed.SerializeToString()) + frame(loss) * 3
    decoder = Decoder()
    scalars, records = decoder.scan(RecordBuffer(), stream)
    assert scalars == [] and records == 4 and decoder.others == {"histograms": 4}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_real_records_read_the_same_on_both_paths(data: st.DataObject) -> None:
    """Records TensorFlow wrote, bytes flipped inside valid CRCs: the bulk path takes only what
    protobuf would read the same way (same scalars, same records refused)."""
    stream = []
    for _ in range(data.draw(st.integers(1, 8))):
        body = bytearray(data.draw(st.sampled_from(REAL_BODIES)))
        for _ in range(data.draw(st.integers(0, 3))):
            at = data.draw(st.integers(0, len(body) - 1))
            body[at] ^= data.draw(st.integers(1, 255))
        stream.append(frame(bytes(body)))
    whole = b"".join(stream)
    bulk, general = Decoder(), Decoder()
    scalars, records = bulk.scan(RecordBuffer(), whole)
    assert records == len(stream)
    assert scalars == general.decode(RecordBuffer().feed(whole)) or _same_with_nan(scalars, general.decode(RecordBuffer().feed(whole)))
    assert bulk.others == general.others and bulk.undecodable == general.undecodable


def _same_with_nan(left: list[Scalar], right: list[Scalar]) -> bool:
    """Equal, NaN counting as equal to NaN (a flipped exponent byte makes one)."""
    if len(left) != len(right):
        return False
    numbers = [(x, y) for a, b in zip(left, right, strict=True) for x, y in zip(a[2:], b[2:], strict=True)]
    return all(a[:2] == b[:2] for a, b in zip(left, right, strict=True)) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in numbers)

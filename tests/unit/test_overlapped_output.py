"""OverlappedWriter: chunks arrive whole and in order, and a failed write is not lost."""

from __future__ import annotations

import os
import threading

import pytest

from tpuctl.watch.overlapped_output import OverlappedWriter


def test_chunks_reach_a_pipe_in_order_while_the_reader_is_slow() -> None:
    read_end, write_end = os.pipe()
    chunks = [bytes([65 + n % 26]) * (200_000 + n) for n in range(6)]  # each far more than a pipe holds
    received = bytearray()

    def drain() -> None:
        while data := os.read(read_end, 1 << 16):
            received.extend(data)

    reader = threading.Thread(target=drain)
    reader.start()
    with open(write_end, "wb", buffering=0) as out:
        writer = OverlappedWriter(out)
        for chunk in chunks:
            writer.write(chunk)
        writer.finish()
    reader.join(timeout=10)
    os.close(read_end)
    assert bytes(received) == b"".join(chunks)


def test_a_write_to_a_closed_pipe_is_raised_by_the_next_call() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "wb", buffering=0) as out:
        writer = OverlappedWriter(out)
        writer.write(b"x" * 10)  # fails on its thread: nobody reads
        with pytest.raises(BrokenPipeError):
            writer.finish()
        writer.finish()  # said once, then clear
        writer.write(b"y")
        with pytest.raises(BrokenPipeError):
            writer.write(b"z")

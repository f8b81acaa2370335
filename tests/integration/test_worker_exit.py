"""A worker's exit (tpuctl/runtime/__main__.py): the script's leftovers are flushed and finalized as at a plain
exit, and the collector's shutdown passes over TensorFlow's objects are skipped.

One real worker; the script leaves what scripts leave: an unflushed summary writer, one held in a reference cycle,
an unclosed tf.io.gfile file, a cyclic object whose finalizer writes a file.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf


def records(path: Path) -> int:
    """TFRecord frames in an event file: length (8), its CRC (4), data, data CRC (4)."""
    data, offset, count = path.read_bytes(), 0, 0
    while offset + 12 <= len(data):
        offset += 16 + struct.unpack("<Q", data[offset : offset + 8])[0]
        count += 1
    return count


def test_a_scripts_open_writers_and_cyclic_garbage_are_flushed_and_finalized_and_the_rest_left_frozen(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = run_tpuctl("launch", "--strategy", "none", "--log-dir", str(tmp_path / "logs"), str(SCRIPTS / "exit_leftovers.py"), str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    [events] = (out / "events").glob("events.out.tfevents.*")
    [cycle] = (out / "events" / "cycle").glob("events.out.tfevents.*")
    assert (records(events), records(cycle)) == (51, 51)  # the file_version record, then 50 scalars each
    assert (out / "plain.txt").read_text() == "x" * 6000
    assert (out / "finalized").exists()  # collected once the script was done, before the freeze
    assert int((out / "freeze-count").read_text()) > 100_000  # TensorFlow's objects, left to the process's end

"""A worker's garbage collector: TensorFlow imported with it paused, then frozen (tpuctl/runtime/after_import.py),
and at the exit (tpuctl/runtime/__main__.py) the script's leftovers flushed and finalized as at a plain exit, the
collector's shutdown passes over TensorFlow's objects skipped.

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


def test_tensorflow_is_frozen_once_imported_and_a_scripts_leftovers_are_flushed_and_finalized_at_the_exit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = run_tpuctl("launch", "--strategy", "none", "--log-dir", str(tmp_path / "logs"), str(SCRIPTS / "exit_leftovers.py"), str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    enabled, frozen = (out / "after-import").read_text().split()
    assert enabled == "True" and int(frozen) > 100_000  # the script's own `import tensorflow`, then its code with the collector on
    [events] = (out / "events").glob("events.out.tfevents.*")
    [cycle] = (out / "events" / "cycle").glob("events.out.tfevents.*")
    assert (records(events), records(cycle)) == (51, 51)  # the file_version record, then 50 scalars each
    assert (out / "plain.txt").read_text() == "x" * 6000
    assert (out / "finalized").exists()  # collected once the script was done, before the freeze
    assert int((out / "freeze-count").read_text()) > 100_000  # TensorFlow's objects, left to the process's end

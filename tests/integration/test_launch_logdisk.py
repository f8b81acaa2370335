"""Faults beside the workers must not hang a launch or change its outcome (issue 12, "Hangs and lost status").

Every test runs the real CLI and real worker processes (`--strategy none`, so no
TensorFlow): a log file that cannot be written (a file-size limit gives EFBIG on
the way) and a `--tail` whose
reader fails on a bad event record. In each case the workers' output still reaches
the terminal in full, the launch ends on its own, and the exit status and the
failure summary are the first failed worker's.
"""

from __future__ import annotations

import json
import resource
import signal
import struct
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, tpuctl_cmd
from tpuctl.watch.records import frame

LINES = 3000  # ~320 KB of output: far more than a pipe holds (64 KiB), so a stalled reader blocks the worker
LOUD = f"""
import sys
for i in range({LINES}):
    print("x" * 100, i)
print("loud done", flush=True)
sys.exit(3)
"""


def _loud(tmp_path: Path) -> Path:
    script = tmp_path / "loud.py"
    script.write_text(LOUD)
    return script


def _small_files() -> None:
    """In the tpuctl process only: files may not grow past 32 KiB (as on a full disk, a write fails).

    SIGXFSZ is ignored so the write fails with EFBIG instead of killing the process.
    """
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, resource.RLIM_INFINITY))


def _assert_output_complete_and_failure_reported(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 3, result.stderr
    out_lines = result.stdout.splitlines()
    assert out_lines[-1] == "[worker:0] loud done"
    assert sum(1 for line in out_lines if line.startswith("[worker:0] xxxx")) == LINES
    assert "worker:0 on localhost failed: exit status 3" in result.stderr


def test_a_log_file_that_hits_the_file_size_limit_does_not_hang_the_launch(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    result = subprocess.run(
        tpuctl_cmd("launch", str(_loud(tmp_path)), "--strategy", "none", "--log-dir", str(log_dir)),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_small_files,
        cwd=ROOT,
    )
    _assert_output_complete_and_failure_reported(result)
    warnings = [line for line in result.stderr.splitlines() if "cannot write log" in line]
    assert len(warnings) == 1, result.stderr
    assert "worker-0.log" in warnings[0] and "File too large" in warnings[0]


def test_a_directory_where_the_log_file_goes_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Since issue 29 a --log-dir that already holds an attempt folder is refused up front (one folder,
    one launch); a log that fails at open once the launch runs is tests/unit/test_logs.py's and
    tests/unit/test_private_files.py's (a symlink planted at the log's path)."""
    log_dir = tmp_path / "logs"
    (log_dir / "attempt-1" / "worker-0.log").mkdir(parents=True)
    result = subprocess.run(
        tpuctl_cmd("launch", str(_loud(tmp_path)), "--strategy", "none", "--log-dir", str(log_dir), "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.startswith(f"Error: --log-dir {log_dir} already holds a launch (attempt-1)"), result.stderr
    assert "xxxx" not in result.stderr  # no worker started


def _bad_event_file(model_dir: Path) -> None:
    """One CRC-valid record whose summary value carries metadata bytes that are no protobuf."""

    def field(number: int, payload: bytes) -> bytes:
        size, varint = len(payload), b""
        while True:
            byte, size = size & 0x7F, size >> 7
            varint += bytes([byte | (0x80 if size else 0)])
            if not size:
                break
        return bytes([number << 3 | 2]) + varint + payload

    value = field(1, b"loss") + field(9, b"\xff\xff\xff\xff")
    event = bytes([1 << 3 | 1]) + struct.pack("<d", 1.0) + bytes([2 << 3]) + b"\x01" + field(5, field(1, value))
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "events.out.tfevents.1.bad").write_bytes(frame(event))


EXIT_7 = """
import time, sys
print("working", flush=True)
time.sleep(0.5)
print("boom", flush=True)
sys.exit(7)
"""


def test_launch_tail_on_a_bad_record_keeps_the_workers_exit_status_and_summary(tmp_path: Path) -> None:
    script = tmp_path / "exit7.py"
    script.write_text(EXIT_7)
    model_dir = tmp_path / "model"
    _bad_event_file(model_dir)
    result = subprocess.run(
        tpuctl_cmd(
            "launch", str(script), "--strategy", "none", "--model-dir", str(model_dir), "--tail", "--log-dir", str(tmp_path / "logs")
        ),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 7, result.stderr
    assert "worker:0 on localhost failed: exit status 7" in result.stderr
    assert "    boom" in result.stderr


# The tail side-car's thread dies mid-run (an exception no reader anticipated): the launch goes on.
_DYING_TAIL = """
import sys
from tpuctl.watch import follower

def poll(self, last=False):
    raise RuntimeError("tail exploded")

follower.Follower.poll = poll
follower.INTERVAL_S = 0.05
from tpuctl.cli import main
main(sys.argv[1:])
"""


def test_a_tail_thread_that_dies_mid_run_becomes_one_note(tmp_path: Path) -> None:
    script = tmp_path / "exit7.py"
    script.write_text(EXIT_7)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    argv = ["launch", str(script), "--strategy", "none", "--model-dir", str(model_dir), "--tail", "--json", "--log-dir", str(tmp_path / "logs")]
    result = subprocess.run([sys.executable, "-c", _DYING_TAIL, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 7, result.stderr
    record = json.loads(result.stdout)
    assert record["exit_code"] == 7 and record["failure"]["tail"][-1] == "boom"
    notes = [note for note in record["notes"] if "tail exploded" in note]
    assert len(notes) == 1, record["notes"]


def test_an_outcome_record_that_cannot_be_written_keeps_the_exit_status(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    script = tmp_path / "exit7.py"
    # A directory where the record goes, made while the launch runs (a --log-dir that holds one is
    # refused up front): as unwritable as a full disk, and portable.
    script.write_text(f"import os\nos.mkdir({str(log_dir / 'outcome.json')!r})\n" + EXIT_7)
    result = subprocess.run(
        tpuctl_cmd("launch", str(script), "--strategy", "none", "--log-dir", str(log_dir)), capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 7
    assert "worker:0 on localhost failed: exit status 7" in result.stderr
    assert [line for line in result.stderr.splitlines() if "cannot write" in line and "outcome.json" in line]

"""TensorFlow's C++ start-up chatter stays off the console, in the log file, and --verbose shows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf

# An absl C++ INFO line as a worker's console shows it: "[worker:0] I0000 00:00:1763….123   42 port.cc:153] …"
INFO = re.compile(r"^\[worker:0\] I\d{4} \d+:\d+:\d+\.\d+ +\d+ \S+\.cc:\d+\] ", re.MULTILINE)


def test_tensorflow_info_lines_are_in_the_log_not_on_the_console_unless_verbose(tmp_path: Path) -> None:
    # One worker under the default strategy: the runtime and the script both bring TF up.
    quiet = run_tpuctl("launch", str(SCRIPTS / "tf_constant.py"), "--workers", "1", "--log-dir", str(tmp_path / "quiet"))
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "[worker:0] constant: 7" in quiet.stdout
    assert "[worker:0] tpuctl: worker:0: default strategy" in quiet.stdout
    assert not INFO.search(quiet.stdout + quiet.stderr), quiet.stdout
    assert "absl::InitializeLog" not in quiet.stdout
    log = (tmp_path / "quiet" / "attempt-1" / "worker-0.log").read_text()
    folded = len(re.findall(r"^I\d{4} ", log, re.MULTILINE))
    assert folded >= 2, log  # the log keeps them: oneDNN, the CUDA stub, the CPU feature guard...
    assert "constant: 7" in log
    assert re.search(r"\d+ TensorFlow log lines folded from the console \(they are in the log files; --verbose shows them\)", quiet.stdout + quiet.stderr)

    loud = run_tpuctl("launch", str(SCRIPTS / "tf_constant.py"), "--workers", "1", "--verbose", "--log-dir", str(tmp_path / "loud"))
    assert loud.returncode == 0, loud.stdout + loud.stderr
    assert len(INFO.findall(loud.stdout)) >= 2, loud.stdout
    assert "[worker:0] constant: 7" in loud.stdout
    assert "folded from the console" not in loud.stdout + loud.stderr

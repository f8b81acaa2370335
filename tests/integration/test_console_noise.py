"""TensorFlow's C++ start-up chatter stays off the console, in the log file, and --verbose shows it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl

pytestmark = pytest.mark.tf

# An absl C++ INFO line as a worker's console shows it: "[worker:0] I0000 00:00:1763….123   42 port.cc:153] …"
INFO = re.compile(r"^\[worker:0\] I\d{4} \d+:\d+:\d+\.\d+ +\d+ \S+\.cc:\d+\] ", re.MULTILINE)


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One launch with the default console (no --verbose) of a one-worker TensorFlow script, and its log folder:
    the deprecation test and the quiet half of the chatter test read the same run."""
    logs = tmp_path_factory.mktemp("quiet")
    return run_tpuctl("launch", str(SCRIPTS / "deprecated_strategy.py"), "--workers", "1", "--log-dir", str(logs)), logs


@pytest.fixture(scope="module")
def loud(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One --verbose launch of a one-worker TensorFlow script: the loud half of the chatter test and the in-process
    cluster test read the same run (--verbose only stops the folding of TensorFlow's log lines)."""
    logs = tmp_path_factory.mktemp("loud")
    return run_tpuctl("launch", str(SCRIPTS / "ps_in_process.py"), "--workers", "1", "--verbose", "--log-dir", str(logs))


def test_tensorflow_info_lines_are_in_the_log_not_on_the_console_unless_verbose(
    quiet: tuple[subprocess.CompletedProcess[str], Path], loud: subprocess.CompletedProcess[str]
) -> None:
    # Any TensorFlow worker prints the chatter when TF loads; the quiet run is the deprecation test's script.
    done, logs = quiet
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[worker:0] replicas: 1" in done.stdout  # the script's own output
    assert "[worker:0] tpuctl: worker:0: MultiWorkerMirroredStrategy, 1 replica(s) in sync" in done.stdout  # tpuctl's own lines
    assert not INFO.search(done.stdout + done.stderr), done.stdout
    assert "absl::InitializeLog" not in done.stdout
    log = (logs / "attempt-1" / "worker-0.log").read_text()
    folded = len(re.findall(r"^I\d{4} ", log, re.MULTILINE))
    assert folded >= 2, log  # the log keeps them: oneDNN, the CUDA stub, the CPU feature guard...
    assert "replicas: 1" in log
    assert re.search(r"\d+ TensorFlow log lines folded from the console \(they are in the log files; --verbose shows them\)", done.stdout + done.stderr)

    assert loud.returncode == 0, loud.stdout + loud.stderr
    assert len(INFO.findall(loud.stdout)) >= 2, loud.stdout
    assert "[worker:0] variable on /job:ps/replica:0/task:0/device:CPU:0" in loud.stdout  # the script's own output
    assert "folded from the console" not in loud.stdout + loud.stderr


def test_a_tpu_script_where_there_is_no_tpu_fails_in_one_line(tmp_path: Path) -> None:
    """TensorFlow's TPU guide, launched plainly on a machine without a TPU: one line, not two chained tracebacks."""
    done = run_tpuctl("launch", str(SCRIPTS / "tpu_guide_start.py"), "--workers", "1", "--log-dir", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    hint = "no TPU here (TPUs not found in the cluster): try --rehearse v2-8 (a rehearsal on this machine's CPU) or --tpu NAME"
    assert f"[worker:0] tpuctl: error: {hint}" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr and "tpuctl/runtime" not in done.stdout
    assert f"tpuctl: cause: exit status 1: {hint}" in done.stderr


def test_deprecation_notices_name_the_scripts_line(quiet: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """TensorFlow counts frames up from its deprecation wrapper: the runtime's watch on strategy constructors sat between."""
    done, _ = quiet
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"WARNING:tensorflow:From {SCRIPTS / 'deprecated_strategy.py'}:4: _CollectiveAllReduceStrategyExperimental.__init__" in done.stdout
    assert "tpuctl/runtime" not in done.stdout


def test_a_script_with_its_own_in_process_cluster_is_told_tpuctls_workers_are_not_used(loud: subprocess.CompletedProcess[str]) -> None:
    done = loud
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[worker:0] variable on /job:ps/replica:0/task:0/device:CPU:0" in done.stdout
    assert (
        "[worker:0] tpuctl: worker:0: the script builds its own in-process cluster (line 15): it does not use the workers "
        "tpuctl started or their TF_CONFIG; run it as one process: --workers 1 --strategy none"
    ) in done.stdout

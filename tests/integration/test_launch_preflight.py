"""`tpuctl launch` with an interpreter that has no TensorFlow: one line naming `tpuctl doctor`, before any worker.

A real local launch, and a real one over ssh (tests/integration/sshd.py); the checks themselves are
tests/unit/test_preflight.py's.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.integration.sshd import SshCluster
from tests.standins.processes import python_without_tensorflow

# Writes a file, so that a worker that started cannot go unseen.
SCRIPT = "import os, sys\nopen(os.path.join(sys.argv[1], 'started-%d' % os.getpid()), 'w').close()\n"


def _script(tmp_path: Path) -> tuple[Path, Path]:
    script, started = tmp_path / "train.py", tmp_path / "started"
    script.write_text(SCRIPT)
    started.mkdir()
    return script, started


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("Error:")]
    return line


def test_a_local_launch_without_tensorflow_fails_before_any_worker(tmp_path: Path) -> None:
    python = python_without_tensorflow()
    script, started = _script(tmp_path)
    began = time.monotonic()
    result = run_tpuctl("launch", str(script), "--workers", "2", "--python", python, "--log-dir", str(tmp_path / "logs"), str(started), timeout=60)
    took = time.monotonic() - began
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == _error_line(result.stderr)  # the only line
    assert f"no TensorFlow for the workers' interpreter {python}" in result.stderr
    assert f"`tpuctl doctor --python {python}`" in result.stderr
    assert not list(started.iterdir()) and not (tmp_path / "logs" / "attempt-1").exists()
    assert took < 30, took  # it did not wait on a worker (none started: above); how fast it refuses is a speed
    # --no-preflight: the workers start, and the runtime's own error ends them as it did before preflight.
    result = run_tpuctl(
        "launch", str(script), "--workers", "2", "--python", python, "--no-preflight", "--log-dir", str(tmp_path / "again"), str(started), timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert f"TensorFlow is not installed for {python}" in result.stdout + result.stderr
    assert "tpuctl doctor" not in result.stderr


@pytest.mark.parametrize("given", [(), ("--rehearse", "v2-8", "--runtime", "local")], ids=["one worker", "rehearsal"])
def test_one_worker_without_tensorflow_under_no_preflight_ends_in_one_line(tmp_path: Path, given: tuple[str, ...]) -> None:
    # The refusal above suggests --no-preflight. One worker chooses its Keras without reading TensorFlow's version, so
    # it went on to build tpuctl's strategy and ended in that `import tensorflow`: tpuctl's own ModuleNotFoundError
    # traceback. An interpreter with nothing installed: a bare virtual environment.
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, capture_output=True, timeout=60)
    python = str(bare / "bin" / "python")
    script, started = _script(tmp_path)
    result = run_tpuctl("launch", str(script), "--python", python, "--no-preflight", *given, "--log-dir", str(tmp_path / "logs"), str(started), timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output and "ModuleNotFoundError" not in output, output
    worker = [line for line in result.stdout.splitlines() if line.startswith("[worker:0]")]
    said = "install tensorflow (or tensorflow-cpu) there, or pass --python an interpreter that has it"
    assert worker == [f"[worker:0] tpuctl: error: TensorFlow is not installed for {python} ({said})"]
    assert not list(started.iterdir())


def test_an_ssh_launch_without_tensorflow_fails_before_any_worker(cluster: SshCluster, tmp_path: Path) -> None:
    python = python_without_tensorflow()
    _, started = _script(tmp_path)
    result = run_tpuctl(
        "launch", "--ssh-config", str(cluster.config), "--hosts", "host1,host2", "--python", python,
        "--log-dir", str(tmp_path / "logs"), "train.py", str(started), cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = _error_line(result.stderr)
    assert "host1: no TensorFlow for" in line and "host2: no TensorFlow for" in line, line
    assert f"`tpuctl doctor --hosts host1,host2 --python {python}`" in line
    assert not list(started.iterdir()) and not list((tmp_path / "logs").rglob("worker-*"))

"""A preempted run resumes: real TensorFlow, two workers, tpuctl launch with default options.

A VM's shutdown sends SIGTERM; here the test sends it to both workers once epoch
2 is done. tpuctl.runtime.preemption_handler (TensorFlow's
PreemptionCheckpointHandler) makes both save at the same step and exit 42; the
launcher restarts them (a preemption spends --max-preemptions, not
--max-restarts, which defaults to 0), and the second attempt continues in epoch 3.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, alive, tpuctl_cmd

pytestmark = pytest.mark.tf

EXAMPLE = ROOT / "examples" / "train_preemptible.py"
STARTED = re.compile(r"^\[worker:(\d)\] worker \d \(pid (\d+)\): starting at epoch 1/")
# 6 steps of at least 0.2 s per epoch: SIGTERM sent when epoch 2 ends lands well inside epoch 3.
SIZE_ARGS = ("--epochs", "3", "--examples", "384", "--batch-size", "64")
SCRIPT_ARGS = (*SIZE_ARGS, "--step-time", "0.2")


def _worker_pid(text: str) -> int:
    """The pid a worker printed, checked against /proc: only the process running the example gets a signal."""
    pid = int(text)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert EXAMPLE.name.encode() in cmdline, cmdline
    return pid


def test_sigterm_after_epoch_2_resumes_at_epoch_3(tmp_path: Path) -> None:
    model_dir, log_dir = tmp_path / "model", tmp_path / "logs"
    argv = tpuctl_cmd("launch", str(EXAMPLE), "--workers", "2", "--model-dir", str(model_dir), "--log-dir", str(log_dir), "--", *SCRIPT_ARGS)
    stderr_path = tmp_path / "stderr"
    lines: list[str] = []
    pids: dict[str, int] = {}
    preempted_at: list[float] = []
    began = time.monotonic()
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if started := STARTED.match(lines[-1]):
                    pids[started.group(1)] = _worker_pid(started.group(2))
                if lines[-1].startswith("[worker:0] epoch 2/3:") and not preempted_at:
                    assert len(pids) == 2, lines
                    for pid in pids.values():
                        os.kill(pid, signal.SIGTERM)  # what a preempted VM's shutdown sends
                    preempted_at.append(time.monotonic())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            returncode = proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        reader.join(timeout=10)
    elapsed = time.monotonic() - began
    stdout, stderr_text = "\n".join(lines), stderr_path.read_text()
    assert preempted_at, stdout + stderr_text
    assert returncode == 0, stdout + stderr_text

    # The launcher saw a preemption, not a failure, and restarted every worker once.
    assert "worker:" in stderr_text and "was preempted (exit status 42); restarting all workers" in stderr_text, stderr_text
    assert "[worker:0] tpuctl: preemption: SIGTERM saves a checkpoint, then exit 42" in stdout
    outcome = json.loads((log_dir / "outcome.json").read_text())
    assert (outcome["exit_code"], outcome["attempts"], outcome["preemptions"]) == (0, 2, 1), outcome

    for worker in ("worker-0", "worker-1"):
        first = (log_dir / "attempt-1" / f"{worker}.log").read_text()
        second = (log_dir / "attempt-2" / f"{worker}.log").read_text()
        # Preempted inside epoch 3: it never finished there ...
        assert "epoch 2/3:" in first and "epoch 3/3:" not in first, first
        # ... and the second attempt resumed in epoch 3 from the checkpoint saved on SIGTERM, not at epoch 1.
        assert re.search(r"resuming at epoch 3/3, step [2-6]/6", second), second
        assert re.findall(r"^epoch (\d)/3:", second, re.M) == ["3"], second
        assert "trained 3 epochs with 2 replica(s)" in second
    # The workers of the preempted attempt are gone.
    assert not [pid for pid in pids.values() if alive(pid)]
    print(f"launch with one preemption: {elapsed:.1f}s (SIGTERM {preempted_at[0] - began:.1f}s in)")


@pytest.fixture
def gce_metadata() -> Iterator[str]:
    """A stand-in for a GCE VM's metadata server (what TensorFlow probes to tell it runs on Google Cloud): HOST:PORT."""

    class Metadata(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answers = {"/computeMetadata/v1/instance/hostname": b"vm.c.project.internal", "/computeMetadata/v1/instance/maintenance-event": b"NONE"}
            body = answers.get(self.path) if self.headers.get("Metadata-Flavor") == "Google" else None
            self.send_response(200 if body else 404)
            self.send_header("Metadata-Flavor", "Google")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_without_tpuctl_on_a_gce_cpu_vm_sigterm_saves_exits_42_and_a_rerun_resumes(tmp_path: Path, gce_metadata: str) -> None:
    """Plain `python script.py`, one process, on what TensorFlow takes for a GCE CPU VM (where its own handler
    would do nothing at all): tpuctl's handler still saves on SIGTERM and exits 42; running it again resumes."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH") and not k.startswith("TPUCTL_")}
    env.update(GCE_METADATA_IP=gce_metadata, PYTHONPATH=str(ROOT))
    argv = [sys.executable, str(EXAMPLE), "--model-dir", str(tmp_path / "model"), *SIZE_ARGS]
    proc = subprocess.Popen([*argv, "--step-time", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = []
        for line in proc.stdout:
            first.append(line)
            if line.startswith("epoch 2/3:"):
                proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 42, "".join(first) + stderr
    assert "tpuctl: preemption: SIGTERM saves a checkpoint, then exit 42 (TensorFlow's off-Cloud handling: its own does nothing on a GCE CPU VM)" in stderr
    assert "does not support usage with TPU or CPU device on GCP" not in stderr  # TensorFlow's inert mode
    assert not any(line.startswith("epoch 3/3:") for line in first)

    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"worker 0 \(pid \d+\): resuming at epoch 3/3, step [2-6]/6", again.stdout), again.stdout
    assert re.findall(r"^epoch (\d)/3:", again.stdout, re.M) == ["3"], again.stdout
    assert "trained 3 epochs with 1 replica(s)" in again.stdout

"""Real launches with the profiler: with --profiler-server every worker's server answers on 127.0.0.1 (and on
nothing else) while the run trains, at the address profilers.json records; `--profile START-END` leaves one profile
per worker; without --profiler-server no worker listens for one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import tpuctl_cmd
from tests.standins.processes import LOOPBACK_HEX, listening_addresses

pytestmark = pytest.mark.tf

# Keras fit, each step slowed a little so the run lasts long enough to be connected to.
SCRIPT = """
import sys, time
import numpy as np
import tensorflow as tf
steps, delay = int(sys.argv[1]), float(sys.argv[2])
x = np.random.default_rng(0).normal(size=(32 * steps, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(2)])
model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
class Slow(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(delay)
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[Slow()])
"""


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float) -> dict[str, object]:
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        if path.exists():
            found: dict[str, object] = json.loads(path.read_text())
            return found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"{path} was not written within {timeout}s")


def test_two_workers_serve_the_profiler_on_loopback_and_profile_their_window(tmp_path: Path) -> None:
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    logs, model = tmp_path / "logs", tmp_path / "model"
    # Independent workers (--strategy none): the window and the server are what this test is about;
    # tests/integration/test_profile_collectives.py profiles MultiWorkerMirroredStrategy.
    argv = tpuctl_cmd(
        "launch", str(script), "--workers", "2", "--strategy", "none", "--log-dir", str(logs), "--model-dir", str(model), "--profile", "2-4",
        "--profiler-server", "--", "40", "0.25",
    )  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            record = _wait_for(logs / "attempt-1" / "profilers.json", proc, 60)
            workers = record["workers"]
            assert isinstance(workers, list)
            assert [w["worker"] for w in workers] == ["worker:0", "worker:1"]
            assert record["profile_dir"] == str(model) and record["backend"] == "local"
            ends = time.monotonic() + 60
            for worker in workers:
                assert worker["host"] == "127.0.0.1" and os.path.isabs(worker["python"])
                while True:  # the server starts once the worker has imported TensorFlow
                    try:
                        socket.create_connection(("127.0.0.1", worker["port"]), timeout=5).close()
                        break
                    except ConnectionRefusedError:
                        assert time.monotonic() < ends and proc.poll() is None, f"nothing answers on {worker}"
                        time.sleep(0.2)
                assert listening_addresses(worker["port"]) <= LOOPBACK_HEX, worker
            output, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, output
    # Both servers took their free port: not a word about it (the taken port's line: the test after next).
    assert "profiler server could not take port" not in output and "profiler server did not start" not in output, output
    sessions = list((model / "plugins" / "profile").iterdir())
    assert len(sessions) == 1 and sessions[0].name.endswith("-attempt-1-steps-2-4"), sessions
    files = sorted(path.name for path in sessions[0].iterdir())
    assert len(files) == 2 and all(name.endswith(("_worker-0.xplane.pb", "_worker-1.xplane.pb")) for name in files), files
    assert all((sessions[0] / name).stat().st_size > 1000 for name in files)


def test_keras_3_steps_get_markers_in_the_window(tmp_path: Path) -> None:
    """Keras 3's fit marks no steps itself: the runtime's markers make xprof see exactly the window's steps."""
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data")
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    model = tmp_path / "model"
    argv = tpuctl_cmd("launch", str(script), "--log-dir", str(tmp_path / "logs"), "--model-dir", str(model), "--profile", "3-5", "--", "8", "0")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads((tmp_path / "logs" / "attempt-1" / "profilers.json").read_text())
    assert [set(w) for w in recorded["workers"]] == [{"worker", "host", "python"}]  # no server by default: no port
    [found] = list((model / "plugins" / "profile").glob("*/*.xplane.pb"))
    data, _ = convert.xspace_to_tool_data([str(found)], "input_pipeline_analyzer", {"use_saved_result": False})
    steps = [row["c"][0]["v"] for row in json.loads(data)[1]["rows"]]
    assert steps == ["train 3", "train 4", "train 5"]


def _start_server_on(port: int) -> subprocess.CompletedProcess[str]:
    """The runtime's profiler start in a real worker interpreter, TensorFlow imported as a script would."""
    code = f"from tpuctl.runtime.timeline import profiler; profiler.install_server({{'TPUCTL_PROFILER_PORT': '{port}'}}); import tensorflow"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_a_port_taken_before_the_server_binds_it_is_one_warning_line() -> None:
    """TensorFlow only logs a port it cannot bind and goes on without a server: the worker says so in one line
    (and trains on). A free port gives no word: the two workers of the first test above, which took theirs."""
    with socket.socket(socket.AF_INET6) as holder:
        holder.bind(("::", 0))
        holder.listen()
        port = holder.getsockname()[1]
        taken = _start_server_on(port)
    assert taken.returncode == 0, taken.stderr
    said = [line for line in taken.stderr.splitlines() if line.startswith("tpuctl:")]
    warning = f"tpuctl: warning: this worker's profiler server could not take port {port} (another process holds it)"
    assert said == [warning], taken.stderr

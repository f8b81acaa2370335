"""Everything after the launch on a Keras 3 run on JAX (issue 49): real JAX workers on CPU, two processes joined by
`keras.distribution.initialize()`, a DataParallel fit with TensorBoard, BackupAndRestore and ModelCheckpoint
(tests/integration/scripts/jax_fit.py).

One detached launch, restarted once from its BackupAndRestore backup, serves the tests that read it (`runs`, `logs`,
`stacks`, `profile`, the profiler server; then, once its processes have trained and saved, `stop`, and what the
stopped run leaves: `report`, `tail`, the console): a JAX worker's start (import, join, compile) is most of a run's
cost. One more launch hangs on purpose: `stacks` by
faulthandler, `--hang-timeout`, `attach`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCRIPTS, run_tpuctl, tpuctl_cmd, wait_for
from tests.standins.processes import LOOPBACK_HEX, listening_addresses
from tpuctl import endings
from tpuctl.profiling import verdict

pytest.importorskip("jax")  # the test extra installs it; without it there is no JAX run to test
pytestmark = pytest.mark.tf  # real worker processes (JAX, and TensorFlow for Keras' TensorBoard callback)

SCRIPT = SCRIPTS / "jax_fit.py"
VENV_BIN = str(Path(sys.executable).parent)  # py-spy's, for `tpuctl stacks`
WITHOUT_PY_SPY = "/usr/local/bin:/usr/bin:/bin"
JAX_PROFILE = b"jax_version"  # the metadata jax.profiler.start_trace sets in every profile it writes (jax/_src/profiler.py)


@dataclass(frozen=True)
class Run:
    run_id: str
    model: Path
    logs: Path
    out: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A detached 2-process JAX launch with --profiler-server and a --profile window, restarted once: every process
    leaves the first attempt after its first epoch (50 steps, backed up by BackupAndRestore), and the second resumes
    from that backup. Yielded once both processes of the second took 3 steps; they train until OUT/stop exists (every
    process stops at the same batch), save, and linger until stopped."""
    root = tmp_path_factory.mktemp("jax-run")
    out, model, logs = root / "out", root / "model", root / "logs"
    out.mkdir()
    (out / "linger").touch()
    (out / "restart").touch()
    env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "NO_COLOR": "1", "PATH": f"{VENV_BIN}:{WITHOUT_PY_SPY}"}
    started = run_tpuctl(
        "launch", "--detach", "--workers", "2", "--max-restarts", "1", "--profiler-server", "--profile", "4-8", "--model-dir", str(model),
        "--log-dir", str(logs), str(SCRIPT), str(model), str(out), "200", env=env, timeout=60,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    done = Run(started.stdout.strip(), model, logs, out, env)
    try:
        wait_for(lambda: all((out / f"ready-{i}").exists() for i in range(2)), timeout=120)
        yield done
    finally:
        _ended(done)


def _state(run: Run) -> str:
    listed = run_tpuctl("runs", "--json", env=run.env, timeout=30)
    return str(next(row["state"] for row in json.loads(listed.stdout) if row["run_id"] == run.run_id))


def _ended(run: Run) -> Run:
    """The run, once its processes trained to the end and were stopped (the tests that read what it leaves behind)."""
    (run.out / "stop").touch()
    wait_for(lambda: all((run.out / f"trained-{i}").exists() for i in range(2)) or _state(run) != endings.RUNNING, timeout=120)
    if _state(run) == endings.RUNNING:
        run_tpuctl("stop", run.run_id, env=run.env, timeout=120)
    return run


def test_the_run_is_listed_and_its_stacks_name_the_scripts_frames(run: Run) -> None:
    assert _state(run) == endings.RUNNING
    logged = run_tpuctl("logs", run.run_id, "--worker", "1", env=run.env, timeout=60)
    assert logged.returncode == 0 and "[worker:1] process 1 of 2 joined" in logged.stdout.splitlines(), logged
    shown = run_tpuctl("stacks", run.run_id, env=run.env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "worker:0" in shown.stdout and "worker:1" in shown.stdout and "jax_fit.py" in shown.stdout, shown.stdout
    assert _state(run) == endings.RUNNING, "tpuctl stacks stopped the run"


def test_each_process_serves_jaxs_profiler_on_loopback(run: Run, tmp_path: Path) -> None:
    """--profiler-server on a JAX run is JAX's server (TensorFlow's, which Keras' TensorBoard callback loads here, sees
    none of JAX's work): a capture through it, by xprof's own client, holds JAX's jitted calls."""
    client = pytest.importorskip("xprof.convert._pywrap_profiler_plugin")
    workers = json.loads((run.logs / "attempt-2" / "profilers.json").read_text())["workers"]  # the attempt that runs
    assert [w["worker"] for w in workers] == ["worker:0", "worker:1"] and all(w["host"] == "127.0.0.1" for w in workers), workers
    for worker in workers:
        folder = tmp_path / worker["worker"].replace(":", "-")
        client.trace(f"127.0.0.1:{worker['port']}", str(folder), "", True, 500, 3, {"host_tracer_level": 2, "python_tracer_level": 0})
        [captured] = list(folder.glob("plugins/profile/*/*.xplane.pb"))
        assert b"PjitFunction" in captured.read_bytes(), f"{worker}: the server's capture holds no JAX call"
        assert listening_addresses(worker["port"]) <= LOOPBACK_HEX, worker


def test_profile_captures_every_process_with_jaxs_profiler_and_a_verdict_that_guesses_nothing(run: Run) -> None:
    result = run_tpuctl("profile", run.run_id, "--duration", "1", "--json", env=run.env, timeout=120)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert sorted(answer["files"]) == ["worker:0", "worker:1"] and answer["missing"] == {}, answer
    for file in answer["files"].values():
        assert Path(file).parent.parent == run.model / "plugins" / "profile" and JAX_PROFILE in Path(file).read_bytes(), file
    found = answer["verdict"]
    if found is None:  # no xprof for this interpreter: the files are what there is to check
        return
    for numbers in found["workers"]:
        # Keras 3's steps get the runtime's markers on JAX too; xprof classifies no op of a JAX program on CPU, so the
        # cross-process all-reduce inside its steps is not told apart from compute: unknown, and no bound is named
        # (tests/unit/test_profile_shares.py).
        assert numbers["markers"] and numbers["steps"] > 0 and numbers["communication_pct"] is None, numbers
        assert f"{numbers['worker']}: {verdict.UNCLASSIFIED}." in found["notes"], found["notes"]
    assert _state(run) == endings.RUNNING


def test_the_profile_window_is_taken_by_jaxs_profiler_in_every_process(run: Run) -> None:
    wait_for(lambda: len(list(run.model.glob("plugins/profile/*-attempt-2-steps-4-8/*.xplane.pb"))) == 2, timeout=60)
    files = sorted(run.model.glob("plugins/profile/*-attempt-2-steps-4-8/*.xplane.pb"))
    assert [f.name.rsplit("_", 1)[1] for f in files] == ["worker-0.xplane.pb", "worker-1.xplane.pb"]
    assert all(JAX_PROFILE in f.read_bytes() for f in files)


def test_stop_ends_every_process_of_the_run(run: Run) -> None:
    (run.out / "stop").touch()
    wait_for(lambda: all((run.out / f"trained-{i}").exists() for i in range(2)), timeout=120)
    stopped = run_tpuctl("stop", run.run_id, env=run.env, timeout=120)
    assert stopped.returncode == 0 and f"run {run.run_id} stopped (exit 130)" in stopped.stdout + stopped.stderr, stopped
    listed = json.loads(run_tpuctl("runs", "--json", env=run.env, timeout=30).stdout)
    assert [(r["state"], r["exit_code"]) for r in listed if r["run_id"] == run.run_id] == [(endings.Kind.STOPPED.value, 130)], listed
    pids = [int((run.out / f"ready-{i}").read_text()) for i in range(2)]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], pids


def test_report_has_the_steps_checkpoints_and_restore_of_keras_under_jax(run: Run) -> None:
    ended = _ended(run)
    timeline = [json.loads(line) for line in (ended.logs / "timeline.jsonl").read_text().splitlines()]
    restored = {e["worker"] for e in timeline if e["event"] == "checkpoint_restore_end" and e["attempt"] == 2 and not e.get("failed")}
    assert restored == {"worker:0", "worker:1"}, timeline  # BackupAndRestore's load_weights as the second attempt began
    first = [e["step"] for e in timeline if e["event"] == "first_step" and e["attempt"] == 2]
    assert first == [51, 51], first  # the backup's 50 steps, then the first of this attempt
    steps = [e for e in timeline if e["event"] == "step" and e["worker"] == "worker:0"]
    trained = int((ended.out / "trained-0").read_text())
    assert steps and steps[-1]["step"] == trained, (steps, trained)  # the optimizer's own count, across the restart
    saves = {e["worker"] for e in timeline if e["event"] == "checkpoint_save_end" and not e.get("failed")}
    assert saves == {"worker:0", "worker:1"}  # ModelCheckpoint, BackupAndRestore and model.save, in every process
    shown = run_tpuctl("report", f"{ended.logs}/", "--json", env=ended.env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    categories = report["categories"]
    assert report["step_source"] == "keras" and categories["training steps"] > 0 and categories["checkpoint save"] > 0, report
    assert categories["checkpoint restore"] > 0 and categories["restart"] > 0 and categories.get("lost work", 0) == 0, report


def test_tail_reads_what_keras_tensorboard_callback_wrote_under_jax(run: Run) -> None:
    ended = _ended(run)
    shown = run_tpuctl("tail", str(ended.model), "--once", "--json", "--tags", "batch_loss,epoch_loss", env=ended.env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    scalars = [e for e in events if e["kind"] == "scalar"]
    batches = [e["step"] for e in scalars if e["tag"] == "batch_loss"]
    assert batches[:3] == [5, 10, 15] and all(e["run"] == "tb/train" for e in scalars), scalars[:5]  # process 0's, update_freq=5
    assert any(e["tag"] == "epoch_loss" for e in scalars)
    checkpoints = {e["file"] for e in events if e["kind"] == "checkpoint"}
    assert checkpoints == {"ckpt.weights.h5", "final.keras"}, events  # ModelCheckpoint's and model.save's, process 0's


def test_the_console_names_the_folded_lines_xla_not_tensorflow(run: Run) -> None:
    ended = _ended(run)
    console = (ended.logs / "console.log").read_text()
    assert "C++ (XLA, absl) log lines folded from the console" in console and "TensorFlow log line" not in console, console[-2000:]


def test_a_hung_process_shows_in_its_stacks_and_is_stopped_by_the_hang_timeout(tmp_path: Path) -> None:
    """Process 1 stops after its third batch; process 0 waits for it in the next step's all-reduce. `tpuctl stacks`
    takes them by each worker's faulthandler (no py-spy on PATH; the shared run's were py-spy's), then --hang-timeout
    stops the run, which `tpuctl attach` follows to its end and its exit status."""
    out, logs = tmp_path / "out", tmp_path / "logs"
    out.mkdir()
    (out / "hang-1").touch()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "NO_COLOR": "1", "PATH": WITHOUT_PY_SPY}
    argv = ("launch", "--detach", "--workers", "2", "--hang-timeout", "15", "--log-dir", str(logs), str(SCRIPT), str(tmp_path / "model"), str(out), "120")
    started = run_tpuctl(*argv, env=env, timeout=60)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for(lambda: (out / "ready-1").exists(), timeout=120)
    shown = run_tpuctl("stacks", run_id, env=env, timeout=60)
    assert shown.returncode == 0 and "wait_for_batch" in shown.stdout and "worker:0" in shown.stdout, shown
    began = time.monotonic()
    attached = subprocess.run(tpuctl_cmd("attach", run_id), capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)
    assert attached.returncode == 124 and time.monotonic() - began < 120, attached.stderr
    said = attached.stdout + attached.stderr
    assert "no new step was written for 15s (--hang-timeout)" in said and "wait_for_batch" in said, said
    dumps = sorted((logs / "attempt-1").glob("stacks-*/worker-1.txt"))
    assert dumps and all("most recent call first" in dump.read_text() for dump in dumps), dumps  # faulthandler's own words


def test_jaxs_server_starts_at_import_without_starting_jax_and_a_taken_port_is_one_warning() -> None:
    """Once `import jax` is done, before the script's keras.distribution.initialize(), which JAX refuses once its
    backends are up: the server must not bring them up (start_server(requires_backend=False))."""
    with socket.socket(socket.AF_INET6) as holder:
        holder.bind(("::", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = (
            f"from tpuctl.runtime.timeline import profiler; profiler.install_server({{'TPUCTL_PROFILER_PORT': '{port}', 'TPUCTL_FRAMEWORK': 'jax'}}); "
            "import jax; from jax._src import xla_bridge; print(sorted(xla_bridge._backends))"
        )
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done
    said = [line for line in done.stderr.splitlines() if line.startswith("tpuctl:")]
    assert said == [f"tpuctl: warning: this worker's profiler server could not take port {port} (another process holds it)"], done.stderr

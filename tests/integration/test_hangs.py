"""Hangs and stacks (issue 14): --hang-timeout, `tpuctl stacks`, SIGQUIT to a launch.

Real CLI, real worker processes (stdlib scripts with --strategy none, so no
TensorFlow: test_launch_tensorflow.py has the real-TF hang), and real sshd hosts
for the ssh backend. Stacks are taken both ways a host offers: py-spy (the
venv's, put on PATH) and the worker's own faulthandler (PATH without py-spy).
Each test gets its own state folder, so `tpuctl stacks` finds only its launch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, tpuctl_cmd, wait_for
from tests.standins.event_files import header_event, scalar_event

VENV_BIN = str(Path(sys.executable).parent)
WITHOUT_PY_SPY = "/usr/local/bin:/usr/bin:/bin"

# Workers 0 and 2 wait in one place, worker 1 in another: the odd one out.
STUCK = """
import os, time

def all_reduce_wait():
    time.sleep(600)

def wait_for_batch():
    time.sleep(600)

print("started", flush=True)
(wait_for_batch if os.environ["TPUCTL_WORKER_INDEX"] == "1" else all_reduce_wait)()
"""

# Every worker busy in the same function, printing now and then: no hang, just running.
BUSY = """
import time

def stuck_here():
    while True:
        print("tick", flush=True)
        time.sleep(0.5)

print("started", flush=True)
stuck_here()
"""


def _env(tmp_path: Path, path: str) -> dict[str, str]:
    return {**os.environ, "PATH": path, "XDG_STATE_HOME": str(tmp_path / "state"), "NO_COLOR": "1"}


def _tpuctl_tracebacks(stderr: str) -> list[str]:
    """Tracebacks of tpuctl's own: the workers', stopped by SIGINT, are tagged and expected."""
    return [line for line in stderr.splitlines() if line.startswith("Traceback")]


def _script(tmp_path: Path, name: str, text: str) -> Path:
    script = tmp_path / name
    script.write_text(text)
    return script


@pytest.mark.parametrize("path", [WITHOUT_PY_SPY, f"{VENV_BIN}:{WITHOUT_PY_SPY}"], ids=["faulthandler", "py-spy"])
def test_a_hang_shows_every_workers_stacks_names_the_odd_one_and_stops(tmp_path: Path, path: str) -> None:
    script = _script(tmp_path, "stuck.py", STUCK)
    logs = tmp_path / "logs"
    args = ["launch", str(script), "--workers", "3", "--strategy", "none", "--hang-timeout", "3", "--log-dir", str(logs), "--json"]
    started = time.monotonic()
    result = subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=90, cwd=ROOT, env=_env(tmp_path, path))
    assert not _tpuctl_tracebacks(result.stderr), result.stderr
    assert result.returncode == 124, result.stderr
    assert time.monotonic() - started < 60
    assert "no new step was written for 3s (--hang-timeout)" in result.stderr
    assert "wait_for_batch" in result.stderr and "all_reduce_wait" in result.stderr, result.stderr
    record = json.loads(result.stdout)
    assert record["exit_code"] == 124 and record["failure"]["worker"] == "worker:1", record
    dumps = logs / "attempt-1" / "stacks-1"
    assert "wait_for_batch" in (dumps / "worker-1.txt").read_text()
    assert "all_reduce_wait" in (dumps / "worker-0.txt").read_text()
    marker = "Process " if VENV_BIN in path else "most recent call first"
    assert marker in (dumps / "worker-1.txt").read_text(), "the dump came another way than this host offers"
    assert (logs / "stacks.txt").read_text() == (dumps / "view.txt").read_text()


def test_a_worker_that_only_writes_summaries_is_not_a_hang(tmp_path: Path) -> None:
    """No output at all, but a new step every 0.4 s in the model dir: progress, for 4 s past the timeout (4 s: a worker
    that starts slowly on a loaded machine has begun writing by then)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    records = [header_event(), *(scalar_event("loss", step, 1.0 / step) for step in range(1, 21))]
    (tmp_path / "records.json").write_text(json.dumps([r.hex() for r in records]))
    script = _script(
        tmp_path,
        "quiet.py",
        f"""
import json, time
records = [bytes.fromhex(r) for r in json.load(open({str(tmp_path / "records.json")!r}))]
with open({str(model_dir / "events.out.tfevents.1.quiet")!r}, "ab") as events:
    for record in records:
        events.write(record)
        events.flush()
        time.sleep(0.4)
""",
    )
    args = ["launch", str(script), "--strategy", "none", "--hang-timeout", "4", "--model-dir", str(model_dir), "--log-dir", str(tmp_path / "logs")]
    result = subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=90, cwd=ROOT, env=_env(tmp_path, WITHOUT_PY_SPY))
    assert result.returncode == 0, result.stderr
    assert "hang-timeout" not in result.stderr


def test_stacks_on_demand_leave_the_launch_running(tmp_path: Path, backend: list[str]) -> None:
    script = _script(tmp_path, "busy.py", BUSY)
    env = _env(tmp_path, WITHOUT_PY_SPY)
    logs = tmp_path / "logs"
    args = ["launch", str(script), "--workers", "2", "--strategy", "none", "--log-dir", str(logs), *backend]
    with open(tmp_path / "stderr", "wb") as err:
        launch = subprocess.Popen(tpuctl_cmd(*args), stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT)
    try:
        assert launch.stdout is not None
        seen = b""
        while seen.count(b"started") < 2:
            line = launch.stdout.readline()
            assert line, (tmp_path / "stderr").read_text()
            seen += line
        listed = subprocess.run(tpuctl_cmd("stacks", "--list"), capture_output=True, text=True, env=env, timeout=30)
        assert listed.returncode == 0 and str(launch.pid) in listed.stdout, listed
        shown = subprocess.run(tpuctl_cmd("stacks"), capture_output=True, text=True, env=env, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "worker:0" in shown.stdout and "worker:1" in shown.stdout and "stuck_here" in shown.stdout, shown.stdout
        assert launch.poll() is None, "tpuctl stacks stopped the launch"
        launch.send_signal(signal.SIGQUIT)  # Ctrl-\: the same view on the launch's own console
        wait_for(lambda: len(list((logs / "attempt-1").glob("stacks-*/view.txt"))) == 2, timeout=60)
        assert (tmp_path / "stderr").read_text().count("taking every worker's stacks on request") == 2
        assert launch.poll() is None
    finally:
        launch.send_signal(signal.SIGINT)
        launch.stdout.close()  # type: ignore[union-attr]
        assert launch.wait(timeout=60) == 130
    gone = subprocess.run(tpuctl_cmd("stacks"), capture_output=True, text=True, env=env, timeout=30)
    assert gone.returncode == 1 and gone.stderr.startswith("Error: no run of yours is running"), gone.stderr


@pytest.mark.tf
def test_a_worker_stuck_in_its_input_while_the_other_waits_in_a_collective(tmp_path: Path) -> None:
    """Real TensorFlow: faulthandler answers from worker 0 while it is blocked inside the collective."""
    from tests.conftest import SCRIPTS

    logs = tmp_path / "logs"
    args = ["launch", str(SCRIPTS / "collective_hang.py"), "--workers", "2", "--hang-timeout", "10", "--log-dir", str(logs), "--json"]
    result = subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=240, cwd=ROOT, env=_env(tmp_path, WITHOUT_PY_SPY))
    assert not _tpuctl_tracebacks(result.stderr), result.stderr[-3000:]
    assert result.returncode == 124, result.stderr[-3000:]
    dumps = logs / "attempt-1" / "stacks-1"
    stuck, waiting = (dumps / "worker-1.txt").read_text(), (dumps / "worker-0.txt").read_text()
    assert "wait_for_batch" in stuck
    assert "collective_hang.py" in waiting and "wait_for_batch" not in waiting  # in strategy.run, below the script's line
    assert "wait_for_batch" in result.stderr  # the view names where the odd worker is
    record = json.loads(result.stdout)
    assert record["failure"]["exit_code"] == 124


# Blocks twice before any step, printing once in between: two quiet spells; then ends by itself.
BLOCKED = """
import time

def wait_for_first_batch():
    time.sleep(6)

print("loading", flush=True)
wait_for_first_batch()
print("still loading", flush=True)
wait_for_first_batch()
"""


def test_quiet_before_the_first_step_gets_one_notice_per_spell_and_no_stop(tmp_path: Path) -> None:
    """No --hang-timeout: after --quiet-notice seconds with no output and no step, one line names where the
    workers are (their innermost frame, as `tpuctl stacks` shows it) and `tpuctl stacks`; the run goes on to its end."""
    script = _script(tmp_path, "blocked.py", BLOCKED)
    args = ["launch", str(script), "--workers", "2", "--strategy", "none", "--quiet-notice", "2", "--log-dir", str(tmp_path / "logs")]
    result = subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=90, cwd=ROOT, env=_env(tmp_path, WITHOUT_PY_SPY))
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if "(--quiet-notice)" in line]
    assert len(notices) == 2, result.stderr
    run_id = json.loads((tmp_path / "logs" / "run.json").read_text())["run_id"]
    for line in notices:
        assert line == (
            "tpuctl: no step yet, and no worker printed anything for 2s (--quiet-notice): worker:0, worker:1 at wait_for_first_batch "
            f"(blocked.py:5); `tpuctl stacks {run_id}` shows every worker's stacks (nothing was stopped; --hang-timeout stops a run that hangs)"
        ), line
    assert "still loading" in result.stdout


def test_quiet_after_a_step_gets_no_notice(tmp_path: Path) -> None:
    """A step in --model-dir (a summary written before the quiet spell): training has begun, so silence is its own business."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "records.json").write_text(json.dumps([r.hex() for r in (header_event(), scalar_event("loss", 1, 0.5))]))
    script = _script(
        tmp_path,
        "stepped.py",
        f"""
import json, time
with open({str(model_dir / "events.out.tfevents.1.stepped")!r}, "ab") as events:
    for record in json.load(open({str(tmp_path / "records.json")!r})):
        events.write(bytes.fromhex(record))
time.sleep(6)
""",
    )
    args = ["launch", str(script), "--strategy", "none", "--quiet-notice", "2", "--model-dir", str(model_dir), "--log-dir", str(tmp_path / "logs")]
    result = subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=90, cwd=ROOT, env=_env(tmp_path, WITHOUT_PY_SPY))
    assert result.returncode == 0, result.stderr
    assert "quiet-notice" not in result.stderr

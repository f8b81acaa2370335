"""The supervisor's process contract with real worker processes (no TensorFlow: --strategy none)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, alive, describe, read_pids, run_tpuctl, tpuctl_cmd, wait_for

HOSTILE = ["a b", "it's", 'say "hi"', ";", "&& rm -rf /", "$HOME", "`id`", "ünïcødé ✓", "--workers", "-x", "--", "", "\\n"]


def test_hostile_argv_reaches_every_worker_byte_for_byte(tmp_path: Path) -> None:
    script = SCRIPTS / "argv_dump.py"
    result = run_tpuctl(
        "launch", "--workers", "2", "--strategy", "none", "--log-dir", str(tmp_path / "logs"),
        str(script), "--", *HOSTILE, env={**os.environ, "ARGV_OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    for index in ("0", "1"):
        seen = json.loads((tmp_path / f"{index}.json").read_text(encoding="utf-8"))
        assert seen["argv"] == [str(script), *HOSTILE]
        assert seen["env"]["TPUCTL_WORKER_INDEX"] == index
        assert seen["env"]["TPUCTL_NUM_WORKERS"] == "2"
        tf_config = json.loads(seen["env"]["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": int(index)}
        assert len(tf_config["cluster"]["worker"]) == 2


def test_options_after_script_and_unknown_options_pass_through(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "argv_dump.py"), "--epochs", "3", "--workers", "2", "--strategy", "none",
        "--log-dir", str(tmp_path / "logs"), "--lr=0.1", env={**os.environ, "ARGV_OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "1.json").read_text())["argv"][1:] == ["--epochs", "3", "--lr=0.1"]


def test_crash_stops_the_others_and_leaves_no_process(tmp_path: Path, pid_dir: Path) -> None:
    started = time.monotonic()
    result = run_tpuctl(
        "launch", str(SCRIPTS / "crash_or_hang.py"), "--workers", "3", "--strategy", "none",
        "--log-dir", str(tmp_path / "logs"),
        env={**os.environ, "PID_DIR": str(pid_dir), "CRASH_STATUS": "7"}, timeout=60,
    )
    assert time.monotonic() - started < 20
    assert result.returncode == 7
    assert "worker:1 on localhost failed: exit status 7" in result.stderr
    assert "worker 1 about to crash" in result.stderr  # the root-cause summary shows its last lines
    pids = read_pids(pid_dir)
    assert len(pids) == 6
    wait_for(lambda: not any(alive(p) for p in pids), timeout=5)
    logs = tmp_path / "logs" / "attempt-1"
    assert "about to crash" in (logs / "worker-1.log").read_text()
    assert (logs / "worker-0.log").exists() and (logs / "plan.json").exists()


def _start_hanging_launch(tmp_path: Path, pid_dir: Path, *, nohup: bool = False) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        tpuctl_cmd("launch", str(SCRIPTS / "crash_or_hang.py"), "--workers", "2", "--strategy", "none",
                   "--log-dir", str(tmp_path / "logs")),
        env={**os.environ, "PID_DIR": str(pid_dir)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # what `nohup` does before it execs the command: SIGHUP ignored
        preexec_fn=(lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if nohup else None,
    )
    wait_for(lambda: len(read_pids(pid_dir)) == 4)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_tears_down_and_exits_130(tmp_path: Path, pid_dir: Path, sig: signal.Signals) -> None:
    proc = _start_hanging_launch(tmp_path, pid_dir)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    pids = read_pids(pid_dir)
    wait_for(lambda: not any(alive(p) for p in pids), timeout=5)


def test_nohup_keeps_the_run_through_a_hangup(tmp_path: Path, pid_dir: Path) -> None:
    """`nohup tpuctl launch ... &`: the terminal's hangup must not stop the run, which then ends well (issue 30)."""
    release = tmp_path / "release"
    proc = subprocess.Popen(
        tpuctl_cmd("launch", str(SCRIPTS / "wait_for_release.py"), "--workers", "2", "--strategy", "none", "--log-dir", str(tmp_path / "logs")),
        env={**os.environ, "PID_DIR": str(pid_dir), "RELEASE": str(release)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what `nohup` does before it execs the command
    )
    wait_for(lambda: len(read_pids(pid_dir)) == 2)
    proc.send_signal(signal.SIGHUP)
    time.sleep(1)
    assert proc.poll() is None and all(alive(p) for p in read_pids(pid_dir))
    release.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.count("released") == 2 and "SIGHUP" not in err
    assert json.loads((tmp_path / "logs" / "outcome.json").read_text())["exit_code"] == 0


def test_workers_die_with_a_killed_launcher(tmp_path: Path, pid_dir: Path) -> None:
    proc = _start_hanging_launch(tmp_path, pid_dir)
    proc.kill()
    proc.communicate(timeout=30)
    pids = read_pids(pid_dir)
    try:
        wait_for(lambda: not any(alive(p) for p in pids), timeout=10)
    except AssertionError:
        raise AssertionError("survivors: " + "; ".join(describe(p) for p in pids if alive(p))) from None


def test_start_timeout_names_the_worker_that_never_came_up(tmp_path: Path, pid_dir: Path) -> None:
    # A --python from "another environment" that never starts worker 1.
    wrapper = tmp_path / "slow-python"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$TPUCTL_WORKER_INDEX" = 1 ]; then exec sleep 600; fi\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    result = run_tpuctl(
        "launch", str(SCRIPTS / "crash_or_hang.py"), "--workers", "2", "--strategy", "none",
        "--python", str(wrapper), "--start-timeout", "3", "--log-dir", str(tmp_path / "logs"),
        env={**os.environ, "PID_DIR": str(pid_dir)}, timeout=60,
    )
    assert result.returncode == 1
    assert "worker:1 did not start within 3s" in result.stderr
    pids = read_pids(pid_dir)
    wait_for(lambda: not any(alive(p) for p in pids), timeout=5)


def test_restart_runs_a_new_attempt_with_new_logs(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "fail_first_attempt.py"), "--workers", "2", "--strategy", "none",
        "--max-restarts", "2", "--log-dir", str(tmp_path / "logs"), "--json",
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    assert outcome["attempts"] == 2 and outcome["failure"] is None
    assert "restarting all workers (attempt 2/3)" in result.stderr
    assert "attempt 1 worker 0" in (tmp_path / "logs" / "attempt-1" / "worker-0.log").read_text()
    assert "attempt 2 worker 0" in (tmp_path / "logs" / "attempt-2" / "worker-0.log").read_text()


def test_failure_after_last_restart_reports_exit_status(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "fail_first_attempt.py"), "--workers", "2", "--strategy", "none",
        "--log-dir", str(tmp_path / "logs"), "--json",
    )
    assert result.returncode == 5
    outcome = json.loads(result.stdout.splitlines()[-1])
    assert outcome["failure"]["worker"] == "worker:0"
    assert outcome["failure"]["status"] == "exit status 5"


def test_piped_output_is_plain_and_tagged(tmp_path: Path) -> None:
    result = run_tpuctl(
        "launch", str(SCRIPTS / "fail_first_attempt.py"), "--workers", "2", "--strategy", "none",
        "--max-restarts", "1", "--log-dir", str(tmp_path / "logs"),
    )
    lines = result.stdout.splitlines()
    assert "[worker:1] attempt 2 worker 1" in lines
    assert "\x1b[" not in result.stdout

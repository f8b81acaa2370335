"""The Supervisor's rules, stated against a backend whose workers are scripted threads.

No process starts here: each fake worker prints lines, says "ready" and exits
as its script says, so every rule (fail-fast, the first failure's status,
restarts, the start-up deadline, servers, signals) is checked in milliseconds.
The same rules are checked with real processes in tests/integration/test_launch_processes.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.standins.scripted_workers import Script, supervise
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.job import Job


def test_every_worker_succeeding_is_exit_0_with_each_log_saved(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(lines=["epoch 1", "epoch 2"])], "worker:1": [Script(lines=["hello from 1"])]}
    outcome, starter, printed, _ = supervise(tmp_path, Job("train.py", workers=2), scripts)
    assert (outcome.exit_code, outcome.attempts, outcome.failure, outcome.interrupted) == (0, 1, None, False)
    assert {"[worker:0] epoch 1", "[worker:0] epoch 2", "[worker:1] hello from 1"} <= set(printed)
    assert (tmp_path / "attempt-1" / "worker-0.log").read_text() == "epoch 1\nepoch 2\n"
    plan = json.loads((tmp_path / "attempt-1" / "plan.json").read_text())
    assert [w["address"] for w in plan["workers"]] == ["fakehost:1000", "fakehost:1001"]
    assert starter.released == 1 and all(h.closed for h in starter.handles)


def test_the_first_failure_decides_the_exit_status_and_stops_the_rest(tmp_path: Path) -> None:
    scripts = {
        "worker:0": [Script(lines=["training"], exit=None)],
        "worker:1": [Script(lines=["step 1", "Traceback: boom"], exit=7, delay=0.05)],
        "worker:2": [Script(exit=3, delay=5.0)],
    }
    outcome, starter, _, _ = supervise(tmp_path, Job("train.py", workers=3), scripts)
    assert outcome.exit_code == 7
    assert outcome.failure is not None
    assert (outcome.failure.worker, outcome.failure.host, outcome.failure.status) == ("worker:1", "fakehost", "exit status 7")
    assert outcome.failure.tail == ("step 1", "Traceback: boom")
    assert outcome.failure.log == tmp_path / "attempt-1" / "worker-1.log"
    survivors = [h for h in starter.handles if h.spec.name != "worker:1"]
    assert all(h.signals[0] == signal.SIGINT for h in survivors)  # asked first
    assert all(signal.SIGKILL in h.signals for h in starter.handles)  # then every group is killed regardless


def test_a_worker_killed_by_a_signal_exits_128_plus_its_number(tmp_path: Path) -> None:
    outcome, _, _, _ = supervise(tmp_path, Job("train.py", workers=1), {"worker:0": [Script(exit=-9)]})
    assert outcome.exit_code == 137
    assert outcome.failure is not None and outcome.failure.status == "killed by SIGKILL"


def test_a_worker_ignoring_sigint_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(exit=None, ignores_sigint=True)], "worker:1": [Script(exit=1, delay=0.05)]}
    outcome, starter, _, _ = supervise(tmp_path, Job("train.py", workers=2), scripts)
    assert outcome.exit_code == 1
    stubborn = starter.handles[0]
    assert stubborn.signals[:2] == [signal.SIGINT, signal.SIGKILL] and stubborn.returncode == -signal.SIGKILL


def test_preemptions_past_max_preemptions_end_the_run_in_a_line_naming_the_flag(tmp_path: Path) -> None:
    """--max-preemptions is the one budget of a run's preemption restarts (a --new-tpu run's VM recreations with them)."""
    scripts = {"worker:0": [Script(exit=42)], "worker:1": [Script()]}
    outcome, _, _, notices = supervise(tmp_path, Job("train.py", workers=2, max_preemptions=2), scripts)
    assert (outcome.exit_code, outcome.attempts, outcome.preemptions) == (42, 3, 2)
    assert [n for n in notices if "restarting all workers" in n][-1].endswith("(preemption 2/2, attempt 3)")
    assert notices[-1] == "worker:0 was preempted (exit status 42): --max-preemptions 2 is spent; not restarting"


def test_restarts_run_every_worker_again_with_a_new_attempt_folder(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(lines=["first try"], exit=2), Script(lines=["second try"])], "worker:1": [Script(exit=None), Script()]}
    outcome, starter, _, notices = supervise(tmp_path, Job("train.py", workers=2, max_restarts=3), scripts)
    assert (outcome.exit_code, outcome.attempts) == (0, 2)
    assert len(starter.handles) == 4
    assert [h.spec.env["TPUCTL_ATTEMPT"] for h in starter.handles] == ["1", "1", "2", "2"]
    assert notices == ["worker:0 failed (exit status 2); restarting all workers (attempt 2/4)"]
    assert (tmp_path / "attempt-1" / "worker-0.log").read_text() == "first try\n"
    assert (tmp_path / "attempt-2" / "worker-0.log").read_text() == "second try\n"


def test_restarts_give_up_with_the_last_attempts_failure(tmp_path: Path) -> None:
    outcome, starter, _, _ = supervise(tmp_path, Job("train.py", workers=1, max_restarts=1), {"worker:0": [Script(exit=5)]})
    assert (outcome.exit_code, outcome.attempts) == (5, 2) and len(starter.handles) == 2


def test_a_worker_that_never_gets_ready_fails_the_start_deadline_by_name(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(exit=None)], "worker:1": [Script(ready=False, exit=None)]}
    outcome, _, _, notices = supervise(tmp_path, Job("train.py", workers=2, start_timeout=0.2), scripts)
    assert outcome.exit_code == 1
    assert outcome.failure is not None and outcome.failure.worker == "worker:1"
    assert outcome.failure.status == "did not start within 0.2s"
    assert notices == ["worker:1 did not start within 0.2s (--start-timeout); stopping all workers"]


def test_servers_are_stopped_once_the_chief_is_done(tmp_path: Path) -> None:
    job = Job("train.py", workers=2, strategy="parameter-server", ps=1)
    scripts = {"worker:0": [Script(exit=None)], "worker:1": [Script(exit=None)], "ps:0": [Script(exit=None)], "chief:0": [Script(delay=0.05)]}
    outcome, starter, _, _ = supervise(tmp_path, job, scripts)
    assert outcome.exit_code == 0
    servers = [h for h in starter.handles if h.spec.server]
    assert sorted(h.spec.name for h in servers) == ["ps:0", "worker:0", "worker:1"]
    assert all(h.signals and h.signals[0] == signal.SIGINT for h in servers)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopping_signal_stops_every_worker_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    scripts = {"worker:0": [Script(exit=None)], "worker:1": [Script(exit=None)]}
    before = signal.getsignal(sig)
    threading.Timer(0.2, os.kill, (os.getpid(), sig)).start()
    started = time.monotonic()
    outcome, starter, _, notices = supervise(tmp_path, Job("train.py", workers=2, max_restarts=5), scripts)
    assert (outcome.exit_code, outcome.interrupted, outcome.attempts) == (130, True, 1)
    assert time.monotonic() - started < 5
    assert all(h.returncode == -signal.SIGINT for h in starter.handles)
    assert notices == [f"received {sig.name}; stopping all workers"]
    assert signal.getsignal(sig) == before  # the launch's handler is gone again


# Python's own words for a SIGINT in a worker busy in TensorFlow (what a survivor prints when tpuctl stops it).
INTERRUPTED = [
    "Traceback (most recent call last):",
    '  File "/tmp/train.py", line 30, in <module>',
    "    total += float(distributed_train_step(batch))",
    "KeyboardInterrupt",
]


def test_a_restart_names_the_cause_and_the_stopped_workers_tracebacks_stay_in_their_logs(tmp_path: Path) -> None:
    scripts = {
        "worker:0": [Script(lines=["step 1", "ValueError: bad batch"], exit=1, delay=0.05), Script()],
        "worker:1": [Script(lines=["step 1"], exit=None, on_sigint=INTERRUPTED), Script()],
    }
    outcome, _, printed, notices = supervise(tmp_path, Job("train.py", workers=2, max_restarts=1), scripts)
    assert outcome.exit_code == 0
    assert notices == [
        "what worker:1 printed while tpuctl stopped it is in the log only",
        "worker:0 failed (exit status 1): uncaught Python exception: ValueError: bad batch; restarting all workers (attempt 2/2)",
    ]
    assert not any("KeyboardInterrupt" in line or "Traceback" in line for line in printed)
    assert (tmp_path / "attempt-1" / "worker-1.log").read_text() == "step 1\n" + "\n".join(INTERRUPTED) + "\n"



def test_the_coordination_service_lost_after_the_first_task_ended_well_is_folded(tmp_path: Path) -> None:
    """worker:1's last lines of a real 2-worker run whose worker:0 had finished (tests/data/tf_console/)."""
    lines = (ROOT / "tests" / "data" / "tf_console" / "shutdown_after_leader.log").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "Failed to send RPC to coordination service" in line)
    scripts = {"worker:0": [Script(lines=["done"])], "worker:1": [Script(late_lines=lines[start : start + 4], delay=0.5)]}
    fold = Fold(verbose=False)
    outcome, _, printed, _ = supervise(tmp_path, Job("train.py", workers=2), scripts, fold)
    assert outcome.exit_code == 0
    assert [line for line in printed if line.startswith("[worker:1]")] == ["[worker:1] done"]
    assert fold.shutdown_note() is not None
    assert "Failed to send RPC" in (tmp_path / "attempt-1" / "worker-1.log").read_text()

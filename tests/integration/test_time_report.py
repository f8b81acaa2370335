"""Where a real run's time went (issue 24): real TensorFlow on CPU, tpuctl launch, then `tpuctl report`.

One worker runs a tutorial-style Keras fit with BackupAndRestore (tests/integration/scripts/fit_preempted_once.py):
a clean run, a run preempted once that resumes from its backup (its restart and re-done steps must show), a run
stopped by --hang-timeout, and a run whose launcher is SIGKILLed (what its timeline holds up to then is reportable).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTS, run_tpuctl, tpuctl_cmd
from tests.integration import shared_runs

pytestmark = pytest.mark.tf

SCRIPT = SCRIPTS / "fit_preempted_once.py"


def _launch(tmp_path: Path, *script_args: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    argv = ("launch", str(SCRIPT), "--model-dir", str(tmp_path / "model"), "--log-dir", str(tmp_path / "logs"), *options, "--", *script_args)
    return run_tpuctl(*argv, timeout=240)


def _report(log_dir: Path) -> dict[str, Any]:
    shown = run_tpuctl("report", f"{log_dir}/", "--json", timeout=60)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    report: dict[str, Any] = json.loads(shown.stdout)
    categories: dict[str, float] = report["categories"]
    assert abs(sum(categories.values()) - report["wall_s"]) <= 0.01 * report["wall_s"], report
    return report


def test_a_clean_run_is_mostly_training_and_says_so_at_its_end(tmp_path: Path) -> None:
    result = _launch(tmp_path, "--steps", "16", "--step-time", "0.2")
    assert result.returncode == 0, result.stderr
    report = _report(tmp_path / "logs")
    categories = report["categories"]
    assert report["step_source"] == "keras" and 0 < report["goodput"] < 1, report
    assert categories["training steps"] >= 2.0 and categories["start-up"] > 0 and categories["first step"] > 0, categories
    assert categories.get("restart", 0) == 0 and categories.get("lost work", 0) == 0 and len(report["attempts"]) == 1
    summary = [line for line in result.stderr.splitlines() if line.startswith("tpuctl: goodput ")]
    assert len(summary) == 1, result.stderr
    outcome = json.loads((tmp_path / "logs" / "outcome.json").read_text())
    assert outcome["goodput"]["goodput"] == pytest.approx(report["goodput"], abs=0.02), outcome["goodput"]


@pytest.fixture(scope="module")
def preempted_once(tmp_path_factory: pytest.TempPathFactory) -> shared_runs.LaunchedRun:
    return shared_runs.preempted_once(tmp_path_factory)


def test_a_run_preempted_once_shows_its_restart_and_the_steps_it_did_again(preempted_once: shared_runs.LaunchedRun) -> None:
    """Backups every 8 steps, preempted after step 15: the second attempt restores step 8 and re-does 9 to 15.
    The view the launcher published into the model dir (issue 37) has the same attempts, restart and goodput.
    The run is the one test_tensorboard_page.py draws (tests/integration/shared_runs.py: launched once)."""
    run = preempted_once
    assert run.returncode == 0, run.stderr
    [published] = (run.model_dir / "tpuctl").glob("*/view.json")
    view = json.loads(published.read_text())
    assert "hunter2" not in published.read_text() and not list(published.parent.glob(".view.json.*"))  # shared_runs.VIEW_SECRET
    assert "was preempted (exit status 42)" in run.stderr
    report = _report(run.log_dir)
    categories = report["categories"]
    assert categories["restart"] > 1.0 and categories["lost work"] > 0.5, categories
    # The launcher stamps a worker's events as it reads them: a restore whose begin and end it read at once (a loaded
    # machine) has no length, so what is checked is that both were told, in the attempt after the preemption.
    told = [(e["event"], e.get("attempt")) for e in map(json.loads, (run.log_dir / "timeline.jsonl").read_text().splitlines())]
    assert {("checkpoint_save_end", 1), ("checkpoint_restore_begin", 2), ("checkpoint_restore_end", 2)} <= set(told), told
    assert "checkpoint save" in categories and "checkpoint restore" in categories, categories
    first, second = report["attempts"]
    assert first["ended"] == "preempted" and second["categories"]["restart"] == pytest.approx(categories["restart"], rel=0.01), report
    assert 0 < report["goodput"] < 1
    assert {key: report[key] for key in view["goodput"]} == view["goodput"]  # the report's own numbers, not a second computation
    assert view["run"]["id"] == published.parent.name and view["run"]["state"] == "succeeded" and view["run"]["script"] == SCRIPT.name
    assert [(row["attempt"], row["worker"]) for row in view["rows"]] == [(1, "worker:0"), (2, "worker:0")]
    assert [(a["attempt"], a["ending"] and a["ending"]["state"]) for a in view["attempts"]] == [(1, "preempted"), (2, None)]
    assert [(r["attempt"], r["cause"]) for r in view["restarts"]] == [(2, "preempted")]
    kinds = [{s["kind"] for s in row["segments"]} for row in view["rows"]]
    assert {"start-up", "first-step", "steps", "checkpoint-save"} <= kinds[0] and "checkpoint-restore" in kinds[1], kinds


def test_a_hang_stopped_by_hang_timeout_is_its_own_category(tmp_path: Path) -> None:
    result = _launch(tmp_path, "--steps", "40", "--hang-at", "6", "--step-time", "0.2", options=("--hang-timeout", "4"))
    assert result.returncode == 124, result.stderr
    report = _report(tmp_path / "logs")
    assert report["categories"]["hang"] >= 3.0, report["categories"]
    assert report["attempts"][0]["ended"] == "hang", report["attempts"]


def test_a_run_whose_launcher_was_sigkilled_is_reported_up_to_its_last_event(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    argv = tpuctl_cmd("launch", str(SCRIPT), "--model-dir", str(tmp_path / "model"), "--log-dir", str(log_dir), "--", "--steps", "200", "--step-time", "0.2")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and '"event": "step"' not in _text(log_dir / "timeline.jsonl"):
            time.sleep(0.5)
        time.sleep(2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    report = _report(log_dir)  # its span ends at its last event: the steps sampled since (one line every 30 s) are lost with it
    assert report["wall_s"] > 0 and report["categories"]["start-up"] > 0 and report["step_source"] == "keras", report
    assert not report["running"] and len(report["attempts"]) == 1, report
    shown = run_tpuctl("report", f"{log_dir}/", timeout=60)
    assert shown.returncode == 0 and "start-up" in shown.stdout and "Traceback" not in shown.stderr, shown.stderr


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""

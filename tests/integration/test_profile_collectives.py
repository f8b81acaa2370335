"""`tpuctl profile` of 2-worker MultiWorkerMirroredStrategy tf-keras fits, the runs users profile and the ones whose
worker TensorFlow's profiler killed (issue 46: worker:1 aborted as a capture stopped, and the run failed): every
worker of the multi-worker tutorial's fit is captured in each of ten captures in a row while the run trains on, and
the run then ends as it would have, exit 0; a step dominated by the gradient all-reduce is judged communication-bound.

Each run is launched once for the one test that reads it, and ends when that test ends: a run kept for the module
would train on beside the other run's test (4 busy TensorFlow processes on 2 cores). The ten captures are short
(0.2 s: a few steps) and go through the CLI in this process (tests/standins/cli_calls.py's `invoke`), so they cost
little besides the steps themselves; what crashed was stopping a profile, which each capture does once per worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl, wait_for
from tests.standins.cli_calls import invoke

pytestmark = pytest.mark.tf


@dataclass(frozen=True)
class Run:
    run_id: str
    logs: Path
    out: Path
    env: dict[str, str]

    def state(self) -> dict[str, object]:
        listed = invoke(["runs", "--json"], env=dict(self.env), limit_s=30)
        return dict(next(row for row in json.loads(listed.out) if row["run_id"] == self.run_id))

    def steps(self, index: int) -> int:
        return len((self.out / f"steps-{index}.txt").read_text().splitlines())


def _launch(root: Path, *script: str) -> Iterator[Run]:
    out = root / "out"
    out.mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "NO_COLOR": "1"}
    started = run_tpuctl(
        "launch", "--detach", "--workers", "2", "--model-dir", str(root / "model"), "--log-dir", str(root / "logs"),
        str(SCRIPTS / script[0]), str(out), "300", *script[1:], env=env, timeout=60,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run = Run(started.stdout.strip(), root / "logs", out, env)
    try:
        wait_for(lambda: all((out / f"ready-{i}").exists() for i in range(2)), timeout=120)
        yield run
    finally:
        (out / "stop").touch()
        wait_for(lambda: run.state()["state"] != "running", timeout=60)


@pytest.fixture
def allreduce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A 12M-parameter model, 2 examples per replica: each step is mostly the all-reduce of its gradients."""
    yield from _launch(tmp_path_factory.mktemp("allreduce"), "allreduce_fit.py")


@pytest.fixture
def tutorial_fit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The multi-worker Keras tutorial's model and batch, the strategy's scope entered by tpuctl."""
    yield from _launch(tmp_path_factory.mktemp("tutorial"), "fit_until_stopped.py", "0.02")


def test_an_all_reduce_bound_step_is_communication_bound(allreduce: Run) -> None:
    """Named by its LOG_DIR, as `tpuctl report` takes it."""
    result = run_tpuctl("profile", str(allreduce.logs), "--duration", "2", "--json", env=allreduce.env, timeout=180)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["run_id"] == allreduce.run_id and sorted(answer["files"]) == ["worker:0", "worker:1"] and answer["missing"] == {}, answer
    verdict = answer["verdict"]
    assert verdict is not None, "the test extra installs xprof"
    assert len(verdict["workers"]) == 2, verdict
    for numbers in verdict["workers"]:
        # Measured here: 78-81% in CollectiveReduceV2, which xprof's CPU step table counts as host compute.
        assert numbers["communication_pct"] >= 50 and numbers["compute_pct"] < numbers["communication_pct"], numbers
        assert any(op["type"] == "CollectiveReduceV2" for op in numbers["top_ops"]), numbers
    [hint] = [note for note in verdict["notes"] if "per-replica batch" in note]
    assert hint.startswith("worker:0, worker:1: "), hint


def test_ten_captures_in_a_row_take_every_worker_and_the_run_trains_on_and_ends_well(tutorial_fit: Run) -> None:
    """Without tpuctl's fix a capture's stop aborted worker:1 now and then (measured here: in 6 of 64 captures, 6 of 9
    runs of up to ten; through this test with the fix turned off, 2 of 3 runs failed; docs/profile.md)."""
    run = tutorial_fit
    sessions = set()
    for capture in range(10):
        before = [run.steps(i) for i in range(2)]
        result = invoke(["profile", run.run_id, "--duration", "0.2", "--json", "--no-verdict"], env=dict(run.env), limit_s=120)
        assert result.code == 0 and result.crash is None, result.explain(["profile", run.run_id])
        answer = json.loads(result.out)
        assert sorted(answer["files"]) == ["worker:0", "worker:1"] and answer["missing"] == {}, (capture, answer)
        session = Path(answer["session"])
        assert session.parent == run.logs.parent / "model" / "plugins" / "profile" and session.name not in sessions
        sessions.add(session.name)
        assert sorted(p.name for p in session.iterdir()) == sorted(Path(f).name for f in answer["files"].values())
        assert all(Path(f).stat().st_size > 10_000 for f in answer["files"].values())
        assert run.state()["state"] == "running"
        assert all(run.steps(i) > before[i] for i in range(2))  # both trained through it
    (run.out / "stop").touch()
    wait_for(lambda: run.state()["state"] != "running", timeout=60)
    assert (run.state()["state"], run.state()["exit_code"]) == ("succeeded", 0)

"""runs/view.py: a run's view (tpuctl.run-view/1) from real run folders written by tpuctl's own Timeline, bounded at
any length, the report's own goodput, hostile timelines kept as plain data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.standins.timelines import WALL0, Clock, one_worker_until_ready, write_run
from tpuctl.cluster.tf_config import Task
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.process import stacks
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.runs import goodput, view, view_schema
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder

KINDS = {"start-up", "first-step", "steps", "checkpoint-save", "checkpoint-restore", "evaluation", "stall", "hang"}


def test_a_preempted_run_has_its_rows_segments_restart_and_the_reports_goodput(tmp_path: Path) -> None:
    write_run(tmp_path, workers=2, samples=40, restarts=[20], save_every=10)
    built = view.build(RunFolder(tmp_path), live=False)
    assert built["schema"] == view_schema.SCHEMA
    assert built["goodput"] == goodput.of_folder(RunFolder(tmp_path), live=False).to_json()
    assert built["run"]["state"] == "succeeded" and built["run"]["workers"] == 2 and built["run"]["id"] == "run-standin"
    assert [(r["attempt"], r["worker"]) for r in built["rows"]] == [(1, "worker:0"), (1, "worker:1"), (2, "worker:0"), (2, "worker:1")]
    first = built["rows"][0]
    kinds = [s["kind"] for s in first["segments"]]
    assert kinds[:3] == ["start-up", "first-step", "steps"] and "checkpoint-save" in kinds and set(kinds) <= KINDS
    assert all(s["start"] < s["end"] and s["start"] >= WALL0 for s in first["segments"])
    assert first["ending"]["state"] == "preempted" and "TPU VM" in first["ending"]["words"]
    assert built["rows"][1]["ending"]["state"] == "stopped"  # worker:1 was stopped with the attempt, it was not the cause
    rates = [r for r in first["rate"]["steps_per_s"] if r is not None]
    assert max(rates) == pytest.approx(50 / tl.STEP_EVERY_S, rel=0.01)
    assert min(rates) == pytest.approx(50 / (tl.STEP_EVERY_S + 8), rel=0.01)  # the pace over an 8 s checkpoint save
    assert [(r["attempt"], r["cause"]) for r in built["restarts"]] == [(2, "preempted")]
    assert built["restarts"][0]["at"] == built["attempts"][0]["end"]
    assert [a["ending"] and a["ending"]["state"] for a in built["attempts"]] == ["preempted", None]
    windows = built["goodput_over_time"]
    assert len(windows) == view_schema.GOODPUT_WINDOWS and windows[0]["start"] == built["run"]["start"]
    assert windows[0]["goodput"] == 0.0 and max(w["goodput"] for w in windows) == 1.0  # start-up first, then training
    json.dumps(built, allow_nan=False)


def test_fits_validation_is_an_evaluation_segment_and_the_reports_own_category(tmp_path: Path) -> None:
    write_run(tmp_path, workers=2, samples=12, eval_every=4)
    built = view.build(RunFolder(tmp_path), live=False)
    for row in built["rows"]:
        evaluations = [s for s in row["segments"] if s["kind"] == "evaluation"]
        assert len(evaluations) == 3 and all(s["end"] - s["start"] == pytest.approx(5, abs=0.01) for s in evaluations)
    assert built["goodput"]["categories"][goodput.EVALUATION] == pytest.approx(15, abs=0.01)


def test_a_short_attempts_rate_band_covers_its_steps_not_only_their_end(tmp_path: Path) -> None:
    write_run(tmp_path, workers=1, samples=3)  # samples 30 s apart: two bins of 30 s, both stepping at one pace
    rate = view.build(RunFolder(tmp_path), live=False)["rows"][0]["rate"]
    assert rate["steps_per_s"] == [pytest.approx(50 / tl.STEP_EVERY_S, rel=0.01)] * 2, rate


def test_the_workers_the_launcher_stopped_with_a_failed_attempt_say_so(tmp_path: Path) -> None:
    write_run(tmp_path, workers=3, samples=6, restarts=[3])  # worker:0 preempted: the launcher stops 1 and 2 with it
    rows = view.build(RunFolder(tmp_path), live=False)["rows"]
    first = {row["worker"]: row["ending"] for row in rows if row["attempt"] == 1}
    assert first["worker:0"]["state"] == "preempted"
    for worker in ("worker:1", "worker:2"):
        assert first[worker]["state"] == "stopped" and first[worker]["words"] == "worker:0 preempted"
        assert first[worker]["at"] >= first["worker:0"]["at"]
    assert [row["ending"] for row in rows if row["attempt"] == 2] == [None, None, None]  # the last attempt succeeded


def test_a_week_of_steps_is_binned_and_windowed_never_shipped_whole(tmp_path: Path) -> None:
    """7 days of 12 workers, 10 attempts: the rows' bins and segments share the budgets (64 workers: the benchmark)."""
    write_run(tmp_path, workers=12, samples=20160, restarts=range(2016, 20160, 2016), save_every=120)
    built = view.build(RunFolder(tmp_path), live=False)
    rows = built["rows"]
    assert len(rows) == 120 and all(len(r["rate"]["steps_per_s"]) <= view_schema.RATE_BINS for r in rows)
    assert [r["worker"] for r in rows[:12]] == [f"worker:{i}" for i in range(12)]  # by number, not as text
    assert sum(len(r["rate"]["steps_per_s"]) for r in rows) <= view.RATE_BUDGET
    assert all(r["segments"][2]["kind"] == "steps" for r in rows)  # after start-up and first step, whatever was cut
    assert len(built["goodput_over_time"]) == view_schema.GOODPUT_WINDOWS
    assert len(json.dumps(built)) < 2 << 20


def test_hostile_timelines_give_plain_data_or_one_line(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    lines = [
        {"t": 1, "wall": WALL0 + 1, "event": "run_start", "run_id": "<script>alert(1)</script>", "backend": 7},
        {"t": 2, "wall": WALL0 + 2, "event": "attempt_start", "attempt": 1},
        {"step": 10**400, "source": "keras", "t": 3, "wall": WALL0 + 3, "event": "first_step", "attempt": 1, "worker": '<img src=x onerror="alert(1)">'},
        {"step": 5, "source": "keras", "t": 40, "wall": WALL0 + 40, "event": "step", "attempt": 1, "worker": '<img src=x onerror="alert(1)">'},
        {"t": 50, "wall": WALL0 + 50, "event": "failure", "attempt": 1, "worker": '<img src=x onerror="alert(1)">', "status": "x" * 1000},
        {"t": 51, "wall": WALL0 + 51, "event": "hang", "attempt": 1, "idle_s": 1e300},
    ]
    folder.timeline.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"t": 60, "wall": 1e30, "ev')
    built = view.build(folder, live=True)
    row = built["rows"][0]
    assert row["worker"] == '<img src=x onerror="alert(1)">' and built["run"]["id"] == "<script>alert(1)</script>"
    assert built["run"]["backend"] is None and built["run"]["state"] == "running" and built["goodput"]["skipped_lines"] == 1
    assert row["ending"]["state"] == "failed" and len(row["ending"]["words"]) <= 300
    json.dumps(built, allow_nan=False)
    folder.timeline.write_text("not a timeline\n" * 3)
    with pytest.raises(TpuctlError, match="nothing readable"):
        view.build(folder, live=False)


def test_stacks_views_and_kept_profile_verdicts_are_listed(tmp_path: Path) -> None:
    write_run(tmp_path, workers=1, samples=5)
    folder = RunFolder(tmp_path)
    stacks = folder.attempt_dir(1) / "stacks-1"
    stacks.mkdir(parents=True)
    (stacks / "view.txt").write_text("worker:0 waits in a collective\n" + "frame\n" * 20000)
    os.utime(stacks / "view.txt", (WALL0 + 500, WALL0 + 500))
    kept = view.keep_profile(folder, "gs://b/m/plugins/profile/2026_11_28_10_20_00", "gs://b/m", {"straggler": None})
    (kept.parent / "broken.json").write_text("{")
    built = view.build(folder, live=False)
    [hang] = built["hangs"]
    assert hang["attempt"] == 1 and hang["at"] == WALL0 + 500 and hang["summary"] == "worker:0 waits in a collective"
    assert len(hang["stacks"]) == view_schema.STACKS_LIMIT
    [profile] = built["profiles"]
    assert profile == {"session": "2026_11_28_10_20_00", "at": profile["at"], "dir": "gs://b/m", "verdict": {"straggler": None}}
    assert kept.stat().st_mode & 0o077 == 0  # in the private run folder until the view publishes it


def test_a_run_of_many_attempts_has_every_attempt_and_row(tmp_path: Path) -> None:
    """Its cost against the report's is measured in benchmarks/report_big_timeline.py (many attempts): speed is not
    a unit test's to judge on a loaded machine."""
    write_run(tmp_path, workers=4, samples=500, restarts=range(5, 500, 5))
    built = view.build(RunFolder(tmp_path), live=False)
    assert [a["attempt"] for a in built["attempts"]] == list(range(1, 101)) and len(built["rows"]) == 400
    assert [r["attempt"] for r in built["restarts"]] == list(range(2, 101))


_DUMP = """Thread 0x00007f0a1b2c3740 (most recent call first):
  File "/home/alice/project/train.py", line 41 in train_step
  File "/home/alice/project/train.py", line 60 in <module>
"""


def test_the_stacks_of_the_hang_that_ended_the_run_are_in_the_view_after_many_stacks_calls(tmp_path: Path) -> None:
    write_run(tmp_path, workers=1, samples=4, restarts=[2])
    folder = RunFolder(tmp_path)
    argv = ("python", "-m", "tpuctl.runtime", "/home/alice/project/train.py")
    spec = WorkerSpec(task=Task("worker", 0), chief=True, host="localhost", address=None, argv=argv)
    for _ in range(120):  # `tpuctl stacks` asked every few minutes during attempt 1 (a cron, a watch loop)
        stacks.record([spec], [_DUMP], folder, 1)
    stacks.record([spec], [_DUMP.replace("train_step", "the_final_hang")], folder, 2)
    hangs = view.build(folder, live=False)["hangs"]
    assert len(hangs) <= 100
    assert any("the_final_hang" in hang["stacks"] for hang in hangs), [hang["attempt"] for hang in hangs][-3:]


def test_a_kept_verdict_of_a_run_on_other_hosts_puts_no_log_dir_path_into_the_published_view(tmp_path: Path) -> None:
    logs = tmp_path / "home" / "alice" / "private-logs" / "run-7"
    logs.mkdir(parents=True)
    write_run(logs, workers=2, samples=4)
    folder = RunFolder(logs)
    session = "2026_11_28_20_00_00"
    local = logs / "plugins" / "profile" / session  # where _on_hosts copies each host's file
    verdict = {
        "session": session,
        "workers": [
            {"worker": f"worker:{i}", "file": str(local / f"10.0.0.{i + 2}_8470.xplane.pb"), "steps": 10, "step_ms": None}
            | {"input_pct": None, "compute_pct": None, "communication_pct": None, "other_pct": None, "top_ops": [], "markers": False}
            for i in range(2)
        ],
        "straggler": None,
        "notes": [],
        "unreadable": [],
    }
    view.keep_profile(folder, str(local), str(logs), verdict)  # what cli/diagnosis/profile.py:_keep passes for that run
    body = json.dumps(view.build(folder, live=False, model_dir="gs://shared-bucket/model"))
    assert json.loads(body)["profiles"][0]["verdict"]["workers"][0]["worker"] == "worker:0"
    assert str(logs) not in body


def test_a_hangs_stacks_view_puts_no_log_dir_path_into_the_published_view(tmp_path: Path) -> None:
    logs = tmp_path / "home" / "alice" / "private-logs" / "run-9"
    logs.mkdir(parents=True)
    write_run(logs, workers=1, samples=4)
    folder = RunFolder(logs)
    argv = ("python", "-m", "tpuctl.runtime", "/home/alice/project/train.py")
    spec = WorkerSpec(task=Task("worker", 0), chief=True, host="localhost", address=None, argv=argv)
    stacks.record([spec], [_DUMP], folder, 1)  # what the launcher keeps on a hang or `tpuctl stacks`
    built = view.build(folder, live=False, model_dir="gs://shared-bucket/model")
    assert len(built["hangs"]) == 1 and "train_step" in built["hangs"][0]["stacks"]
    assert str(logs) not in json.dumps(built)


def _one_worker_run(folder: Path, clock: Clock, *, between: object = None) -> None:
    timeline = one_worker_until_ready(folder, clock)
    if callable(between):
        between()
    clock.t += 20
    step = 0
    timeline.event(tl.FIRST_STEP, attempt=1, worker="worker:0", step=1, source="keras")
    for _ in range(20):
        clock.t += tl.STEP_EVERY_S
        step += 100
        timeline.event(tl.STEP, attempt=1, worker="worker:0", step=step, source="keras")
    timeline.flush_steps(1)
    timeline.event(tl.ATTEMPT_END, attempt=1)
    timeline.event(tl.RUN_END, exit_code=0, state="succeeded")
    timeline.close()


def test_a_wall_clock_jump_does_not_stretch_the_first_step_segment_past_the_reports_number(tmp_path: Path) -> None:
    clock = Clock()

    def suspend_for_an_hour() -> None:  # the laptop's lid closed right after the runtime came up
        clock.wall_extra += 3600

    _one_worker_run(tmp_path, clock, between=suspend_for_an_hour)
    built = view.build(RunFolder(tmp_path), live=False)
    first = [s for s in built["rows"][0]["segments"] if s["kind"] == "first-step"]
    assert len(first) == 1
    reported = built["goodput"]["categories"][goodput.FIRST_STEP]
    assert reported == pytest.approx(20, abs=0.01)
    assert first[0]["end"] - first[0]["start"] == pytest.approx(reported, abs=1)  # today: 3620 s


def _steps_with_a_long_pause(folder: Path, opening: str, closing: str, pause_s: float) -> None:
    """Steps every STEP_EVERY_S, then `pause_s` inside opening/closing (fit's validation, a checkpoint save), then steps."""
    clock = Clock()
    timeline = one_worker_until_ready(folder, clock)
    clock.t += 5
    timeline.event(tl.FIRST_STEP, attempt=1, worker="worker:0", step=1, source="keras")
    step = 1
    for sample in range(10):
        clock.t += tl.STEP_EVERY_S
        step += 100
        timeline.event(tl.STEP, attempt=1, worker="worker:0", step=step, source="keras")
        if sample == 4:
            timeline.event(opening, attempt=1, worker="worker:0")
            clock.t += pause_s
            timeline.event(closing, attempt=1, worker="worker:0")
    timeline.flush_steps(1)
    timeline.event(tl.ATTEMPT_END, attempt=1)
    timeline.event(tl.RUN_END, exit_code=0, state="succeeded")
    timeline.close()


def _overlap(a: dict[str, float], b: dict[str, float]) -> float:
    return min(a["end"], b["end"]) - max(a["start"], b["start"])


@pytest.mark.parametrize(("opening", "closing", "kind"), [(tl.EVAL_BEGIN, tl.EVAL_END, "evaluation"), (tl.SAVE_BEGIN, tl.SAVE_END, "checkpoint-save")])
def test_a_long_validation_or_save_is_not_also_a_stall(tmp_path: Path, opening: str, closing: str, kind: str) -> None:
    _steps_with_a_long_pause(tmp_path, opening, closing, pause_s=120)
    built = view.build(RunFolder(tmp_path), live=False)
    segments = built["rows"][0]["segments"]
    busy = [s for s in segments if s["kind"] == kind]
    assert len(busy) == 1 and busy[0]["end"] - busy[0]["start"] == pytest.approx(120, abs=0.01)
    assert built["goodput"]["categories"][goodput.EVALUATION if kind == "evaluation" else goodput.SAVE] == pytest.approx(120, abs=0.01)
    stalls = [s for s in segments if s["kind"] == "stall"]
    assert not [s for s in stalls if _overlap(s, busy[0]) > 0], stalls  # today: a 150 s stall over the 120 s


def test_the_run_helpers_write_what_the_launcher_writes(tmp_path: Path) -> None:
    """The fixtures above are sound: without a jump or a long pause the view and the report agree."""
    _one_worker_run(tmp_path, Clock())
    built = view.build(RunFolder(tmp_path), live=False)
    first = [s for s in built["rows"][0]["segments"] if s["kind"] == "first-step"]
    assert first[0]["end"] - first[0]["start"] == pytest.approx(built["goodput"]["categories"][goodput.FIRST_STEP], abs=0.01)
    assert not [s for s in built["rows"][0]["segments"] if s["kind"] == "stall"]
    assert os.path.basename(str(tmp_path)) not in json.dumps(built)


def test_many_big_stacks_views_and_verdicts_stay_within_the_views_budget_newest_kept(tmp_path: Path) -> None:
    """Unbounded, 100 stacks views of 64 KiB and 100 verdicts of ~0.9 MiB (64 workers' top ops, as `tpuctl profile`
    keeps them) were ~90 MB of view; the docs bound the whole view at 2 MB. Here 12 of each, each several times its
    share of the budgets (the budgets, not the count of 100, must bound them)."""
    write_run(tmp_path, workers=1, samples=5)
    folder = RunFolder(tmp_path)
    for index in range(12):
        place = folder.attempt_dir(1) / f"stacks-{index + 1}"
        place.mkdir(parents=True)
        (place / "view.txt").write_text(f"worker:0 waits in a collective (view {index})\n" + "frame\n" * 6000)
        os.utime(place / "view.txt", (WALL0 + index, WALL0 + index))
        ops = [{"type": "MatMul", "name": f"op{n}" * 40, "self_ms": 1.0} for n in range(20)]
        workers = [{"worker": f"worker:{w}", "file": f"10.0.0.{w}_8470.xplane.pb", "top_ops": ops} for w in range(16)]
        view.keep_profile(folder, f"2026_11_28_10_{index // 60:02d}_{index % 60:02d}", "gs://b/m", {"workers": workers, "straggler": None})
    view.keep_profile(folder, "2026_11_28_12_00_00", "gs://b/m", {"workers": workers[:2], "straggler": None})  # the newest, small
    built = view.build(folder, live=False)
    assert built["profiles"][-1]["session"] == "2026_11_28_12_00_00"
    assert len(json.dumps(built["hangs"])) <= view.HANGS_BUDGET and len(json.dumps(built["profiles"])) <= view.PROFILES_BUDGET
    assert built["hangs"] and built["hangs"][-1]["summary"] == "worker:0 waits in a collective (view 11)"
    assert [h["at"] for h in built["hangs"]] == sorted(h["at"] for h in built["hangs"])
    assert len(json.dumps(built)) < 2_000_000

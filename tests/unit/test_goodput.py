"""runs/goodput.py: the categories of a run's wall time, from hand-built timelines, and that they always sum to it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl.runs import goodput
from tpuctl.runs import timeline as tl


def ev(t: float, name: str, attempt: int | None = None, worker: str | None = None, **fields: Any) -> tl.Event:
    return tl.Event(t, 1_700_000_000 + t, name, attempt, worker, fields)


def steps(attempt: int, times_steps: list[tuple[float, int]], source: str = "keras") -> list[tl.Event]:
    return [ev(t, tl.STEP, attempt, "worker:0", step=step, source=source) for t, step in times_steps]


def cats(report: goodput.Report) -> dict[str, float]:
    return {name: round(seconds, 6) for name, seconds in report.total.categories.items() if seconds}


def test_a_clean_run_splits_into_start_up_first_step_training_save_and_other() -> None:
    events = [
        ev(0, tl.RUN_START),
        ev(1, tl.ATTEMPT_START, 1),
        ev(2, tl.WORKER_START, 1, "worker:0"),
        ev(5, tl.RUNTIME_READY, 1, "worker:0"),
        ev(6, tl.RUNTIME_READY, 1, "worker:1"),
        ev(10, tl.FIRST_STEP, 1, "worker:0", step=1, source="keras"),
        *steps(1, [(40, 100)]),
        ev(50, tl.SAVE_BEGIN, 1, "worker:0"),
        ev(53, tl.SAVE_END, 1, "worker:0"),
        ev(51, tl.SAVE_BEGIN, 1, "worker:1"),
        ev(55, tl.SAVE_END, 1, "worker:1"),
        *steps(1, [(90, 300)]),
        ev(92, tl.ATTEMPT_END, 1),
        ev(93, tl.RUN_END),
    ]
    report = goodput.analyse(sorted(events, key=lambda e: e.t))
    assert cats(report) == {
        goodput.OTHER: 1 + 2 + 1,  # before the attempt, after its last step, after the attempt
        goodput.START_UP: 5,
        goodput.FIRST_STEP: 4,
        goodput.SAVE: 5,  # the union of both workers' saves: 50 -> 55
        goodput.TRAINING: 75,
    }
    assert report.total.wall_s == pytest.approx(93)
    assert report.total.goodput == pytest.approx(75 / 93)
    assert report.step_source == "keras" and report.finished
    assert [a.number for a in report.attempts] == [1]
    assert report.summary_line().startswith("goodput 81%: 5% start-up, 5% checkpoint save, 4% first step")


def test_fits_validation_is_evaluation_not_training_and_a_save_inside_it_stays_a_save() -> None:
    events = [
        ev(0, tl.RUN_START),
        ev(0, tl.ATTEMPT_START, 1),
        ev(4, tl.RUNTIME_READY, 1, "worker:0"),
        ev(10, tl.FIRST_STEP, 1, "worker:0", step=1, source="keras"),
        *steps(1, [(30, 100)]),
        ev(30, tl.EVAL_BEGIN, 1, "worker:0"),
        ev(31, tl.EVAL_BEGIN, 1, "worker:1"),
        ev(36, tl.EVAL_END, 1, "worker:0"),
        ev(38, tl.EVAL_END, 1, "worker:1"),  # the union of both workers' validation: 30 -> 38
        ev(37, tl.SAVE_BEGIN, 1, "worker:0"),
        ev(40, tl.SAVE_END, 1, "worker:0"),
        ev(60, tl.EVAL_BEGIN, 1, "worker:0"),  # never ended: runs to the attempt's end
        *steps(1, [(59, 200)]),
        ev(70, tl.ATTEMPT_END, 1),
        ev(70, tl.RUN_END),
    ]
    report = goodput.analyse(sorted(events, key=lambda e: e.t))
    assert cats(report) == {
        goodput.START_UP: 4,
        goodput.FIRST_STEP: 6,
        goodput.EVALUATION: 7 + 10,  # 30 -> 37 (the save takes 37 -> 40), and 60 -> 70
        goodput.SAVE: 3,
        goodput.TRAINING: 20 + 19,  # 10 -> 30 and 40 -> 59
        goodput.OTHER: 1,  # 59 -> 60: after the last step, before the open validation
    }
    assert report.total.goodput == pytest.approx(39 / 70)


def test_a_preempted_run_shows_its_restart_restore_and_the_work_it_redid() -> None:
    events = [
        ev(0, tl.RUN_START),
        ev(0, tl.ATTEMPT_START, 1),
        ev(5, tl.RUNTIME_READY, 1, "worker:0"),
        ev(10, tl.FIRST_STEP, 1, "worker:0", step=1),
        *steps(1, [(60, 500)]),
        ev(61, tl.PREEMPTED, 1, "worker:0"),
        ev(62, tl.ATTEMPT_END, 1),
        ev(62, tl.RESTART),
        ev(70, tl.ATTEMPT_START, 2),
        ev(75, tl.RUNTIME_READY, 2, "worker:0"),
        ev(76, tl.RESTORE_BEGIN, 2, "worker:0"),
        ev(78, tl.RESTORE_END, 2, "worker:0"),
        ev(80, tl.FIRST_STEP, 2, "worker:0", step=401),
        *steps(2, [(90, 450), (100, 550), (150, 1000)]),
        ev(151, tl.ATTEMPT_END, 2),
        ev(151, tl.RUN_END),
    ]
    report = goodput.analyse(events)
    assert cats(report) == {
        goodput.START_UP: 5,
        goodput.FIRST_STEP: 5,
        goodput.TRAINING: 50 + 55,
        goodput.OTHER: 2 + 1,  # attempt 1's last step -> its end; attempt 2's
        goodput.RESTART: 62 - 62 + 8 + 6 + 2,  # 62 -> 70 between attempts, 70 -> 80 but the restore
        goodput.RESTORE: 2,
        goodput.LOST_WORK: 15,  # 80 -> 95: step 500 passed halfway between the samples of 450 (90) and 550 (100)
    }
    first, second = report.attempts
    assert (first.ended, second.ended) == ("preempted", None)
    assert second.split.categories[goodput.RESTART] == pytest.approx(16)
    assert first.split.wall_s + second.split.wall_s == pytest.approx(report.total.wall_s)


def test_a_hang_runs_from_the_last_progress_to_the_attempts_end() -> None:
    events = [
        ev(0, tl.RUN_START),
        ev(0, tl.ATTEMPT_START, 1),
        ev(2, tl.RUNTIME_READY, 1, "worker:0"),
        ev(3, tl.FIRST_STEP, 1, "worker:0", step=1, source="summary"),
        *steps(1, [(20, 10)], source="summary"),
        ev(80, tl.HANG, 1, idle_s=50.0),
        ev(85, tl.ATTEMPT_END, 1),
        ev(85, tl.RUN_END),
    ]
    report = goodput.analyse(events)
    assert cats(report)[goodput.HANG] == pytest.approx(55)  # 30 (80 - idle 50) -> 85
    assert report.attempts[0].ended == "hang" and report.step_source == "summary"
    no_idle = goodput.analyse([e if e.event != tl.HANG else ev(80, tl.HANG, 1) for e in events])
    assert cats(no_idle)[goodput.HANG] == pytest.approx(65)  # from the last step, 20


def test_a_sigkilled_run_is_reported_to_its_last_event_and_a_live_one_to_now() -> None:
    events = [ev(0, tl.RUN_START), ev(0, tl.ATTEMPT_START, 1), ev(4, tl.RUNTIME_READY, 1), ev(6, tl.FIRST_STEP, 1, step=1), *steps(1, [(36, 30)])]
    killed = goodput.analyse(events)
    assert killed.total.wall_s == pytest.approx(36) and not killed.finished
    live = goodput.analyse(events, now=50)
    assert live.total.wall_s == pytest.approx(50)
    assert cats(live)[goodput.OTHER] == pytest.approx(14)  # since the last sampled step: not known to be training yet


def test_no_steps_means_no_goodput_and_the_line_says_why() -> None:
    report = goodput.analyse([ev(0, tl.RUN_START), ev(1, tl.ATTEMPT_START, 1), ev(3, tl.RUNTIME_READY, 1), ev(60, tl.RUN_END)])
    assert report.total.goodput is None and report.step_source is None
    assert cats(report) == {goodput.OTHER: 1 + 57, goodput.START_UP: 2}  # no step ever: nothing says it was tracing
    going = goodput.analyse([ev(0, tl.RUN_START), ev(1, tl.ATTEMPT_START, 1), ev(3, tl.RUNTIME_READY, 1)], now=60)
    assert cats(going) == {goodput.OTHER: 1, goodput.START_UP: 2, goodput.FIRST_STEP: 57}  # still going: it may be tracing now
    assert report.summary_line().startswith("goodput unknown")
    assert goodput.analyse([]).total.wall_s == 0


def test_times_no_clock_reaches_are_skipped() -> None:
    report = goodput.analyse([ev(0, tl.RUN_START), ev(1e300, tl.STEP, 1, step=3), ev(10, tl.RUN_END)])
    assert report.skipped == 1 and report.total.wall_s == pytest.approx(10)


_NAMES = sorted(tl.EVENTS)
_event = st.builds(
    ev,
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.sampled_from(_NAMES),
    st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
    st.sampled_from([None, "worker:0", "worker:1"]),
    step=st.one_of(st.none(), st.integers(-5, 1000), st.floats(allow_nan=True), st.text(max_size=3)),
    idle_s=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    source=st.sampled_from(["keras", "summary", 3]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, max_size=40), st.one_of(st.none(), st.floats(min_value=-1e6, max_value=2e6)))
def test_the_categories_always_sum_to_the_wall_time(events: list[tl.Event], now: float | None) -> None:
    events = sorted(events, key=lambda e: e.t)
    report = goodput.analyse(events, now=now)
    total = report.total
    if events:  # the span the timeline says the run had: run_start (or the first event) -> run_end (or the last, or now)
        begin = next((e.t for e in events if e.event == tl.RUN_START), events[0].t)
        ends = [e.t for e in events if e.event == tl.RUN_END]
        end = ends[-1] if ends else max(events[-1].t, events[-1].t if now is None else now)
        assert math.isclose(total.wall_s, max(0.0, end - begin), rel_tol=0.01, abs_tol=1e-6)
    assert all(seconds >= 0 for seconds in total.categories.values())
    assert math.isclose(sum(total.categories.values()), total.wall_s, rel_tol=1e-9, abs_tol=1e-6)
    attempts = sum(a.split.wall_s for a in report.attempts)
    assert attempts <= total.wall_s + 1e-6
    for attempt in report.attempts:
        assert math.isclose(sum(attempt.split.categories.values()), attempt.split.wall_s, rel_tol=1e-9, abs_tol=1e-6)
    assert total.goodput is None or 0 <= total.goodput <= 1 + 1e-9
    report.summary_line()
    report.to_json()


def test_a_record_keeps_its_goodput_and_refuses_one_that_is_no_share() -> None:
    from tpuctl.runs.records import RunRecord

    raw = {"run_id": "r1", "backend": "local", "script": "t.py", "log_dir": "/tmp/r1", "started": 1.0, "pid": 5, "host": "h"}
    assert RunRecord.from_json(raw).goodput is None
    assert RunRecord.from_json({**raw, "goodput": 0.71}).goodput == 0.71
    for bad in (math.nan, 1.5, -0.1, "71%", True):
        with pytest.raises(ValueError):
            RunRecord.from_json({**raw, "goodput": bad})


def test_the_launch_summary_says_the_goodput_and_the_biggest_losses_and_outcome_json_carries_it() -> None:
    from pathlib import Path

    from tpuctl.launch.outcome import Outcome, summarise

    events = [ev(0, tl.RUN_START), ev(0, tl.ATTEMPT_START, 1), ev(20, tl.RUNTIME_READY, 1), ev(30, tl.FIRST_STEP, 1, step=1), *steps(1, [(100, 9)])]
    outcome = Outcome(exit_code=0, attempts=1, elapsed_s=100.0, goodput=goodput.analyse([*events, ev(100, tl.RUN_END)]))
    said: list[str] = []
    summarise(outcome, "1 worker(s)", Path("/logs"), said.append, said.append)
    assert said[0] == "goodput 70%: 20% start-up, 10% first step" and said[1].startswith("1 worker(s) finished in 100.0s")
    record = outcome.to_json(backend="local", run_id="r", log_dir=Path("/logs"))["goodput"]
    assert record["goodput"] == 0.7 and record["line"] == said[0] and record["categories"][goodput.START_UP] == 20
    quiet: list[str] = []
    summarise(Outcome(0, 1, 5.0, goodput=goodput.analyse([ev(0, tl.RUN_START), ev(5, tl.RUN_END)])), "1 worker(s)", Path("/l"), quiet.append, quiet.append)
    assert len(quiet) == 1  # no steps seen (a plain script): no goodput line


def test_a_run_s_own_vm_splits_hunting_provisioning_and_preemption_recovery_out_of_other_and_restart() -> None:
    """launch --new-tpu: 12 s hunting (two stocked-out zones), 20 s creating and waiting for READY before attempt 1;
    after its preemption, 30 s recreating the node before attempt 2; the rest of each span keeps its old category."""
    events = [
        ev(0, tl.RUN_START),
        ev(1, tl.PROVISION_BEGIN, types="v4-16", candidates=3),
        ev(3, tl.NODE_CREATE, node="tpuctl-x", zone="a"),
        ev(13, tl.NODE_CREATE, node="tpuctl-x", zone="c"),
        ev(33, tl.PROVISION_END, node="tpuctl-x", zone="c", hunting_s=12.0, tried=2),
        ev(35, tl.ATTEMPT_START, 1),
        ev(36, tl.RUNTIME_READY, 1, "worker:0"),
        ev(40, tl.FIRST_STEP, 1, "worker:0", step=1, source="keras"),
        *steps(1, [(60, 100)]),
        ev(61, tl.PREEMPTED, 1, "worker:0"),
        ev(62, tl.ATTEMPT_END, 1, result="preempted"),
        ev(63, tl.RESTART, 1, why="preemption"),
        ev(64, tl.RECREATE_BEGIN, node="tpuctl-x", zone="c", condition="PREEMPTED"),
        ev(94, tl.RECREATE_END, node="tpuctl-x", zone="c"),
        ev(95, tl.ATTEMPT_START, 2),
        ev(96, tl.RUNTIME_READY, 2, "worker:0"),
        ev(100, tl.FIRST_STEP, 2, "worker:0", step=101, source="keras"),
        *steps(2, [(120, 200)]),
        ev(121, tl.ATTEMPT_END, 2, result="succeeded"),
        ev(122, tl.NODE_DELETE, node="tpuctl-x", zone="c", fate="deleted"),
        ev(124, tl.RUN_END),
    ]
    report = goodput.analyse(sorted(events, key=lambda e: e.t))
    found = cats(report)
    assert found[goodput.HUNTING] == 12 and found[goodput.PROVISIONING] == 20  # 1 -> 13, 13 -> 33
    assert found[goodput.RECOVERY] == 30  # 64 -> 94
    assert found[goodput.RESTART] == 2 + 1 + 5  # 62 -> 64 and 94 -> 95 between the attempts, 95 -> 100 to attempt 2's first step
    # before the hunt, after it until attempt 1, after each attempt's last step, after the last attempt (the delete)
    assert found[goodput.OTHER] == 1 + 2 + 2 + 1 + 3
    assert found[goodput.TRAINING] == 40 and found[goodput.START_UP] == 1 and found[goodput.FIRST_STEP] == 4
    assert report.total.wall_s == pytest.approx(124) and sum(found.values()) == pytest.approx(124)
    assert report.summary_line() == "goodput 32%: 24% preemption recovery, 16% provisioning, 10% stockout hunting"


def test_each_attempt_names_the_run_s_own_vm_it_ran_on() -> None:
    """The VM made usable last before an attempt started (provision_end, recreate_end): a recreate in another zone
    moves the next attempt there, as another kind at its own list price; a run without its own VM has none."""
    events = [
        ev(0, tl.RUN_START), ev(1, tl.PROVISION_BEGIN), ev(5, tl.PROVISION_END, node="vm-a", zone="z1", capacity="spot", price_per_hour=2.5),
        ev(6, tl.ATTEMPT_START, 1), ev(10, tl.ATTEMPT_END, 1, result="preempted"), ev(11, tl.RECREATE_BEGIN, node="vm-a", zone="z1"),
        ev(20, tl.RECREATE_END, node="vm-a", zone="z2", capacity="on-demand", price_per_hour=8), ev(21, tl.ATTEMPT_START, 2),
        ev(30, tl.ATTEMPT_END, 2, result="succeeded"), ev(31, tl.RUN_END),
    ]  # fmt: skip
    report = goodput.analyse(events)
    assert [a.vm for a in report.attempts] == [goodput.RanOn("vm-a", "z1", "spot", 2.5), goodput.RanOn("vm-a", "z2", "on-demand", 8.0)]
    assert report.to_json()["attempts"][1]["vm"] == {"node": "vm-a", "zone": "z2", "capacity": "on-demand", "price_per_hour": 8.0}
    assert report.list_prices(99.0) == {1: 2.5, 2: 8.0}
    # each attempt's time at its VM's price, the run's end after the last attempt at the last one's
    first, second = (a.split.wall_s for a in report.attempts)
    assert first + second == 30 and sum(report.costs(99.0, report.list_prices(99.0)).values()) == pytest.approx((first * 2.5 + (second + 1) * 8) / 3600)
    plain = goodput.analyse([ev(0, tl.RUN_START), ev(1, tl.ATTEMPT_START, 1), ev(2, tl.ATTEMPT_END, 1, result="succeeded"), ev(3, tl.RUN_END)])
    assert [a.vm for a in plain.attempts] == [None] and plain.list_prices(3.0) == {1: 3.0}


@pytest.mark.parametrize("usd", ["4", None, -1, math.nan, math.inf, 1e7, True])
def test_a_node_event_s_price_that_is_no_price_is_none(usd: object) -> None:
    events = [ev(0, tl.RUN_START), ev(5, tl.PROVISION_END, node="vm-a", zone="z1", capacity=7, price_per_hour=usd), ev(6, tl.ATTEMPT_START, 1)]
    assert goodput.analyse(events).attempts[0].vm == goodput.RanOn("vm-a", "z1", None, None)


def test_a_hunt_that_never_ends_runs_to_the_run_s_end_and_a_hunting_share_never_passes_its_span() -> None:
    """A launcher killed while it hunted: no provision_end, no attempt; a hunting_s larger than the span is cut to it."""
    lost = goodput.analyse([ev(0, tl.RUN_START), ev(2, tl.PROVISION_BEGIN), ev(50, tl.NODE_CREATE, zone="a")])
    assert cats(lost) == {goodput.OTHER: 2, goodput.PROVISIONING: 48}
    odd = goodput.analyse([ev(0, tl.RUN_START), ev(0, tl.PROVISION_BEGIN), ev(10, tl.PROVISION_END, hunting_s=1e9), ev(11, tl.RUN_END)])
    assert cats(odd) == {goodput.HUNTING: 10, goodput.OTHER: 1}


def test_the_hosts_environment_is_its_own_category_in_each_attempt_it_preceded() -> None:
    """environment_begin -> environment_end (the ssh backend's, before an attempt's workers): `environment setup`,
    carved out of `other` before the first attempt and out of `restart` before a later one, and counted to the attempt
    whose workers it waited for; a launcher killed while it built leaves a begin that runs to the run's end."""
    events = [
        ev(0, tl.RUN_START),
        ev(1, tl.ENV_BEGIN, 1, step="packages", hosts=2),
        ev(21, tl.ENV_END, 1, step="packages", built=2),
        ev(22, tl.ENV_BEGIN, 1, step="setup", hosts=2),
        ev(25, tl.ENV_END, 1, step="setup", built=2),
        ev(26, tl.ATTEMPT_START, 1),
        ev(30, tl.RUNTIME_READY, 1, "worker:0"),
        ev(32, tl.FIRST_STEP, 1, "worker:0", step=1, source="keras"),
        *steps(1, [(50, 100)]),
        ev(51, tl.ATTEMPT_END, 1, result="preempted"),
        ev(52, tl.RESTART, 1, why="preemption"),
        ev(54, tl.ENV_BEGIN, 2, step="packages", hosts=2),
        ev(64, tl.ENV_END, 2, step="packages", built=2),  # the recreated VM's hosts built again, from the kept wheels
        ev(65, tl.ATTEMPT_START, 2),
        ev(70, tl.FIRST_STEP, 2, "worker:0", step=101, source="keras"),
        *steps(2, [(90, 200)]),
        ev(91, tl.ATTEMPT_END, 2, result="succeeded"),
        ev(92, tl.RUN_END),
    ]
    report = goodput.analyse(sorted(events, key=lambda e: e.t))
    found = cats(report)
    assert found[goodput.ENVIRONMENT] == 20 + 3 + 10
    assert found[goodput.RESTART] == 3 + 1 + 5  # 51 -> 54, 64 -> 65, 65 -> 70: the rest of the way back
    assert found[goodput.OTHER] == 1 + 1 + 1 + 1 + 1 + 1  # before, between the two steps, before the attempt, after the steps, after
    assert sum(found.values()) == pytest.approx(92)
    first, second = (attempt.split.categories[goodput.ENVIRONMENT] for attempt in report.attempts)
    assert (first, second) == (23, 10)
    assert "36% environment setup" in report.summary_line()
    killed = goodput.analyse([ev(0, tl.RUN_START), ev(2, tl.ENV_BEGIN, 1, step="packages"), ev(40, tl.ENV_BEGIN, 1, step="packages")])
    assert cats(killed)[goodput.ENVIRONMENT] == 38 and killed.total.wall_s == 40

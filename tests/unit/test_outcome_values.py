"""A launch's results and requests are values (issue 47): an Outcome, its Failure and JobRef, and the RunContext a
run is handed are built once per step and replaced, never edited by a layer below the one that made them."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest

from tpuctl.endings import Ending
from tpuctl.launch import secret_values
from tpuctl.launch.cause import Cause
from tpuctl.launch.console import logs
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Failure, JobRef, Outcome
from tpuctl.launch.runner import RunContext

SECRET = "hunter2-hunter2"


def _failure() -> Failure:
    return Failure("worker:0", "h", Ending.of_returncode(1), 1.0, ("step 1",), None, Cause("exception", f"ValueError: {SECRET}"))


def _job_ref() -> JobRef:
    return JobRef("TFJob", "j", "ns", "kubectl delete tfjob j", message=f"admission refused API_TOKEN={SECRET}")


def _context() -> RunContext:
    return RunContext("run-1", Path("/logs"), logs.LineWriter(io.StringIO()), print, colour=False)


@pytest.mark.parametrize(
    ("value", "field", "new"),
    [
        (Outcome(1, 1, 2.0, _failure()), "exit_code", 0),
        (Outcome(1, 1, 2.0, _failure()), "notes", ("a note",)),
        (_failure(), "cause", None),
        (_job_ref(), "deleted", True),
        (_context(), "timeline", None),
    ],
)
def test_an_edit_in_place_raises(value: Any, field: str, new: object) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, new)


def test_what_a_step_adds_to_an_outcome_is_a_new_tuple_not_an_append() -> None:
    outcome = Outcome(0, 1, 2.0, _failure())
    assert isinstance(outcome.notes, tuple) and outcome.failure is not None and isinstance(outcome.failure.tail, tuple)
    assert outcome.to_json(backend="local", run_id="r", log_dir=Path("/l"))["notes"] == []  # --json keeps its lists


def test_scrubbing_returns_a_new_outcome_and_leaves_the_one_it_was_given() -> None:
    job = Job(script="train.py", env=(("API_TOKEN", SECRET),), args=(f"--token={SECRET}",))
    given = Outcome(1, 1, 2.0, _failure(), job=_job_ref())
    scrubbed = secret_values.scrubbed_outcome(given, job)
    assert scrubbed is not given
    assert scrubbed.failure is not None and SECRET not in scrubbed.failure.status + (scrubbed.failure.cause.summary if scrubbed.failure.cause else "")
    assert scrubbed.job is not None and SECRET not in scrubbed.job.message
    assert given == Outcome(1, 1, 2.0, _failure(), job=_job_ref())  # the caller's value is as it was

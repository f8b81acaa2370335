"""Issue 35: one typed ending (tpuctl/endings.py) and the errors callers tell apart by type.

An end is read from what the process or the platform reported (an exit status, a signal, a lost
ssh session), once, into a Kind; every file keeps the words it always had, so older files read.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.standins.scripted_workers import Script, supervise
from tpuctl.backends.ssh.starter import HostProblem, launch_error
from tpuctl.cluster.worker_contract import PREEMPTED_EXIT_CODE
from tpuctl.endings import INTERRUPTED, RUN_STATES, Ending, Kind, exit_words, state_of
from tpuctl.inputs.errors import FAILED, LostConnection, PreflightFailed, TpuctlError
from tpuctl.launch.job import Job
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder


@pytest.mark.parametrize(
    ("returncode", "kind", "exit_code", "words"),
    [
        (0, Kind.SUCCEEDED, 0, "exit status 0"),
        (1, Kind.FAILED, 1, "exit status 1"),
        (PREEMPTED_EXIT_CODE, Kind.PREEMPTED, PREEMPTED_EXIT_CODE, f"exit status {PREEMPTED_EXIT_CODE}"),
        (-signal.SIGKILL, Kind.FAILED, 137, "killed by SIGKILL"),
        (-PREEMPTED_EXIT_CODE, Kind.FAILED, 128 + PREEMPTED_EXIT_CODE, f"killed by signal {PREEMPTED_EXIT_CODE}"),  # a real-time signal: no name
        (-99, Kind.FAILED, 227, "killed by signal 99"),
    ],
)
def test_a_returncode_is_read_once_into_its_kind(returncode: int, kind: Kind, exit_code: int, words: str) -> None:
    """Only an exit status of 42 is a preemption: a death by signal 42 is not, whatever its words say. A tool's end
    (ssh, kubectl, a compiler) is worded as a worker's."""
    assert Ending.of_returncode(returncode) == Ending(kind, exit_code, words)
    assert exit_words(returncode) == words


def test_the_words_on_disk_are_the_ones_older_files_hold() -> None:
    """attempt_end says `interrupted` for a stop, a record `stopped`, outcome.json `interrupted` or `failed` for the rest."""
    assert Ending(Kind.STOPPED, INTERRUPTED).to_json() == {"result": "interrupted", "exit_code": 130}
    assert Ending(Kind.HANG, 124).to_json() == {"result": "hang", "exit_code": 124}
    assert [Ending(k, 1).result for k in (Kind.SUCCEEDED, Kind.STOPPED, Kind.HANG, Kind.LOST, Kind.PREEMPTED)] == [
        "succeeded",
        "interrupted",
        "failed",
        "failed",
        "failed",
    ]
    assert RUN_STATES == ("running", "succeeded", "failed", "preempted", "stopped", "lost")
    assert f"{Kind.FAILED}" == "failed" and Kind.FAILED == "failed"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"result": "interrupted", "exit_code": 130}, Ending(Kind.STOPPED, 130)),  # attempt_end
        ({"result": "error", "exit_code": None}, Ending(Kind.ERROR, None)),
        ({"state": "stopped", "exit_code": 130}, Ending(Kind.STOPPED, 130)),  # a record, run_end
        ({"state": "preempted", "exit_code": 42}, Ending(Kind.PREEMPTED, 42)),
        ({"result": "failed", "exit_code": 7, "interrupted": False}, Ending(Kind.FAILED, 7)),  # outcome.json
        ({"result": "interrupted", "interrupted": True, "exit_code": 130}, Ending(Kind.STOPPED, 130)),
        ({"state": "running"}, None),
        ({"result": "exploded", "exit_code": "7"}, None),
    ],
)
def test_every_file_reads_back(fields: dict[str, object], expected: Ending | None) -> None:
    assert Ending.from_json(fields) == expected


@given(st.sampled_from(list(Kind)), st.none() | st.integers(-(1 << 31), 1 << 31))
def test_an_attempt_end_reads_back_as_written(kind: Kind, exit_code: int | None) -> None:
    assert Ending.from_json(Ending(kind, exit_code).to_json()) == Ending(kind, exit_code)


@given(st.dictionaries(st.sampled_from(["result", "state", "exit_code", "interrupted"]), st.none() | st.booleans() | st.integers() | st.text()))
def test_any_json_reads_as_an_ending_or_none(fields: dict[str, object]) -> None:
    found = Ending.from_json(fields)
    assert found is None or (isinstance(found.kind, Kind) and (found.exit_code is None or isinstance(found.exit_code, int)))


def test_a_run_state_is_one_of_the_records() -> None:
    """A hang, a lost worker or a job cancelled elsewhere is a failed run; only these three have states of their own."""
    states = {kind: state_of(Ending(kind, 1)) for kind in Kind}
    assert states == {
        Kind.SUCCEEDED: "succeeded",
        Kind.FAILED: "failed",
        Kind.STOPPED: "stopped",
        Kind.PREEMPTED: "preempted",
        Kind.HANG: "failed",
        Kind.LOST: "failed",
        Kind.CANCELLED: "failed",
        Kind.ERROR: "failed",
    }
    assert set(states.values()) < set(RUN_STATES)


def _attempt_ends(tmp_path: Path, exit_code: int) -> tuple[str, list[dict[str, object]]]:
    timeline = tl.Timeline(RunFolder(tmp_path).timeline)
    scripts = {"worker:0": [Script(exit=exit_code)], "worker:1": [Script()]}
    outcome, _, _, _ = supervise(tmp_path, Job("train.py", workers=2, max_preemptions=0), scripts, timeline=timeline)
    timeline.close()
    events = tl.read(RunFolder(tmp_path).timeline.read_text().splitlines()).events
    return state_of(outcome.ending), [e.fields for e in events if e.event == tl.ATTEMPT_END]


def test_a_worker_that_exits_124_itself_did_not_hang(tmp_path: Path) -> None:
    """--hang-timeout's exit status is 124 (timeout(1)'s); a script may exit 124 too. Its attempt failed: only tpuctl's
    own hang detection makes a hang (before issue 35 the attempt_end said `hang`, read back from the status)."""
    assert _attempt_ends(tmp_path, 124) == ("failed", [{"result": "failed", "exit_code": 124}])


def test_a_worker_that_exits_42_was_preempted(tmp_path: Path) -> None:
    """Once more than --max-preemptions allows (here 0): the run's state says preempted, not failed."""
    assert _attempt_ends(tmp_path, PREEMPTED_EXIT_CODE) == ("preempted", [{"result": "preempted", "exit_code": PREEMPTED_EXIT_CODE}])


def _doctor(hosts: str) -> str:
    return f"tpuctl doctor --hosts {hosts}"


def test_hosts_that_failed_before_anything_started_keep_their_kind() -> None:
    """The launch's error is of the hosts' one kind, so a caller tests its type; mixed kinds are a plain TpuctlError."""
    lost = [HostProblem(h, LostConnection(f"cannot reach {h} over ssh (3 attempts): Connection refused")) for h in ("b", "a")]
    checked = [HostProblem(h, PreflightFailed(f"{h}: no TensorFlow for python3")) for h in ("c", "a")]
    other = HostProblem("d", TpuctlError("d: script not found", exit_code=FAILED))
    unreachable = launch_error(lost, _doctor)
    assert (type(unreachable), unreachable.exit_code) == (LostConnection, FAILED)
    assert unreachable.message.startswith("2 hosts failed before anything started: cannot reach a") and "ssh HOST true" in str(unreachable.hint)
    preflight = launch_error(checked, _doctor)
    assert type(preflight) is PreflightFailed and "tpuctl doctor --hosts a,c" in str(preflight.hint)
    assert type(launch_error([*lost, other], _doctor)) is TpuctlError
    assert type(launch_error([checked[0], other], _doctor)) is TpuctlError

"""The process engine's worker states, its inbox, and the defaults a backend gets for what it does not say.

The Supervisor's rules built on these are checked in tests/unit/test_supervisor.py.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.standins.scripted_workers import BareHandle
from tpuctl.endings import Ending
from tpuctl.launch.outcome import Failure
from tpuctl.launch.process.events import Exited, Inbox, Ready, StacksRequested, StopSignal, WorkerState
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Handle, Starter

STARTING, READY, STOPPING = WorkerState.STARTING, WorkerState.READY, WorkerState.STOPPING
GONE = [WorkerState.SUCCEEDED, WorkerState.FAILED, WorkerState.STOPPED]


def test_ready_moves_only_a_starting_worker() -> None:
    assert STARTING.on_ready() is READY
    assert [state.on_ready() for state in [READY, STOPPING, *GONE]] == [READY, STOPPING, *GONE]


def test_a_stop_marks_live_workers_only() -> None:
    assert [state.on_stop() for state in [STARTING, READY, STOPPING]] == [STOPPING] * 3
    assert [state.on_stop() for state in GONE] == GONE


@pytest.mark.parametrize(
    ("before", "returncode", "after"),
    [
        (STARTING, 0, WorkerState.SUCCEEDED),
        (READY, 3, WorkerState.FAILED),
        (STARTING, -9, WorkerState.FAILED),
        (STOPPING, -2, WorkerState.STOPPED),  # tpuctl's SIGINT: not a failure of its own
        (STOPPING, 0, WorkerState.SUCCEEDED),  # a worker that handles SIGINT and ends well
    ],
)
def test_an_exit_tells_success_a_failure_of_its_own_and_tpuctls_stop_apart(before: WorkerState, returncode: int, after: WorkerState) -> None:
    assert before.on_exit(returncode) is after


def test_only_workers_that_have_not_exited_are_live() -> None:
    assert [state for state in WorkerState if state.live] == [STARTING, READY, STOPPING]


def test_the_inbox_counts_stopping_signals_and_keeps_events_in_order() -> None:
    inbox = Inbox()
    inbox.put(Ready(1, 0))
    inbox.signalled(signal.SIGINT)
    inbox.put(Exited(1, 0, returncode=2))
    inbox.put(StacksRequested())
    assert inbox.signals == 1
    assert [inbox.next(0) for _ in range(4)] == [Ready(1, 0), StopSignal(signal.SIGINT), Exited(1, 0, 2), StacksRequested()]
    started = time.monotonic()
    assert inbox.next(0.05) is None
    assert time.monotonic() - started >= 0.04


class _BareStarter(Starter):
    name = "bare"
    host = "h"

    def reserve(self, count: int) -> list[str]:
        return []

    def start(self, spec: WorkerSpec) -> Handle:
        return BareHandle()

    def started(self) -> None:
        pass

    def release(self) -> None:
        pass


def test_a_backend_that_says_nothing_more_gets_the_declared_defaults() -> None:
    starter, handle = _BareStarter(), BareHandle()
    failure = Failure(worker="worker:0", host="h", ending=Ending.of_returncode(1), runtime_s=1.0, tail=[], log=None)
    assert (starter.remote, starter.placement(2), starter.lost_to_preemption(failure)) == (False, None, None)
    assert (handle.can_give_stacks, handle.describe_exit(1), handle.process_group()) == (False, None, None)
    starter.after_preemption(print)  # returns at once: the hosts are as they were
    handle.request_stacks()  # asks nothing

"""The job engine (tpuctl/launch/follow/) driven by a scheduler written here: what any cluster's launch gets from it.

The scheduler plays a job's life from a script (its states, its lines, a signal to tpuctl at some poll);
everything past the Scheduler seam is the real engine, real signals included.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tests.standins.scripted_jobs import DONE, NOISE, RUNNING, Launch, Script, Stream
from tpuctl.endings import Kind
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.launch.follow.engine import JobFollower
from tpuctl.launch.follow.scheduler import JobStatus, LogBatch, OnInterrupt, Replica, ReplicaRun
from tpuctl.runs import records
from tpuctl.runs.recorded import Keeper
from tpuctl.runs.records import RunRecord


class Cancelling(Script):
    on_interrupt = OnInterrupt.CANCEL


@pytest.fixture
def launch(tmp_path: Path) -> Launch:
    return Launch(tmp_path)


def _running(*runs: ReplicaRun) -> JobStatus:
    return JobStatus("RUNNING", running=runs)


def test_each_state_change_is_said_once_and_success_exits_0(launch: Launch) -> None:
    states = [JobStatus("JOB_QUEUED", "QUEUED"), JobStatus("JOB_QUEUED", "QUEUED"), RUNNING, RUNNING, DONE]
    outcome = JobFollower(Script(list(states)), launch.context).run()
    said = [line.split(" after ")[0] for line in launch.notices if line.startswith("FakeJob j: ")]
    assert said == ["FakeJob j: QUEUED", "FakeJob j: RUNNING", "FakeJob j: SUCCEEDED"]
    assert (outcome.exit_code, outcome.ending.result, outcome.attempts, outcome.failure) == (0, "succeeded", 1, None)
    assert outcome.job is not None and (outcome.job.kind, outcome.job.name, outcome.job.message) == ("FakeJob", "j", "")


def test_lines_are_tagged_and_saved_in_the_run_folders_layout(launch: Launch) -> None:
    restarted = ReplicaRun("worker:1", attempt=2, host="pod-1")
    job = Script(
        [_running(restarted), _running(restarted), DONE],
        batches=[[LogBatch("worker:0", ["epoch 1\nepoch 2", NOISE])], [LogBatch("worker:0", ["epoch 3"])]],
        streams={restarted: Stream(b"restarted\n")},
    )
    follower = JobFollower(job, launch.context)
    assert follower.run().exit_code == 0
    assert {"[worker:0] epoch 1", "[worker:0] epoch 2", "[worker:0] epoch 3", "[worker:1] restarted"} <= set(launch.lines())
    assert not [line for line in launch.lines() if "oneDNN" in line]  # folded from the console, kept on disk
    assert follower.fold.note() is not None
    assert launch.folder.worker_log(1, "worker:0").read_text() == f"epoch 1\nepoch 2\n{NOISE}\nepoch 3\n"
    assert launch.folder.worker_log(2, "worker:1").read_text() == "restarted\n"  # one attempt a container run


@pytest.mark.parametrize(("oom", "cause"), [(False, "uncaught Python exception: ValueError: bad batch"), (True, "killed by the OOM killer")])
def test_a_failure_names_its_replica_with_its_last_lines_and_cause(launch: Launch, oom: bool, cause: str) -> None:
    run = ReplicaRun("worker:1", attempt=1, host="pod-1")
    failed = Replica("worker:1", "pod-1", "exited with 7", returncode=7, exit_code=7, oom_reported=oom)
    end = JobStatus("FAILED", end=Kind.FAILED, exit_code=7, message="replica failed", failed=failed)
    traceback = b'step 1\nTraceback (most recent call last):\n  File "t.py", line 1\nValueError: bad batch\n'
    outcome = JobFollower(Script([_running(run), end], streams={run: Stream(traceback)}), launch.context).run()
    assert (outcome.exit_code, outcome.ending.result) == (7, "failed")
    failure = outcome.failure
    assert failure is not None and (failure.worker, failure.host, failure.status, failure.exit_code) == ("worker:1", "pod-1", "exited with 7", 7)
    assert failure.tail == ("step 1", "Traceback (most recent call last):", '  File "t.py", line 1', "ValueError: bad batch")
    assert failure.cause is not None and failure.cause.summary.startswith(cause)
    assert failure.log == launch.folder.worker_log(1, "worker:1")
    assert outcome.job is not None and outcome.job.message == "replica failed"


def test_a_failure_that_names_no_replica_keeps_the_clusters_word(launch: Launch) -> None:
    end = JobStatus(end=Kind.FAILED, exit_code=FAILED, message="FakeJob j is gone (deleted?)")
    outcome = JobFollower(Script([RUNNING, end]), launch.context).run()
    assert (outcome.exit_code, outcome.failure) == (FAILED, None)
    assert outcome.job is not None and outcome.job.message == "FakeJob j is gone (deleted?)"


def test_the_last_lines_are_drained_after_the_end(launch: Launch) -> None:
    run = ReplicaRun("worker:0", attempt=1, host="pod-0")
    finishing = threading.Event()
    threading.Timer(0.2, finishing.set).start()  # the stream's last line comes after the job's end
    job = Script([_running(run), DONE], batches=[[], [], [LogBatch("worker:1", ["ingested late"])]], streams={run: Stream(b"a\nlast\n", hold=finishing)})
    assert JobFollower(job, launch.context).run().exit_code == 0
    assert "[worker:0] last" in launch.lines() and "[worker:1] ingested late" in launch.lines()
    assert job.reads == 5  # polled until two polls in a row brought nothing


def test_a_signal_leaves_the_job_running_and_says_how_to_delete_it(launch: Launch) -> None:
    run = ReplicaRun("worker:0", attempt=1, host="pod-0")
    stream = Stream(b"training\n")
    job = Script([_running(run), signal.SIGTERM], streams={run: stream})
    outcome = JobFollower(job, launch.context).run()
    assert (outcome.exit_code, outcome.interrupted, outcome.ending.result) == (130, True, "interrupted")
    assert outcome.job is not None and not outcome.job.deleted and outcome.job.ended_as == ""
    assert "received SIGTERM; FakeJob j (namespace ns) keeps running. Delete it with: fake delete j" in launch.notices
    assert job.cancels == 0 and stream.stopped


def test_a_signal_cancels_the_job_where_the_scheduler_says_so(launch: Launch) -> None:
    job = Cancelling([RUNNING, signal.SIGINT, JobStatus("CANCELLING"), JobStatus("CANCELLED", end=Kind.CANCELLED)])
    outcome = JobFollower(job, launch.context).run()
    assert (outcome.exit_code, outcome.interrupted) == (130, True)
    assert outcome.job is not None and (outcome.job.ended_as, outcome.job.message) == ("cancelled", "CANCELLED")
    assert job.cancels == 1
    assert "received SIGINT; cancelling FakeJob j" in launch.notices


def test_a_job_that_ends_by_itself_while_cancelled_keeps_its_own_outcome(launch: Launch) -> None:
    job = Cancelling([RUNNING, signal.SIGTERM, JobStatus("FAILED", end=Kind.FAILED, exit_code=FAILED, message="FAILED")])
    outcome = JobFollower(job, launch.context).run()
    assert (outcome.exit_code, outcome.interrupted) == (FAILED, False)


def test_a_job_cancelled_by_someone_else_is_an_interruption(launch: Launch) -> None:
    outcome = JobFollower(Script([RUNNING, JobStatus("CANCELLED", end=Kind.CANCELLED)]), launch.context).run()
    assert (outcome.exit_code, outcome.interrupted) == (130, True)
    assert outcome.job is not None and outcome.job.ended_as == "cancelled outside this launch"


def test_logs_that_cannot_be_read_cost_one_warning_not_the_run(launch: Launch) -> None:
    job = Script([RUNNING, RUNNING, RUNNING, DONE], batches=[TpuctlError("permission logging.logEntries.list denied")])
    outcome = JobFollower(job, launch.context).run()
    assert outcome.exit_code == 0
    assert [line for line in launch.notices if "cannot read" in line] == ["warning: cannot read the job's logs: permission logging.logEntries.list denied"]
    assert job.reads > 3


def test_a_stream_that_fails_says_why(launch: Launch) -> None:
    run = ReplicaRun("worker:0", attempt=1, host="pod-0")
    job = Script([_running(run), DONE], streams={run: Stream(b"", why="could not follow the log of pod pod-0: forbidden")})
    assert JobFollower(job, launch.context).run().exit_code == 0
    assert "could not follow the log of pod pod-0: forbidden" in launch.notices


def test_the_runs_record_names_the_job_while_it_runs(launch: Launch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tpuctl runs` shows a cluster's job as soon as it exists, not only once the run ended (issue 23)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    record = RunRecord("run-1", "fake", "train.py", str(launch.folder.path), 0.0, os.getpid(), "host")
    records.write(record)
    launch.context = replace(launch.context, keeper=Keeper(record, launch.notices.append))
    seen: list[str | None] = []

    class Watched(Script):
        def describe(self) -> JobStatus:
            seen.append(json.loads((records.folder() / "run-1.json").read_text())["job"])
            return super().describe()

    assert JobFollower(Watched([RUNNING, DONE]), launch.context).run().exit_code == 0
    assert seen and set(seen) == {"FakeJob j (ns)"}

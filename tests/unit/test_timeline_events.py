"""Every launch writes its timeline: the launcher's events, in order, through the fake backend of tests/standins/scripted_workers.py.

What a worker's runtime sends (`timeline {json}` on its control channel) is checked first as the launcher
receives it, then as the runtime sends it (tpuctl/runtime/timeline/) from a tiny fit in real TensorFlow on CPU.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.standins.event_files import scalar, write_events
from tests.standins.scripted_jobs import DONE, RUNNING
from tests.standins.scripted_jobs import Launch as FollowedLaunch
from tests.standins.scripted_jobs import Script as FakeJob
from tests.standins.scripted_workers import Script, supervise
from tpuctl.cluster.worker_contract import TIMELINE, timeline
from tpuctl.launch.execute import execute
from tpuctl.launch.follow.engine import JobFollower
from tpuctl.launch.follow.scheduler import JobStatus
from tpuctl.launch.job import Job
from tpuctl.launch.launch_options import LaunchOptions
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.prepare import Launch
from tpuctl.launch.process.progress import StepWatch
from tpuctl.launch.runner import RunContext, Runner
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.runtime.timeline.channel import Channel


def _events(tmp_path: Path, job: Job, scripts: dict[str, list[Script]]) -> tuple[Outcome, list[tl.Event]]:
    timeline = tl.Timeline(RunFolder(tmp_path).timeline)
    outcome, _, _, _ = supervise(tmp_path, job, scripts, timeline=timeline)
    timeline.close()
    reading = tl.read(RunFolder(tmp_path).timeline.read_text().splitlines())
    assert reading.skipped == 0
    return outcome, reading.events


def _launcher(events: list[tl.Event]) -> list[tuple[str, int | None]]:
    """The attempt-level events, in order (the per-worker ones interleave as the workers' threads go)."""
    wanted = {tl.ATTEMPT_START, tl.ATTEMPT_END, tl.FAILURE, tl.PREEMPTED, tl.HANG, tl.RESTART}
    return [(e.event, e.attempt) for e in events if e.event in wanted]


def _one(events: list[tl.Event], name: str, attempt: int = 1) -> tl.Event:
    found = [e for e in events if e.event == name and e.attempt == attempt]
    assert len(found) == 1, (name, found)
    return found[0]


def _step(step: int, event: str = tl.STEP) -> str:
    return tl.MESSAGE_PREFIX + json.dumps({"event": event, "step": step, "source": "keras"})


def test_a_clean_run_has_each_worker_start_ready_and_its_steps_between_the_attempts_start_and_end(tmp_path: Path) -> None:
    steps = [_step(1, tl.FIRST_STEP), _step(1), _step(2), _step(3)]
    hostile = [tl.MESSAGE_PREFIX + '{"event": "attempt_end"}', tl.MESSAGE_PREFIX + "not json"]
    scripts = {"worker:0": [Script(messages=steps + hostile, delay=0.2)], "worker:1": [Script(delay=0.2)]}
    outcome, events = _events(tmp_path, Job("train.py", workers=2), scripts)
    assert outcome.exit_code == 0
    assert _launcher(events) == [(tl.ATTEMPT_START, 1), (tl.ATTEMPT_END, 1)]
    assert events[0].event == tl.ATTEMPT_START and events[-1].event == tl.ATTEMPT_END
    assert events[-1].fields == {"result": "succeeded", "exit_code": 0}
    for worker in ("worker:0", "worker:1"):
        own = [e.event for e in events if e.worker == worker and e.event in (tl.WORKER_START, tl.RUNTIME_READY)]
        assert own == [tl.WORKER_START, tl.RUNTIME_READY]
    first = _one(events, tl.FIRST_STEP)
    assert (first.worker, first.fields) == ("worker:0", {"step": 1, "source": "keras"})
    # Sampled: the first step is written, the last one at the attempt's end; nothing from worker:1.
    assert [(e.worker, e.fields["step"]) for e in events if e.event == tl.STEP] == [("worker:0", 1), ("worker:0", 3)]


def test_a_message_nested_past_any_event_is_dropped_and_the_launchers_reader_reads_on(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A worker's `timeline` line 3 KB long and 1,500 levels deep (within the line limit): json.loads would recurse to a
    RecursionError on the launcher's message reader, ending it with a traceback on the console; dropped instead, and
    the steps sent after it reach the timeline."""
    nested = tl.MESSAGE_PREFIX + '{"event": "step", "step": ' + "[" * 1500 + "]" * 1500 + "}"
    scripts = {"worker:0": [Script(messages=[nested, _step(1, tl.FIRST_STEP), _step(2)], delay=0.2)]}
    outcome, events = _events(tmp_path, Job("train.py", workers=1), scripts)
    assert outcome.exit_code == 0
    assert [(e.event, e.fields["step"]) for e in events if e.event in (tl.FIRST_STEP, tl.STEP)] == [(tl.FIRST_STEP, 1), (tl.STEP, 2)]
    assert "Traceback" not in capfd.readouterr().err


def test_a_failure_then_a_restart_then_a_clean_second_attempt(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(lines=["boom"], exit=2), Script()], "worker:1": [Script(exit=None), Script()]}
    outcome, events = _events(tmp_path, Job("train.py", workers=2, max_restarts=1), scripts)
    assert (outcome.exit_code, outcome.attempts) == (0, 2)
    assert _launcher(events) == [
        (tl.ATTEMPT_START, 1),
        (tl.FAILURE, 1),
        (tl.ATTEMPT_END, 1),
        (tl.RESTART, 1),
        (tl.ATTEMPT_START, 2),
        (tl.ATTEMPT_END, 2),
    ]
    failure = _one(events, tl.FAILURE)
    assert (failure.worker, failure.fields["status"]) == ("worker:0", "exit status 2")
    assert _one(events, tl.ATTEMPT_END).fields == {"result": "failed", "exit_code": 2}
    assert _one(events, tl.RESTART).fields["why"] == "failure"
    assert _one(events, tl.ATTEMPT_END, 2).fields == {"result": "succeeded", "exit_code": 0}
    assert len([e for e in events if e.event == tl.WORKER_START]) == 4


def test_a_preemption_is_said_and_its_restart_is_for_preemption(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(exit=42), Script()]}
    outcome, events = _events(tmp_path, Job("train.py", workers=1), scripts)
    assert (outcome.exit_code, outcome.attempts) == (0, 2)
    assert _launcher(events) == [
        (tl.ATTEMPT_START, 1),
        (tl.PREEMPTED, 1),
        (tl.ATTEMPT_END, 1),
        (tl.RESTART, 1),
        (tl.ATTEMPT_START, 2),
        (tl.ATTEMPT_END, 2),
    ]
    assert _one(events, tl.PREEMPTED).worker == "worker:0"
    assert _one(events, tl.ATTEMPT_END).fields == {"result": "preempted", "exit_code": 42}
    assert _one(events, tl.RESTART).fields["why"] == "preemption"


def test_a_hang_says_how_long_nothing_moved(tmp_path: Path) -> None:
    scripts = {"worker:0": [Script(exit=None)]}
    outcome, events = _events(tmp_path, Job("train.py", workers=1, hang_timeout=0.3), scripts)
    assert outcome.exit_code == 124
    assert _launcher(events) == [(tl.ATTEMPT_START, 1), (tl.HANG, 1), (tl.ATTEMPT_END, 1)]
    assert _one(events, tl.HANG).fields["idle_s"] >= 0.3
    assert _one(events, tl.ATTEMPT_END).fields == {"result": "hang", "exit_code": 124}


class _Runner(Runner):
    name = "fake"

    def request(self, job: Job, run_id: str) -> Any:
        raise AssertionError("not dry")

    def run(self, job: Job, context: RunContext) -> Outcome:
        assert context.timeline is not None
        context.timeline.event(tl.ATTEMPT_START, attempt=1)
        return Outcome(exit_code=3, attempts=1, elapsed_s=0.0)


def test_the_launch_core_opens_the_timeline_and_writes_the_runs_start_and_end(tmp_path: Path) -> None:
    launch = Launch(Job("train.py"), _Runner(), LaunchOptions(log_dir=str(tmp_path / "logs")), "run-x")
    outcome = execute(launch, io.StringIO(), lambda line: None)
    assert outcome.exit_code == 3
    events = tl.read(RunFolder(tmp_path / "logs").timeline.read_text().splitlines()).events
    assert [e.event for e in events] == [tl.RUN_START, tl.ATTEMPT_START, tl.RUN_END]
    assert events[0].fields == {"run_id": "run-x", "backend": "fake", "script": "train.py"}  # its file name: the view shows it
    assert events[-1].fields == {"exit_code": 3, "state": "failed"}


# A worker's runtime as bootstrap.py installs it; then, in this one process (one TensorFlow import, not two), a tiny fit with
# BackupAndRestore and a tf.train.Checkpoint saved and restored, in Keras 3 and then in tf-keras: the modules `tf.keras` is
# under TF_USE_LEGACY_KERAS=0 and =1. The hooks patch each module as it is imported; what each fit told is read before the
# next starts, and each starts as a worker's first fit (its channel has sent no first step yet).
FIT = """
import importlib, json, os, socket, sys, tempfile
ours, theirs = socket.socketpair()
ours.setblocking(False)  # the runtime's own copy of `theirs` stays open: read what came, no EOF
from tpuctl.runtime.timeline import channel, hooks
link = channel.Channel(theirs.fileno())
hooks.install(link)
import numpy as np
import tensorflow as tf

def told():
    data = b""
    try:
        while chunk := ours.recv(65536):
            data += chunk
    except BlockingIOError:
        pass
    return data.decode().splitlines()

def fit(keras):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    folder = tempfile.mkdtemp()
    backup = keras.callbacks.BackupAndRestore(os.path.join(folder, "backup"))
    validation = (np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32"))
    model.fit(np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"), batch_size=8, epochs=2, verbose=0, callbacks=[backup], validation_data=validation)
    checkpoint = tf.train.Checkpoint(model=model)
    checkpoint.restore(checkpoint.save(os.path.join(folder, "ckpt")))

said = {}
for name in ("keras", "tf_keras"):
    link.first_step_sent = False
    fit(importlib.import_module(name))
    said[name] = told()
print(json.dumps(said))
"""


@pytest.fixture(scope="module")
def told_by_real_fits() -> dict[str, list[str]]:
    """The lines each Keras' fit sent, by module name."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TF_USE_LEGACY_KERAS", None)
    done = subprocess.run([sys.executable, "-c", FIT], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said: dict[str, list[str]] = json.loads(done.stdout.splitlines()[-1])
    return said


@pytest.mark.parametrize("module", ["keras", "tf_keras"], ids=["keras3", "tf-keras"])
def test_the_runtime_tells_the_first_step_steps_validation_and_checkpoints_of_a_real_fit(told_by_real_fits: dict[str, list[str]], module: str) -> None:
    lines = told_by_real_fits[module]
    assert all(line.startswith(tl.MESSAGE_PREFIX) for line in lines)
    said = [json.loads(line[len(tl.MESSAGE_PREFIX) :]) for line in lines]
    assert {s["event"] for s in said} <= tl.FROM_WORKERS
    events = [s["event"] for s in said]
    # The first batch's end: the first step, then a step (sampled: a 1 s fit sends one or two), and the fit's last.
    assert said[0] == {"event": tl.FIRST_STEP, "step": 1, "source": "keras"}
    assert said[1] == {"event": tl.STEP, "step": 1, "source": "keras"} and 2 <= events.count(tl.STEP) <= 4
    assert [s["step"] for s in said if s["event"] == tl.STEP][-1] == 16  # 2 epochs of 8 batches
    # Each epoch validates (fit's own evaluate, with fit's callbacks), then BackupAndRestore saves at the epoch's end (not
    # nested: save -> write is one save); then the Checkpoint's save and restore.
    others = [e for e in events if e not in (tl.FIRST_STEP, tl.STEP)]
    assert others == [tl.EVAL_BEGIN, tl.EVAL_END, tl.SAVE_BEGIN, tl.SAVE_END] * 2 + [tl.SAVE_BEGIN, tl.SAVE_END, tl.RESTORE_BEGIN, tl.RESTORE_END]


def test_a_full_channel_drops_the_line_and_never_waits() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        channel = Channel(theirs.fileno())
        for step in range(100_000):
            channel.send(tl.STEP, step=step, source="keras")
            if channel.dropped:
                break
        assert channel.dropped == 1
        ours.setblocking(False)
        received = b""
        try:
            while chunk := ours.recv(1 << 20):
                received += chunk
        except BlockingIOError:
            pass
        assert received.endswith(b"\n") and all(json.loads(line[len(tl.MESSAGE_PREFIX) :]) for line in received.decode().splitlines())


def test_tpuctl_timeline_0_turns_the_runtimes_part_off() -> None:
    assert (timeline({}), timeline({TIMELINE: "1"}), timeline({TIMELINE: "0"})) == (True, True, False)


def test_a_step_left_out_by_sampling_is_written_at_its_attempts_end_with_the_time_it_came(tmp_path: Path) -> None:
    timeline = tl.Timeline(tmp_path / "timeline.jsonl")
    for step in (1, 2, 3):
        timeline.event(tl.STEP, attempt=1, worker="worker:0", step=step)
    time.sleep(0.01)  # the lines' times are to the millisecond
    timeline.event(tl.ATTEMPT_END, attempt=1)
    timeline.flush_steps(1)
    timeline.close()
    lines = (tmp_path / "timeline.jsonl").read_text().splitlines()
    events = tl.read(lines).events
    assert [(e.event, e.fields.get("step")) for e in events] == [(tl.STEP, 1), (tl.STEP, 3), (tl.ATTEMPT_END, None)]
    assert json.loads(lines[-1])["step"] == 3  # written last, stamped when it came: before the attempt's end


def test_the_job_engine_writes_each_state_the_job_is_seen_in_once(tmp_path: Path) -> None:
    launch = FollowedLaunch(tmp_path)
    job_timeline = tl.Timeline(launch.folder.timeline)
    launch.context = replace(launch.context, timeline=job_timeline)
    states = [JobStatus("JOB_QUEUED", "QUEUED"), JobStatus("JOB_QUEUED", "QUEUED"), RUNNING, RUNNING, DONE]
    assert JobFollower(FakeJob(states), launch.context).run().exit_code == 0
    job_timeline.close()
    events = tl.read(launch.folder.timeline.read_text().splitlines()).events
    assert [(e.event, e.fields["state"], e.fields["label"]) for e in events] == [
        (tl.JOB_STATE, "JOB_QUEUED", "QUEUED"),
        (tl.JOB_STATE, "RUNNING", "RUNNING"),
        (tl.JOB_STATE, "SUCCEEDED", "SUCCEEDED"),
    ]
    assert events[0].fields["job"] == "FakeJob j (ns)"


def _summaries(folder: Path, steps: range) -> None:
    """An event file of one writer (a worker process), as TensorBoard's own writer writes it."""
    write_events(folder, [scalar("loss", step, 1.0) for step in steps], filename_suffix=f".{steps.start}")


def test_the_model_dirs_steps_are_this_attempts_only(tmp_path: Path) -> None:
    """An earlier attempt's event file (steps to 99) is never read: this attempt's steps 1 to 3 are its steps."""
    _summaries(tmp_path, range(0, 100))
    steps: list[int] = []
    moved = threading.Event()
    watch = StepWatch(str(tmp_path), moved.set, steps.append, hang_timeout=0.5)
    watch.start()
    try:
        time.sleep(1.0)  # the watch has listed what was there (its first act, on its thread)
        _summaries(tmp_path, range(1, 4))
        assert moved.wait(10)
    finally:
        watch.stop()
    assert steps == [3]

"""Nothing tpuctl prints from a file, a record, a remote or a name reaches the terminal as a control sequence (issue 46).

Every string a run record holds, every string a timeline's events carry, every string of a run's view and a stacks
view written to the run's folder is given escape sequences of each kind a terminal acts on: a screen clear (CSI), a
window title and a hyperlink (OSC, OSC 8), their one-character C1 forms, BEL, backspace, carriage return, DEL and a
right-to-left override. What `runs`, `report`, `report --timeline`, `stacks` and `logs` print (stdout and stderr, as a
pipe gets it) must hold none of them; the drawing in colour only its own SGR colour sequences.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.standins.cli_calls import Result, invoke
from tests.standins.hostile_text import NASTY, leaks
from tpuctl.cli.diagnosis import timeline_drawing
from tpuctl.runs import proof, records, view
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.tensorboard_plugin import checking

NAME = NASTY.replace("/", "|").replace("\x00", "")  # what a file name can hold
RUN_ID = "20261125-103000-train-abc123"
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # the drawing's own colours, and only those


def assert_clean(result: Result, args: list[str]) -> None:
    assert result.crash is None, result.explain(args)
    assert not leaks(result.out) and not leaks(result.err), (args, leaks(result.out), leaks(result.err), result.out[-600:], result.err[-600:])


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    return tmp_path


def write_timeline(folder: Path) -> None:
    """A run on a TPU VM of its own, preempted once, recreated elsewhere, with every string field of every event
    (and every worker name) escape-laden."""
    folder.mkdir(parents=True, exist_ok=True)
    clock = [1000.0]

    def now() -> tuple[float, float]:
        clock[0] += 5.0
        return clock[0], 1_764_340_000.0 + clock[0]

    timeline = tl.Timeline(RunFolder(folder).timeline, clock=now)
    worker = f"worker:0{NASTY}"
    timeline.event(tl.RUN_START, run_id=NASTY, backend=NASTY, script=NASTY)
    timeline.event(tl.PROVISION_BEGIN, types=NASTY, candidates=NASTY)
    timeline.event(tl.NODE_CREATE, node=NASTY, zone=NASTY, type=NASTY, capacity=NASTY)
    timeline.event(tl.PROVISION_END, node=NASTY, zone=NASTY, capacity=NASTY, price_per_hour=1.5, tried=NASTY, hunting_s=1.0)
    for attempt in (1, 2):
        timeline.event(tl.ATTEMPT_START, attempt=attempt)
        timeline.event(tl.WORKER_START, attempt=attempt, worker=worker)
        timeline.event(tl.RUNTIME_READY, attempt=attempt, worker=worker)
        timeline.event(tl.FIRST_STEP, attempt=attempt, worker=worker, step=1, source=NASTY)
        timeline.event(tl.SAVE_BEGIN, attempt=attempt, worker=worker, path=NASTY)
        timeline.event(tl.SAVE_END, attempt=attempt, worker=worker, path=NASTY)
        timeline.event(tl.STEP, attempt=attempt, worker=worker, step=800, source=NASTY)
        timeline.flush_steps(attempt)
        if attempt == 1:
            timeline.event(tl.HANG, attempt=attempt, worker=worker, idle_s=3.0, words=NASTY, summary=NASTY)
            timeline.event(tl.PREEMPTED, attempt=attempt, worker=worker, status=NASTY, words=NASTY)
            timeline.event(tl.FAILURE, attempt=attempt, worker=worker, status=NASTY, words=NASTY, result=NASTY)
            timeline.event(tl.ATTEMPT_END, attempt=attempt, result=NASTY, exit_code=1, words=NASTY)
            timeline.event(tl.RECREATE_BEGIN, node=NASTY, zone=NASTY, condition=NASTY)
            timeline.event(tl.RECREATE_END, node=NASTY, zone=NASTY, capacity=NASTY, price_per_hour=2.5)
            timeline.event(tl.RESTART, why=NASTY, next_attempt=2, words=NASTY)
        else:
            timeline.event(tl.JOB_STATE, state=NASTY, words=NASTY)
            timeline.event(tl.ATTEMPT_END, attempt=attempt, result="succeeded", exit_code=0)
    timeline.event(tl.NODE_DELETE, node=NASTY, zone=NASTY, fate=NASTY)
    timeline.event(tl.RUN_END, exit_code=0, state=NASTY)
    timeline.close()


def write_record(folder: Path, name: str = RUN_ID, **values: Any) -> None:
    """A record as the file `name`.json, bypassing RunRecord's checks (a record someone else wrote, or an older tpuctl's)."""
    body = RunRecord(name, "local", "train.py", str(folder), time.time() - 100, os.getpid(), "here", state="succeeded", ended=time.time(), exit_code=0)
    raw = {**body.to_json(), "tpu": "v5litepod-8", "zone": "us-west4-a", "capacity": "spot", "price_per_hour": 1.5, "price_note": "list price"}
    raw |= {"created_node": "r-node", "project": "p", "node_fate": "deleted", "node_end": "delete", **values}
    where = records.folder()
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    (where / f"{name}.json").write_text(json.dumps(raw))


STRING_FIELDS = [f.name for f in fields(RunRecord) if "str" in str(f.type)]
COMMANDS = (["runs"], ["runs", "--state", "succeeded"], ["report", RUN_ID], ["report", RUN_ID, "--timeline"], ["report", "logs/" + RUN_ID, "--timeline"])
OTHERS = (["report", RUN_ID + "-b"], ["stop", RUN_ID + "-b"], ["stacks", "--list"], ["logs", RUN_ID + "-b"])


def test_no_field_of_a_record_or_event_of_a_timeline_reaches_the_terminal_as_a_control_sequence(state: Path) -> None:
    """Each string field of a record in turn (a record whose field fails its checks is passed over with one warning,
    which quotes it), beside a record escape-laden where no check looks; the run's timeline escape-laden throughout,
    and the view drawn from it as `report --timeline` draws it (checked, then drawn), in colour too, with every string of it
    escape-laden once more (but its schema's name: a view of another schema is refused in one line, never drawn)."""
    folder = state / "logs" / RUN_ID
    write_timeline(folder)
    write_record(folder, RUN_ID + "-b", job=NASTY, backend=NASTY, script=NASTY, host=NASTY)
    for field in STRING_FIELDS:
        value = NASTY.replace("\x00", "") if field == "log_dir" else NASTY  # the OS's paths hold no NUL: from_json refuses one
        write_record(folder, **{field: f"/{value}" if field == "log_dir" else value})
        for args in COMMANDS:
            assert_clean(invoke(args), [*args, f"({field})"])
    for args in OTHERS:
        assert_clean(invoke(args), args)
    built, _ = view.with_report(RunFolder(folder), live=False)
    for shown in (built, {**_laden(built), "schema": built["schema"]}):
        for color in (False, True):
            lines = timeline_drawing.draw(checking.checked(shown, logdir=""), width=120, color=color)
            assert not leaks(_SGR.sub("", "\n".join(lines))), (color, [line for line in lines if leaks(_SGR.sub("", line))][:3])


def _laden(value: object) -> Any:
    """`value` with NASTY added to each string it holds (keys too, beside the view's own: its parts are still drawn)."""
    if isinstance(value, str):
        return value + NASTY
    if isinstance(value, dict):
        laden = {key: _laden(item) for key, item in value.items()}
        return {_laden(key): item for key, item in laden.items()} | laden
    if isinstance(value, list):
        return [_laden(item) for item in value]
    return value


def test_worker_log_names_in_a_log_folder_are_shown_escaped(state: Path) -> None:
    folder = state / "logs" / RUN_ID
    write_timeline(folder)
    write_record(folder)
    attempt = RunFolder(folder).make_attempt(1)
    (attempt / f"worker-0@{NAME}.log").write_text("hello\n")
    (attempt / f"{NAME}.log").write_text("hello\n")
    result = invoke(["logs", RUN_ID])
    assert_clean(result, ["logs", RUN_ID])
    assert result.out.count("hello") == 2, result.out


@pytest.fixture
def answering(state: Path) -> Iterator[Path]:
    """A running run of this process's that answers `tpuctl stacks` (its SIGQUIT handler writes the view a real launch's
    would, here escape-laden as a worker's dump can make it)."""
    folder = state / "logs" / RUN_ID
    folder.mkdir(parents=True)
    run = RunFolder(folder)
    pid = os.getpid()  # a record proven this process's run (runs/proof.py): this machine's, its start time, its claim
    record = RunRecord(RUN_ID, "local", NASTY, str(folder), time.time(), pid, socket.gethostname(), answers_stacks=True, pid_start=proof.start_time(pid))
    records.write(record)
    claim = run.claim(RUN_ID)

    def answer(signum: int, frame: FrameType | None) -> None:
        run.stacks_view.write_text(f'stacks of 2 workers:\n  worker:0  {NASTY}\n    File "{NASTY}", line 3 in {NASTY}\n')

    previous = signal.signal(signal.SIGQUIT, answer)
    try:
        yield folder
    finally:
        signal.signal(signal.SIGQUIT, previous)
        os.close(claim)


def test_a_stacks_view_from_the_runs_folder_is_printed_escaped_line_by_line(answering: Path) -> None:
    for args in (["stacks", RUN_ID, "--wait", "5"], ["stacks", "--list"]):
        result = invoke(args)
        assert_clean(result, args)
        assert result.code == 0, result.explain(args)
    shown = invoke(["stacks", RUN_ID, "--wait", "5"]).out
    assert shown.count("\n") == 3 and "\\x1b]8;;" in shown, shown  # its lines kept, each escape written out


def test_sync_names_its_files_and_what_it_leaves_out_escaped(state: Path) -> None:
    """`launch --sync`'s largest files and what it leaves out (a link out of the folder, its target quoted; a FIFO),
    as a dry run shows them and a launch says them, from names in the script's folder."""
    folder = state / "work"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    (folder / f"big-{NAME}.bin").write_bytes(b"x" * 4096)
    (folder / f"link-{NAME}").symlink_to(f"/{NAME}")
    os.mkfifo(folder / f"fifo-{NAME}")
    args = ["launch", str(folder / "train.py"), "--hosts", "a,b", "--sync", "--dry-run"]
    result = invoke(args)
    assert_clean(result, args)
    assert "sync: largest: big-" in result.out and "sync: left out: fifo-" in result.out, result.out
    # A launch says what it leaves out before it connects: to a port where nothing listens, it ends there.
    args = ["launch", str(folder / "train.py"), "--hosts", "127.0.0.1", "--ssh-option", "Port=1", "--sync"]
    result = invoke(args, limit_s=30)
    assert_clean(result, args)
    assert result.code == 1 and "tpuctl: sync: left out: fifo-" in result.err, result.explain(args)

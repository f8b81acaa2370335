"""`tpuctl runs | logs | stop | attach` (issue 23) against real detached launches of plain-Python workers.

Each launch is `--strategy none` with a script written here, its state folder (records, run
folders) in tmp_path. What needs no process (RUN prefixes, pruning, hostile values, corrupt
records, and reading what a launch left: `runs`, `logs` of a run that ended) runs in this process
through the real entry point, and so do `logs -f` and `stop` of a run whose workers run (their claims are what
they print and the run they follow or end); launching, attaching and the stop during start-up are processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import alive, read_pids, run_tpuctl, tpuctl_cmd, wait_for
from tests.standins.cli_calls import Result, in_process, invoke
from tpuctl import endings
from tpuctl.endings import Kind
from tpuctl.runs import records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord

# A worker: writes its pid, waits START_S, prints LINES lines STEP_S apart, then exits 3 where EXIT_ON names its index.
WORKER = """\
import os, sys, time
index = int(os.environ["TPUCTL_WORKER_INDEX"])
open(os.path.join(os.environ["PIDS"], f"{index}.pid"), "w").write(str(os.getpid()))
start_s, lines, step_s, exit_on = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
time.sleep(start_s)
for step in range(lines):
    print(f"w{index} step {step}", flush=True)
    time.sleep(step_s)
sys.exit(3 if str(index) in exit_on else 0)
"""


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    (folder / "pids").mkdir(parents=True)
    (folder / "train.py").write_text(WORKER)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PIDS", str(folder / "pids"))
    monkeypatch.chdir(folder)
    return folder


def tpuctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_tpuctl(*args, timeout=timeout)


def detach(*worker_args: str, options: tuple[str, ...] = ()) -> str:
    """A detached launch of two workers (`train.py START_S LINES STEP_S [EXIT_ON...]`); its run id."""
    done = tpuctl("launch", "train.py", "--workers", "2", "--strategy", "none", *options, "--detach", "--", *worker_args)
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done
    return done.stdout.strip()


def record_of(run_id: str) -> RunRecord:
    return records.find(run_id, print)[0]


def ended(run_id: str, timeout: float = 60) -> RunRecord:
    wait_for(lambda: record_of(run_id).state != endings.RUNNING, timeout)
    return record_of(run_id)


def stop(run_id: str) -> None:
    """Leave nothing running behind a test that failed half-way (whatever the stop says)."""
    invoke(["stop", run_id], limit_s=90)


# --- runs -----------------------------------------------------------------------------------


def test_runs_lists_every_run_newest_first_as_a_table_and_as_json(work: Path) -> None:
    first = detach("0", "1", "0")
    second = detach("0", "1", "0", "1")
    assert ended(first).state == Kind.SUCCEEDED and ended(second).state == Kind.FAILED
    table = in_process("runs")
    assert table.code == 0 and table.err == "", table.err
    head, *rows = table.out.splitlines()
    assert head.split() == ["RUN", "BACKEND", "SCRIPT", "STARTED", "DURATION", "STATE", "EXIT", "LOG", "DIR"]
    assert [row.split()[0] for row in rows] == [second, first]
    assert rows[0].split()[1:3] == ["local", "train.py"] and rows[0].split()[-3:-1] == ["failed", "3"]
    assert rows[1].split()[-3:-1] == ["succeeded", "0"]
    listed = json.loads(in_process("runs", "--json").out)
    assert [run["run_id"] for run in listed] == [second, first]
    assert {"run_id", "backend", "state", "exit_code", "log_dir", "started", "duration_s", "job"} <= set(listed[0])
    assert (listed[0]["state"], listed[0]["exit_code"], listed[0]["backend"]) == ("failed", 3, "local")
    assert Path(listed[1]["log_dir"], "outcome.json").is_file() and listed[1]["duration_s"] > 0
    only = json.loads(in_process("runs", "--json", "--state", "succeeded", "--limit", "5").out)
    assert [run["run_id"] for run in only] == [first]


def test_a_corrupt_record_among_good_ones_costs_one_warning(work: Path, tmp_path: Path) -> None:
    good = RunRecord("20260101-000000-train-good", "local", "train.py", str(tmp_path / "good"), 1.0, 1, "host", state="succeeded", exit_code=0)
    records.write(good)
    (records.folder() / "20260101-000000-train-bad.json").write_text('{"run_id": "x", "state": ')
    (records.folder() / "20260101-000000-train-odd.json").write_text(json.dumps({**good.to_json(), "run_id": "../../etc", "pid": "1"}))
    result = invoke(["runs", "--json"])
    assert result.code == 0 and [run["run_id"] for run in json.loads(result.out)] == [good.run_id], result.explain(["runs"])
    warnings = result.err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("tpuctl: warning: skipped a run record") and "and 1 more" in warnings[0]


# --- logs -----------------------------------------------------------------------------------


def test_logs_follow_a_run_to_its_end_tagged_by_worker_and_attempt(work: Path) -> None:
    run = detach("0", "3", "0.3", "1", options=("--max-restarts", "1"))
    followed = in_process("logs", run, "-f", limit_s=60)
    assert followed.code == 0, followed.err
    assert record_of(run).state == Kind.FAILED, "-f ended before the run did"
    lines = followed.out.splitlines()
    assert "--- attempt 2 ---" in lines
    for attempt in (lines[: lines.index("--- attempt 2 ---")], lines[lines.index("--- attempt 2 ---") + 1 :]):
        mine = [line for line in attempt if line.startswith("[worker:1] ")]
        assert mine == [f"[worker:1] w1 step {n}" for n in range(3)], attempt
    again = in_process("logs", run)
    each = [f"[worker:{i}] w{i} step {n}" for i in (0, 1) for n in range(3)]
    steps = [line for line in again.out.splitlines() if " step " in line or line.startswith("---")]  # worker:0 may be stopped mid-sleep
    assert again.code == 0 and steps == [*each, "--- attempt 2 ---", *each], "worker by worker, in the plan's order"
    one = in_process("logs", run, "--worker", "1")
    assert one.out.splitlines() == [f"[worker:1] w1 step {n}" for n in range(3)] + ["--- attempt 2 ---"] + [f"[worker:1] w1 step {n}" for n in range(3)]
    assert in_process("logs", run, "--worker", "worker:1").out == one.out
    missing = in_process("logs", run, "--worker", "chief:0")
    assert missing.code == 1 and missing.err.startswith("Error: chief:0 has no log") and "worker:0, worker:1" in missing.err


def test_logs_without_a_run_take_the_newest_running_one_and_follow_new_lines(work: Path) -> None:
    older = detach("0", "1", "0")
    ended(older)
    run = detach("1", "3", "0.3")
    try:
        followed = in_process("logs", "-f", limit_s=60)
        assert followed.code == 0 and f"tpuctl: the newest running run: {run}" in followed.err
        assert sorted(followed.out.splitlines()) == sorted(f"[worker:{i}] w{i} step {n}" for i in (0, 1) for n in range(3))
    finally:
        stop(run)


def test_a_fifo_or_a_link_to_dev_zero_among_the_logs_is_passed_over(work: Path) -> None:
    run = detach("0", "1", "0")
    attempt = Path(ended(run).log_dir) / "attempt-1"
    os.mkfifo(attempt / "worker-2.log")
    (attempt / "worker-3.log").symlink_to("/dev/zero")
    (attempt / "worker-4.log").mkdir()
    for follow in ((), ("-f",)):
        shown = in_process("logs", run, *follow, limit_s=20)  # a read that blocked would end as Hang, a crash
        assert shown.code == 0 and shown.out.splitlines() == ["[worker:0] w0 step 0", "[worker:1] w1 step 0"], shown
        warnings = shown.err.splitlines()
        assert len(warnings) == 2 and all(w.startswith("tpuctl: warning: passed over") for w in warnings), warnings
        assert "not a regular file" in warnings[0] and "symlink" in warnings[1]


# --- stop -----------------------------------------------------------------------------------


def test_stop_ends_a_running_run_as_stopped_and_every_worker_with_it(work: Path) -> None:
    run = detach("0", "600", "0.1")
    try:
        wait_for(lambda: len(read_pids(work / "pids")) == 2)
        workers = read_pids(work / "pids")
        stopped = in_process("stop", run[:-2], limit_s=60)
        assert (stopped.code, stopped.out) == (0, f"run {run} stopped (exit 130)\n"), stopped.err
        assert f"stopping {run}" in stopped.err
        assert record_of(run).state == Kind.STOPPED
        assert not [pid for pid in workers if alive(pid)]
        assert "received tpuctl stop; stopping all workers" in RunFolder(Path(record_of(run).log_dir)).console_log.read_text()
        again = in_process("stop", run)
        assert (again.code, again.out) == (0, f"run {run} already ended: stopped (exit 130)\n")
    finally:
        stop(run)


def test_stop_during_start_up(work: Path) -> None:
    """Stopped right after `launch --detach` returned: the workers are still starting (sleeping before their first line)."""
    run = detach("30", "1", "0")
    try:
        # A process, as a user's: a stop from within pytest came before the detached run handled SIGTERM; the run read `lost`.
        stopped = tpuctl("stop")
        assert stopped.returncode == 0 and stopped.stdout == f"run {run} stopped (exit 130)\n", stopped
        time.sleep(0.5)  # a worker that was being started as the stop came would have written its pid by now
        assert not [pid for pid in read_pids(work / "pids") if alive(pid)]
    finally:
        stop(run)


def test_stop_refuses_a_run_supervised_on_another_machine_and_reports_a_lost_one(work: Path, tmp_path: Path) -> None:
    elsewhere = RunRecord("20260101-000000-train-else", "local", "train.py", str(tmp_path / "else"), 1.0, os.getpid(), "another-host")
    records.write(elsewhere)
    claim = elsewhere.folder.claim(elsewhere.run_id)
    try:
        refused = invoke(["stop", elsewhere.run_id])
        assert refused.code == 1 and refused.one_line_error and "supervised on another-host" in refused.err, refused.explain(["stop"])
    finally:
        os.close(claim)
    lost = invoke(["stop", elsewhere.run_id])
    assert lost.code == 0 and lost.out == f"run {elsewhere.run_id} already ended: lost (its supervisor ended without writing how the run ended)\n"
    assert not elsewhere.folder.stop_request.exists()
    cloud = invoke(["stop", elsewhere.run_id, "--zone", "us-central2-b"])
    assert cloud.code == 2 and cloud.one_line_error and "tpuctl stop-vm NAME" in cloud.err


# --- attach ---------------------------------------------------------------------------------


def test_attach_follows_the_console_to_the_summary_and_exits_as_the_run_did(work: Path) -> None:
    run = detach("0.5", "3", "0.2", "1")
    attached = tpuctl("attach", run)
    assert attached.returncode == 3, attached.stderr
    out = attached.stdout
    assert out.startswith("tpuctl: launching 2 worker(s) of train.py") and "[worker:1] w1 step 2" in out, out
    assert "worker:1 on localhost failed: exit status 3" in out
    assert record_of(run).state == Kind.FAILED


def test_ctrl_c_detaches_and_the_run_goes_on(work: Path) -> None:
    run = detach("0", "600", "0.1")
    try:
        watching = subprocess.Popen(tpuctl_cmd("attach"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert watching.stdout is not None
        while "[worker:1] w1 step" not in watching.stdout.readline():
            pass
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=20)
        assert watching.returncode == 130
        assert err.splitlines() == [f"tpuctl: the newest running run: {run}", f"tpuctl: detached from {run}; it runs on: tpuctl stop {run} stops it"]
        time.sleep(0.3)
        assert record_of(run).state == endings.RUNNING and all(alive(pid) for pid in read_pids(work / "pids"))
    finally:
        stop(run)


def test_attach_to_a_run_launched_attached_points_at_logs(work: Path) -> None:
    launch = subprocess.Popen(tpuctl_cmd("launch", "train.py", "--workers", "1", "--strategy", "none", "--", "0", "600", "0.1"), stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(records.read_all(print)) == 1)
        (record,) = records.read_all(print)
        result = invoke(["attach"])
        assert result.code == 1 and f"tpuctl logs {record.run_id} -f" in result.err and f"pid {launch.pid}" in result.err, result.explain(["attach"])
    finally:
        launch.send_signal(signal.SIGINT)
        launch.wait(timeout=30)


# --- RUN, --prune: in this process ----------------------------------------------------------


def _records(tmp_path: Path, *specs: tuple[str, float, str]) -> list[RunRecord]:
    """Records of ended runs: (run id, ended seconds ago, state)."""
    now = time.time()
    made = []
    for run_id, ago, state in specs:
        record = RunRecord(run_id, "local", "train.py", str(tmp_path / run_id), now - ago - 5, 1, "host", state=state, ended=now - ago, exit_code=0)
        records.write(record)
        made.append(record)
    return made


def test_run_is_an_id_or_a_unique_prefix(work: Path, tmp_path: Path) -> None:
    _records(tmp_path, ("20260101-000000-train-aaaa", 10, "succeeded"), ("20260101-000000-train-aabb", 5, "failed"))
    unique = invoke(["stop", "20260101-000000-train-aaa"])
    assert unique.code == 0 and unique.out == "run 20260101-000000-train-aaaa already ended: succeeded (exit 0)\n"
    ambiguous = invoke(["logs", "20260101-000000-train-aa"])
    assert ambiguous.code == 2 and ambiguous.one_line_error and "names 2 runs" in ambiguous.err
    unknown = invoke(["stop", "20260101-000000-train-zz"])  # no run, and no TPU VM name (those start with a letter)
    assert (unknown.code, unknown.one_line_error) == (2, True) and "no such run: '20260101-000000-train-zz'" in unknown.err, unknown.explain(["stop"])
    for command in ("logs", "stop", "attach"):
        none = invoke([command])
        assert none.code == 1 and none.one_line_error and "no run of yours is running" in none.err, none.explain([command])


@pytest.mark.parametrize("value", ["x" * 100_000, "20260101\n000000", "2026\x1b[2J", "../x", "/etc/passwd", "2026/../..", "\udcff", " "])
def test_hostile_run_values_are_one_line(work: Path, tmp_path: Path, value: str) -> None:
    _records(tmp_path, ("20260101-000000-train-aaaa", 10, "succeeded"))
    for command in ("logs", "stop", "attach"):
        result: Result = invoke([command, value])
        assert result.crash is None and result.code in (1, 2) and result.one_line_error, result.explain([command, value])
        assert "\x1b" not in result.err and len(result.err) < 2200  # a TPU VM NAME (a letter first) is cut at main's limit


def test_prune_removes_only_records_of_runs_that_ended_long_enough_ago(work: Path, tmp_path: Path) -> None:
    day = 86400.0
    old, recent = _records(tmp_path, ("20260101-000000-train-old1", 3 * day, "succeeded"), ("20260101-000000-train-new1", 0.5 * day, "failed"))
    running = RunRecord("20260101-000000-train-live", "local", "train.py", str(tmp_path / "live"), time.time() - 9 * day, os.getpid(), "host")
    records.write(running)
    claim = running.folder.claim(running.run_id)
    try:
        pruned = invoke(["runs", "--prune", "1"])
        assert pruned.code == 0 and pruned.out.startswith("removed the records of 1 run(s) that ended more than 1 day(s) ago"), pruned.explain([])
        assert [r.run_id for r in records.read_all(print)] == [recent.run_id, running.run_id]
        as_json = invoke(["runs", "--prune", "0.25", "--json"])
        assert json.loads(as_json.out) == {"pruned": [recent.run_id]}
        assert [r.run_id for r in records.read_all(print)] == [running.run_id]
    finally:
        os.close(claim)
    assert Path(old.log_dir).parent.exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e300", "1_0", "\u0661", "99999999", "0x10", "", "1.", "a\nb", "x" * 10_000])
def test_prune_days_are_checked(work: Path, value: str) -> None:
    result = invoke(["runs", "--prune", value])
    assert result.crash is None and result.code == 2 and result.one_line_error, result.explain(["runs", "--prune", value])


def test_a_terminal_gets_a_table_that_fits_it(work: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The newest 200 runs (rich takes seconds over 10,000 rows) and a log folder in its default place as `default`."""
    from tpuctl.cli import runs as runs_command
    from tpuctl.runs.naming import default_log_dir

    monkeypatch.setattr(runs_command, "rich_wanted", lambda stream: True)
    now = time.time()
    for n in range(runs_command.TERMINAL_ROWS + 5):
        run_id = f"20260101-000000-train-{n:04d}"
        records.write(RunRecord(run_id, "local", "train.py", str(default_log_dir(run_id)), now - n, 1, "host", state="succeeded", ended=now, exit_code=0))
    shown = invoke(["runs"])
    rows = [line for line in shown.out.splitlines() if "20260101-000000-train-" in line]
    assert shown.code == 0 and len(rows) == runs_command.TERMINAL_ROWS and "train-0000" in rows[0], shown.explain(["runs"])
    assert all(row.split()[-1] == "default" for row in rows)
    assert f"the newest {runs_command.TERMINAL_ROWS} of {runs_command.TERMINAL_ROWS + 5} runs" in shown.err and "LOG DIR default: " in shown.err
    assert len([line for line in invoke(["runs", "--limit", "203"]).out.splitlines() if "train-" in line]) == 203


# --- the reading core, driven directly ------------------------------------------------------


def test_following_reads_new_attempts_new_workers_and_a_late_line_of_an_older_attempt(tmp_path: Path) -> None:
    import threading

    from tpuctl.runs import reading

    folder = RunFolder(tmp_path / "run")
    claim = folder.claim("20260101-000000-train-late")
    folder.make_attempt(1)
    folder.worker_log(1, "worker:0").write_bytes(b"a\n")

    def later() -> None:
        time.sleep(0.6)
        folder.make_attempt(2)
        folder.worker_log(2, "worker:0").write_bytes(b"b\n")
        time.sleep(0.6)
        with folder.worker_log(1, "worker:0").open("ab") as late:
            late.write(b"late\n")
        folder.worker_log(2, "worker:1", "host-b").write_bytes(b"c, with no newline")
        time.sleep(0.6)
        os.close(claim)

    writer = threading.Thread(target=later)
    writer.start()
    shown = [
        f"attempt {event.number}" if isinstance(event, reading.NewAttempt) else f"{event.log.attempt} {event.log.worker}@{event.log.host} {event.raw.decode()}"
        for event in reading.lines(folder, print, follow=True)
    ]
    writer.join()
    assert shown == ["1 worker:0@None a", "attempt 2", "2 worker:0@None b", "1 worker:0@None late", "2 worker:1@host-b c, with no newline"]


def test_a_line_with_no_end_comes_in_bounded_pieces(tmp_path: Path) -> None:
    from tpuctl.runs.tailing import LINE_LIMIT, Tail

    path = tmp_path / "worker-0.log"
    path.write_bytes(b"x" * (3 * LINE_LIMIT + 10) + b"\nshort\n" + b"y" * 5)
    tail = Tail(path)
    pieces = list(tail.lines(final=False))
    assert [len(piece) for piece in pieces] == [LINE_LIMIT] * 3 + [10, 5]
    assert list(tail.lines(final=True)) == [b"yyyyy"]
    tail.close()

"""`tpuctl report` through the real entry point: a log folder or a run id, --json, the price, and hostile timeline files."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.standins.cli_calls import Result, invoke
from tpuctl.endings import Kind
from tpuctl.runs import records, vm_record
from tpuctl.runs.folder import TIMELINE, RunFolder
from tpuctl.runs.records import RunRecord

RUN_ID = "20261125-103000-train-abc123"


def line(t: float, event: str, **fields: object) -> str:
    return json.dumps({"t": t, "wall": 1_700_000_000 + t, "event": event, **fields})


CLEAN = [
    line(0, "run_start"),
    line(1, "attempt_start", attempt=1),
    line(5, "runtime_ready", attempt=1, worker="worker:0"),
    line(10, "first_step", attempt=1, worker="worker:0", step=1, source="keras"),
    line(90, "step", attempt=1, worker="worker:0", step=800, source="keras"),
    line(91, "attempt_end", attempt=1),
    line(100, "run_end"),
]


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "config.toml"))
    folder = tmp_path / "logs" / RUN_ID
    folder.mkdir(parents=True)
    (folder / TIMELINE).write_text("\n".join(CLEAN) + "\n")
    return folder


def report(*args: str) -> Result:
    result = invoke(["report", *args])
    assert result.crash is None, result.explain(["report", *args])
    return result


def test_a_log_folder_is_reported_line_by_category_with_the_goodput(run_dir: Path) -> None:
    result = report(str(run_dir))
    assert result.code == 0, result.err
    assert f"run {run_dir}: 100.0s of wall time" in result.out
    assert "training steps" in result.out and "80.0s" in result.out and "80.0%" in result.out
    assert "goodput 80%: 11% other, 5% first step, 4% start-up; steps from: keras" in result.out
    assert "skipped" not in result.out


def test_json_names_the_run_by_its_record_and_prices_the_lost_time(run_dir: Path) -> None:
    records.write(
        RunRecord(RUN_ID, "local", "train.py", str(run_dir), time.time() - 100, os.getpid(), "here", state=Kind.SUCCEEDED, ended=time.time(), exit_code=0)
    )
    result = report(RUN_ID[:12], "--json", "--price-per-hour", "36")
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert body["run_id"] == RUN_ID and body["wall_s"] == 100 and body["goodput"] == 0.8
    assert sum(body["categories"].values()) == pytest.approx(body["wall_s"])
    assert body["step_source"] == "keras" and [a["attempt"] for a in body["attempts"]] == [1]
    assert body["lost_cost"] == pytest.approx(0.2)  # 20 s at 36 USD/h
    text = report(RUN_ID, "--price-per-hour", "36").out
    assert "at 36 USD/h: 0.20 USD" in text


def test_the_price_comes_from_a_report_table_and_a_bad_one_is_refused(run_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[report]\nprice_per_hour = 7.2\n")
    assert "at 7.2 USD/h" in report(str(run_dir)).out
    (tmp_path / "config.toml").write_text("[report]\nprice_per_hour = nan\n")
    bad = report(str(run_dir))
    assert bad.code != 0 and bad.one_line_error and "price" in bad.err
    for value in ("nan", "-1", "inf", "1e300", "x"):
        flag = report(str(tmp_path / "logs" / RUN_ID), "--price-per-hour", value)
        assert flag.code == 2 and flag.one_line_error, (value, flag.err)


@pytest.mark.parametrize(
    "content, skipped",
    [
        ("\n".join(CLEAN) + '\n{"t": 101, "wall": 17', 1),  # a run killed mid-line
        ("\n".join([*CLEAN, "garbage \x00 \x1b[31m", "[1, 2]", '{"event": "step"}']) + "\n", 3),
        ("\n".join(reversed(CLEAN)) + "\n", 0),  # out of order: sorted by time
        ("\n".join(CLEAN) + '\n{"t": NaN, "wall": 1, "event": "step"}\n{"t": 1, "wall": Infinity, "event": "step"}\n', 2),
        ("\n".join(CLEAN) + "\n" + "x" * 5_000_000 + "\n", 1),  # a huge line
        ("\n".join(CLEAN).replace('"step": 800', '"step": NaN') + "\n", 0),  # a NaN step is no step number
    ],
)
def test_a_hostile_timeline_gives_what_is_readable_and_says_how_much_was_not(run_dir: Path, content: str, skipped: int) -> None:
    (run_dir / TIMELINE).write_text(content)
    result = report(str(run_dir))
    assert result.code == 0, result.err
    assert "of wall time" in result.out
    assert (f"skipped {skipped} line(s)" in result.out) == bool(skipped)


def test_a_timeline_with_nothing_readable_is_one_line_exit_1(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / TIMELINE).write_bytes(b"\xff\xfe garbage\n{}\n")
    result = report(str(run_dir))
    assert (result.code, result.one_line_error) == (1, True) and "nothing readable" in result.err
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = report(str(empty))
    assert (missing.code, missing.one_line_error) == (1, True) and "no timeline" in missing.err
    nowhere = report(str(tmp_path / "no-such-dir/"))
    assert (nowhere.code, nowhere.one_line_error) == (1, True)


def test_a_fifo_or_a_link_to_a_device_is_refused_not_waited_on(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / TIMELINE).unlink()
    os.mkfifo(run_dir / TIMELINE)
    fifo = report(str(run_dir))
    assert (fifo.code, fifo.one_line_error) == (1, True) and "not a regular file" in fifo.err
    (run_dir / TIMELINE).unlink()
    (run_dir / TIMELINE).symlink_to("/dev/zero")
    device = report(str(run_dir))
    assert (device.code, device.one_line_error) == (1, True)
    (run_dir / TIMELINE).unlink()
    real = tmp_path / "elsewhere.jsonl"
    real.write_text("\n".join(CLEAN) + "\n")
    (run_dir / TIMELINE).symlink_to(real)
    assert report(str(run_dir)).code == 0


def test_no_run_named_and_none_running_is_one_line(run_dir: Path) -> None:
    result = report()
    assert (result.code, result.one_line_error) == (1, True) and "no run of yours is running" in result.err


def test_runs_shows_a_finished_runs_goodput_as_a_column_and_in_json(run_dir: Path) -> None:
    base = RunRecord(RUN_ID, "local", "train.py", str(run_dir), time.time() - 100, os.getpid(), "here", state=Kind.SUCCEEDED, ended=time.time(), exit_code=0)
    records.write(base)
    plain = invoke(["runs"])
    assert "GOODPUT" not in plain.out  # no run trained: no column
    records.write(replace(base, goodput=0.714))
    table = invoke(["runs"])
    head, row = table.out.splitlines()[:2]
    assert head.split()[-1] == "GOODPUT" and row.split()[-1] == "71%"
    assert json.loads(invoke(["runs", "--json"]).out)[0]["goodput"] == 0.714


def _tpu_record(run_dir: Path, **fields: object) -> dict[str, object]:
    """A record as `launch --tpu` writes it (tests/integration/test_tpu_ssh.py launches one for real), with `fields` over it."""
    record = RunRecord(RUN_ID, "ssh", "train.py", str(run_dir), time.time() - 100, os.getpid(), "here", state="succeeded", ended=time.time(), exit_code=0)
    priced = {"tpu": "v5litepod-16", "zone": "us-west4-a", "capacity": "spot", "price_per_hour": 7.2, "price_note": "list prices from tpuctl's table"}
    return {**record.to_json(), **priced, **fields}


def _write_raw(body: dict[str, object]) -> None:
    where = records.folder()
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{RUN_ID}.json").write_text(json.dumps(body))  # json.dumps writes NaN and Infinity as JSON's parser reads them


def test_a_tpu_runs_record_prices_its_wall_time_and_its_badput_and_says_which_price(run_dir: Path) -> None:
    _write_raw(_tpu_record(run_dir))
    body = json.loads(report(RUN_ID, "--json").out)
    assert (body["price_source"], body["price_per_hour"], body["cost"]) == ("list", 7.2, 0.2)  # 100 s at 7.2 USD/h
    assert body["lost_cost"] == pytest.approx(0.04) and body["lost_cost_by_category"]["start-up"] == pytest.approx(4 / 3600 * 7.2)
    text = report(str(run_dir)).out  # by its log folder: the record that names it prices it
    assert "cost: 0.20 USD, 0.03 h at 7.2 USD/h (list price of v5litepod-16 (spot) in us-west4-a as the run started; list prices" in text
    assert "time not training: 0.01 h, at 7.2 USD/h: 0.04 USD (other 0.02, first step 0.01, start-up 0.01)" in text
    assert "(your price_per_hour" in report(RUN_ID, "--price-per-hour", "36").out
    _write_raw(_tpu_record(run_dir, capacity="reserved", price_per_hour=None, price_note="a reservation bills it"))
    assert "cost: unknown: no list price for v5litepod-16 (reserved) in us-west4-a (a reservation bills it); --price-per-hour" in report(RUN_ID).out
    listed = invoke(["runs"])
    assert listed.out.splitlines()[0].split()[-1] != "COST"  # no priced run: no column


@pytest.mark.parametrize(
    "fields",
    [
        {"price_per_hour": math.nan},
        {"price_per_hour": -1.0},
        {"price_per_hour": 1e300},
        {"price_per_hour": math.inf},
        {"price_per_hour": "7.2"},
        {"price_per_hour": True},
        {"zone": "us-west4-a\x1b[31m"},
        {"price_note": "x" * 5000},
        {"tpu": ["v4-8"]},
    ],
)
def test_a_hostile_price_in_a_record_is_one_line_never_a_traceback(run_dir: Path, fields: dict[str, object]) -> None:
    _write_raw(_tpu_record(run_dir, **fields))
    listed = invoke(["runs"])
    assert listed.crash is None and listed.code == 0 and "Traceback" not in listed.err
    skipped = [line for line in listed.err.splitlines() if "skipped a run record" in line]
    assert len(skipped) == 1 and (("price_per_hour" in skipped[0]) == ("price_per_hour" in fields)) and "\x1b" not in listed.err
    by_id = invoke(["report", RUN_ID])
    assert by_id.crash is None and by_id.code == 1 and by_id.err.splitlines()[-1].startswith("Error: no run") and "\x1b" not in by_id.err
    by_folder = invoke(["report", str(run_dir)])  # the timeline is still reported; the record that cannot be read prices nothing
    assert by_folder.crash is None and by_folder.code == 0 and "cost" not in by_folder.out and "goodput 80%" in by_folder.out


def test_timeline_draws_the_runs_view_under_the_report_within_the_width(run_dir: Path) -> None:
    result = invoke(["report", str(run_dir), "--timeline"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.crash is None and result.code == 0, result.err
    report, _, drawn = result.out.partition("\n\n")
    assert "goodput 80%" in report and "worker:0" in drawn, result.out
    assert all(len(line) <= 100 for line in drawn.splitlines()) and "\x1b[" not in result.out


def test_timeline_with_json_is_one_line_and_exit_2(run_dir: Path) -> None:
    result = report(str(run_dir), "--timeline", "--json")
    assert result.code == 2 and result.out == "", result.err
    assert result.err.strip().splitlines()[0].startswith("Error: --timeline draws for the terminal; --json has the numbers")


PREEMPTED_ONCE = [
    line(0, "run_start"),
    line(1, "attempt_start", attempt=1),
    line(5, "runtime_ready", attempt=1, worker="worker:0"),
    line(10, "first_step", attempt=1, worker="worker:0", step=1, source="keras"),
    line(1800, "step", attempt=1, worker="worker:0", step=800, source="keras"),
    line(1800, "preempted", attempt=1),
    line(1801, "attempt_end", attempt=1),
    line(1900, "attempt_start", attempt=2),
    line(1910, "runtime_ready", attempt=2, worker="worker:0"),
    line(1920, "first_step", attempt=2, worker="worker:0", step=801, source="keras"),
    line(3590, "step", attempt=2, worker="worker:0", step=1600, source="keras"),
    line(3595, "attempt_end", attempt=2),
    line(3600, "run_end"),
]


def test_a_run_on_a_vm_tpuctl_created_names_it_its_fate_and_each_attempts_cost(run_dir: Path) -> None:
    """`launch --new-tpu`: the record names the VM; the report prices each attempt goodput.py splits at the list price."""
    (run_dir / TIMELINE).write_text("\n".join(PREEMPTED_ONCE) + "\n")
    created = {"created_node": "train-abc123", "project": "my-project", "node_fate": vm_record.NODE_DELETED, "price_per_hour": 4.0}
    _write_raw(_tpu_record(run_dir, **created))
    text = report(RUN_ID).out
    assert "cost: 4.00 USD, 1.00 h at 4 USD/h" in text
    assert "TPU VM train-abc123 (v5litepod-16, spot, us-west4-a), created for this run: deleted" in text
    body = json.loads(report(RUN_ID, "--json").out)
    first, second = (attempt["wall_s"] for attempt in body["attempts"])
    assert body["cost_by_attempt"] == {"1": round(first / 3600 * 4, 4), "2": round(second / 3600 * 4, 4)}
    assert f"attempt 1: {first:.1f}s, {first / 3600 * 4:.2f} USD, ended: preempted" in text
    assert f"attempt 2: {second:.1f}s, {second / 3600 * 4:.2f} USD" in text
    assert body["vm"] == {"name": "train-abc123", "project": "my-project", "zone": "us-west4-a", "fate": "deleted", "at_end": None, "orphaned": False}

    _write_raw(_tpu_record(run_dir, **(created | {"node_fate": vm_record.NODE_KEPT})))
    assert "created for this run: kept (--keep), billing until `tpuctl delete train-abc123 --zone us-west4-a`" in report(RUN_ID).out
    lost = {"state": "running", "ended": None, "exit_code": None, "node_fate": vm_record.NODE_LIVE}  # nobody holds its folder's lock
    _write_raw(_tpu_record(run_dir, **(created | lost)))
    assert f"created for this run: still billing, and nobody is left to delete it: `tpuctl stop {RUN_ID}` does" in report(RUN_ID).out
    assert json.loads(report(RUN_ID, "--json").out)["vm"]["orphaned"] is True


def test_the_vm_line_of_a_running_run_says_what_its_end_will_do_as_the_launch_asked(run_dir: Path) -> None:
    """The record keeps --keep / --keep-on-failure (node_end): a running run's VM is not said to be deleted when the
    launch will keep it; a VM kept because the run failed says so."""
    claim = RunFolder(run_dir).claim(RUN_ID)  # the launch holds its folder: the run is running, not lost
    (run_dir / TIMELINE).write_text("\n".join(PREEMPTED_ONCE[:-1]) + "\n")
    created = {"created_node": "train-abc123", "project": "my-project", "node_fate": vm_record.NODE_LIVE, "price_per_hour": 4.0}
    running = {"state": "running", "ended": None, "exit_code": None}
    expected = {
        vm_record.NODE_DELETE: "created for this run: deleted as the run ends",
        vm_record.NODE_KEEP: "created for this run: kept after the run (--keep), billing until `tpuctl delete train-abc123 --zone us-west4-a`",
        vm_record.NODE_KEEP_ON_FAILURE: "created for this run: deleted as the run ends if it succeeds or is stopped, kept if it fails (--keep-on-failure)",
    }
    try:
        for end, said in expected.items():
            _write_raw(_tpu_record(run_dir, **(created | running | {"node_end": end})))
            assert said in report(RUN_ID).out, end
            assert json.loads(report(RUN_ID, "--json").out)["vm"]["at_end"] == end
    finally:
        os.close(claim)
    kept = {"node_fate": vm_record.NODE_KEPT, "node_end": vm_record.NODE_KEEP_ON_FAILURE}
    _write_raw(_tpu_record(run_dir, **(created | kept)))
    assert "created for this run: kept (--keep-on-failure: the run failed), billing until" in report(RUN_ID).out


def test_each_attempt_is_priced_at_the_vm_it_ran_on_when_a_recreate_changed_the_price(run_dir: Path) -> None:
    """A spot VM preempted and recreated on demand: attempt 1 at spot's list price, attempt 2 (its recovery included)
    at on-demand's, the run's cost their sum; the record's one price (the last VM's) prices neither alone."""
    node = "r20261128-101500-train-3f2a"
    provisioned = line(0.5, "provision_end", node=node, zone="us-west4-a", hunting_s=0, tried=[], capacity="spot", price_per_hour=2.0)
    recreated = line(1850, "recreate_end", node=node, zone="us-east5-a", capacity="on-demand", price_per_hour=8.0)
    events = [*PREEMPTED_ONCE[:1], provisioned, *PREEMPTED_ONCE[1:7], recreated, *PREEMPTED_ONCE[7:]]
    (run_dir / TIMELINE).write_text("\n".join(events) + "\n")
    created = {"created_node": node, "project": "my-project", "node_fate": vm_record.NODE_DELETED, "capacity": "on-demand", "price_per_hour": 8.0}
    _write_raw(_tpu_record(run_dir, **created))
    body = json.loads(report(RUN_ID, "--json").out)
    first, second = (attempt["wall_s"] for attempt in body["attempts"])
    assert body["price_by_attempt"] == {"1": 2.0, "2": 8.0}
    assert body["cost_by_attempt"] == {"1": round(first / 3600 * 2, 4), "2": round(second / 3600 * 8, 4)}
    assert body["cost"] == round((first * 2 + (body["wall_s"] - first) * 8) / 3600, 2)
    text = report(RUN_ID).out
    assert f"cost: {body['cost']:.2f} USD, 1.00 h at each attempt's price (list price of the TPU VM each attempt ran on: " in text
    assert f"attempt 1 on TPU VM {node} (us-west4-a, spot at 2 USD/h): {first:.1f}s, {first / 3600 * 2:.2f} USD, ended: preempted" in text
    assert f"attempt 2 on TPU VM {node} (us-east5-a, on-demand at 8 USD/h): {second:.1f}s, {second / 3600 * 8:.2f} USD" in text
    user = json.loads(report(RUN_ID, "--json", "--price-per-hour", "5").out)  # the user's price holds for every attempt
    assert user["price_by_attempt"] == {"1": 5.0, "2": 5.0} and user["cost"] == 5.0


def test_an_attempt_on_a_vm_with_no_list_price_leaves_the_cost_unknown(run_dir: Path) -> None:
    node = "r20261128-101500-train-3f2a"
    provisioned = line(0.5, "provision_end", node=node, zone="us-west4-a", capacity="reserved", price_per_hour=None)
    recreated = line(1850, "recreate_end", node=node, zone="us-east5-a", capacity="on-demand", price_per_hour=8.0)
    events = [*PREEMPTED_ONCE[:1], provisioned, *PREEMPTED_ONCE[1:7], recreated, *PREEMPTED_ONCE[7:]]
    (run_dir / TIMELINE).write_text("\n".join(events) + "\n")
    _write_raw(_tpu_record(run_dir, created_node=node, project="my-project", node_fate=vm_record.NODE_DELETED, price_per_hour=8.0))
    body = json.loads(report(RUN_ID, "--json").out)
    assert body["cost"] is None and body["cost_by_attempt"] is None
    assert body["price_note"].startswith("no list price for attempt 1's TPU VM (reserved in us-west4-a)")

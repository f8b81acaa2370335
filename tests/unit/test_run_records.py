"""Run records (tpuctl/runs/records.py) and the folder's claim (RunFolder.claim) that makes `running` true (issue 23).

What `tpuctl runs`, `logs`, `stop`, `attach` and `stacks` rely on: a record reads back as it was
written; anything in the records folder that is not a record of tpuctl's is skipped with one
warning line, never a traceback or a hang; `running` is believed only while the run holds its
folder's lock; a name finds one run or says in one line why not; prune removes only what ended;
a reader never sees half a record; records and folders are private.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuctl import endings
from tpuctl.endings import Kind
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError
from tpuctl.runs import records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import NODE_DELETE, NODE_ENDS, NODE_FATES, VM_NAMES, NodeState, VmRecord

NOW = 1_790_000_000.0  # 2026-09
DAY = 86400.0
SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
# Holds the claim of the folder named in argv until its stdin closes: a detached supervisor, in short.
HOLDER = "import sys; from pathlib import Path; from tpuctl.runs.folder import RunFolder\n" \
         "fd = RunFolder(Path(sys.argv[2])).claim(sys.argv[1]); print('held', flush=True); sys.stdin.read()"  # fmt: skip


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


class Warnings(list[str]):
    """The `warn` a command passes: every line it was given."""

    def __call__(self, line: str) -> None:
        self.append(line)


def _record(tmp_path: Path, run_id: str, **fields: Any) -> RunRecord:
    values: dict[str, Any] = {"backend": "local", "script": "train.py", "started": NOW - DAY, "pid": 4242, "host": "vm-0"}
    values.update(fields)
    raw = {"run_id": run_id, "log_dir": str(tmp_path / "logs" / run_id), **values}
    return RunRecord.from_json(json.loads(json.dumps(raw)))  # its VM's fields as a record file spells them


def _ended(tmp_path: Path, run_id: str, **fields: Any) -> RunRecord:
    started = fields.pop("started", NOW - DAY)
    defaults = {"state": Kind.SUCCEEDED, "ended": started + 60, "exit_code": 0}
    return _record(tmp_path, run_id, started=started, **(defaults | fields))


def _file(run_id: str) -> Path:
    return records.folder() / f"{run_id}.json"


def _listed(warn: Warnings | None = None) -> dict[str, str]:
    """run id -> live state, for every record read_all returns."""
    return {r.run_id: r.state for r in records.read_all(warn if warn is not None else Warnings())}


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[RunRecord, subprocess.Popen[str]]]:
    """A running run whose folder another process holds, and that process."""
    record = _record(tmp_path, "20260901-120000-train-held")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, record.run_id, record.log_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    yield replace(record, pid=proc.pid), proc
    proc.kill()
    proc.wait()


# --- the record's own round trip --------------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)  # what a script path, host or job name may hold
_RUN_IDS = st.from_regex(r"\A[0-9]{8}-[0-9]{6}-[A-Za-z0-9_.-]{1,40}-[0-9a-f]{4}\Z")
_TIMES = st.floats(min_value=0, max_value=4e9) | st.integers(min_value=0, max_value=4_000_000_000)
_VALID = st.builds(
    RunRecord, run_id=_RUN_IDS, backend=st.sampled_from(("local", "ssh", "kubernetes", "vertex")), script=_TEXT,
    log_dir=_TEXT.map(lambda text: "/" + text.replace("\x00", "")), started=_TIMES, pid=st.integers(1, 4_194_304), host=_TEXT,
    detached=st.booleans(), state=st.sampled_from(endings.RUN_STATES), ended=st.none() | _TIMES, exit_code=st.none() | st.integers(-255, 255),
    job=st.none() | _TEXT, answers_stacks=st.booleans(),
    pid_start=st.none() | st.integers(0, (1 << 63) - 1),
    vm=st.none() | st.builds(VmRecord, created_node=st.just("tpuctl-run-1"), project=st.none() | st.just("demo-project"),
                             state=st.sampled_from(NodeState), node_end=st.none() | st.sampled_from(NODE_ENDS)),
)  # fmt: skip


@SETTINGS
@given(record=_VALID)
def test_a_record_reads_back_as_it_was_written(record: RunRecord) -> None:
    data = record.to_json()
    assert list(data) == [field.name for field in fields(RunRecord) if field.name != "vm"] + list(VM_NAMES)
    assert RunRecord.from_json(json.loads(json.dumps(data))) == record


def test_a_written_record_is_listed_as_written(state: Path, tmp_path: Path) -> None:
    record = _ended(tmp_path, "20260901-120000-train-abcd", job="TFJob x (default)", detached=True, exit_code=3, state=Kind.FAILED)
    records.write(record)
    warn = Warnings()
    assert records.read_all(warn) == [record] and warn == []
    assert json.loads(_file(record.run_id).read_text()) == record.to_json()


def test_records_are_listed_newest_first(state: Path, tmp_path: Path) -> None:
    for number, started in enumerate((NOW - 3 * DAY, NOW, NOW - DAY)):
        records.write(_ended(tmp_path, f"run-{number}", started=started))
    assert [r.run_id for r in records.read_all(Warnings())] == ["run-1", "run-2", "run-0"]


def test_a_record_that_lacks_only_fields_with_defaults_takes_the_defaults(tmp_path: Path) -> None:
    full = _record(tmp_path, "run-1").to_json()
    required = {name: full[name] for name in ("run_id", "backend", "script", "log_dir", "started", "pid", "host")}
    assert RunRecord.from_json(required) == _record(tmp_path, "run-1")
    assert RunRecord.from_json({**full, "added_by_a_later_tpuctl": [1, 2]}) == _record(tmp_path, "run-1")


# --- from_json refuses what is not a record ---------------------------------------------------------------------------

_HOSTILE_FIELDS: list[tuple[str, object]] = [
    ("run_id", "a/b"), ("run_id", ".."), ("run_id", "."), ("run_id", ".hidden"), ("run_id", ""), ("run_id", "x" * 201),
    ("run_id", "a\nb"), ("run_id", "a\x1b[2Jb"), ("run_id", 7), ("run_id", None),
    ("state", "zombie"), ("state", ""), ("state", None),
    ("pid", 0), ("pid", -1), ("pid", 1 << 31), ("pid", 10**30), ("pid", True), ("pid", "4242"), ("pid", 4242.0),
    ("started", math.nan), ("started", math.inf), ("started", -math.inf), ("started", -1), ("started", 1e400), ("started", 10**300),
    ("started", "2026-09-01"), ("started", None), ("started", False),
    ("ended", math.nan), ("ended", math.inf), ("ended", "later"),
    ("exit_code", 1 << 31), ("exit_code", -(1 << 31)), ("exit_code", 1.0), ("exit_code", True),
    ("log_dir", "relative/logs"), ("log_dir", ""), ("log_dir", "/logs/\x00x"), ("log_dir", ["/logs"]),
    ("detached", 1), ("detached", "yes"), ("answers_stacks", None), ("job", 3), ("host", {"name": "vm"}), ("script", None),
    ("node_fate", "live"), ("node_fate", "deleted"),  # a fate without a created node
    ("node_end", "keep"), ("node_end", "delete"),  # an end without a created node
    ("cost_before", -1), ("cost_before", math.nan), ("cost_before", math.inf), ("cost_before", "3"), ("cost_before", True),
    ("priced_since", math.nan), ("priced_since", -1), ("priced_since", "now"),
    ("created_node", "vm\nx"), ("created_node", 3), ("project", "p" * 201), ("project", ["p"]),
    ("pid_start", -1), ("pid_start", 1 << 63), ("pid_start", True), ("pid_start", "12"), ("pid_start", 1.5),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value"), _HOSTILE_FIELDS, ids=[f"{f}={v!r}"[:40] for f, v in _HOSTILE_FIELDS])
def test_from_json_refuses_a_field_no_record_holds(tmp_path: Path, field: str, value: object) -> None:
    raw = {**_ended(tmp_path, "run-1").to_json(), field: value}
    with pytest.raises(ValueError) as refused:
        RunRecord.from_json(raw)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("node", "fate"), [("tpuctl-run-1", None), ("tpuctl-run-1", "billing"), ("tpuctl-run-1", 1)])
def test_from_json_refuses_a_created_node_without_a_fate_it_knows(tmp_path: Path, node: str, fate: object) -> None:
    with pytest.raises(ValueError):
        RunRecord.from_json({**_ended(tmp_path, "run-1").to_json(), "created_node": node, "node_fate": fate})


@pytest.mark.parametrize("end", ["forever", "", 1, True])
def test_from_json_refuses_a_node_end_it_does_not_know(tmp_path: Path, end: object) -> None:
    with pytest.raises(ValueError):
        RunRecord.from_json({**_ended(tmp_path, "run-1").to_json(), "created_node": "vm", "node_fate": "live", "node_end": end})


def test_a_run_whose_vm_came_back_at_another_price_costs_each_vm_s_time_at_its_own() -> None:
    """launch --new-tpu: an hour on a spot VM at 2 USD/h, then recreated (price_cut as the attempt ends) and two hours on
    an on-demand one at 8 USD/h; `runs`' COST is the sum, not three hours at the last price. A VM with no list price
    before the recreate leaves the whole cost unknown."""
    vm = VmRecord().naming("tpuctl-run-1", "p", "z", NODE_DELETE).priced("v4-8", "z", "spot", 2.0, "list").ready()
    spot = RunRecord("run-1", "ssh", "t.py", "/logs/run-1", NOW, 1, "vm", vm=vm)
    recreated = replace(spot, vm=vm.recreating(spot.cost(NOW + 3600), NOW + 3600))
    assert recreated.vm is not None and recreated.vm.cost_before == pytest.approx(2.0) and recreated.vm.priced_since == NOW + 3600
    on_demand = replace(recreated, vm=recreated.vm.priced("v4-8", "z", "on-demand", 8.0, "list").ready())
    assert on_demand.cost(NOW + 3 * 3600) == pytest.approx(2.0 + 16.0)
    assert replace(on_demand, ended=NOW + 2 * 3600).cost(NOW + 5 * 3600) == pytest.approx(2.0 + 8.0)  # an ended run's stops
    assert RunRecord.from_json(json.loads(json.dumps(on_demand.to_json()))) == on_demand
    reserved = replace(spot, vm=replace(vm, price_per_hour=None))
    assert reserved.vm is not None
    moved = reserved.vm.recreating(reserved.cost(NOW + 3600), NOW + 3600).priced("v4-8", "z", "on-demand", 8.0, "")
    assert replace(reserved, vm=moved).cost(NOW + 7200) is None


def test_only_a_created_node_still_live_bills(tmp_path: Path) -> None:
    assert not _ended(tmp_path, "run-1").bills
    assert [_ended(tmp_path, "run-1", created_node="vm", node_fate=fate).bills for fate in NODE_FATES] == [True, False, False]


@pytest.mark.parametrize("raw", [[], "record", 1, None, True, 1.5, [{"run_id": "x"}]])
def test_from_json_refuses_what_is_not_an_object(raw: object) -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        RunRecord.from_json(raw)


@pytest.mark.parametrize("missing", ["run_id", "backend", "script", "log_dir", "started", "pid", "host"])
def test_from_json_refuses_a_record_without_a_required_field(tmp_path: Path, missing: str) -> None:
    raw = _record(tmp_path, "run-1").to_json()
    del raw[missing]
    with pytest.raises(ValueError, match=f"it has no {missing}"):
        RunRecord.from_json(raw)


def _is_sound(record: RunRecord) -> bool:
    """What every record from_json lets through can be sorted, subtracted, signalled and opened."""
    return (
        record.state in endings.RUN_STATES and 0 < record.pid < 1 << 31 and math.isfinite(record.started) and record.started >= 0
        and (record.ended is None or math.isfinite(record.ended)) and "/" not in record.run_id and record.run_id not in ("", ".", "..")
        and record.log_dir.startswith("/") and "\x00" not in record.log_dir and record.run_id.isprintable()
    )  # fmt: skip


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(raw=_JSON)
def test_from_json_of_any_json_is_a_record_or_a_value_error(raw: object) -> None:
    try:
        record = RunRecord.from_json(raw)
    except ValueError:
        return
    assert _is_sound(record)


@SETTINGS
@given(changes=st.dictionaries(st.sampled_from([f.name for f in fields(RunRecord)]), _JSON, min_size=1, max_size=3))
def test_from_json_of_a_record_with_any_fields_replaced_is_sound_or_a_value_error(changes: dict[str, object]) -> None:
    raw = {**_record(Path("/tmp"), "run-1").to_json(), **changes}
    try:
        record = RunRecord.from_json(raw)
    except ValueError:
        return
    assert _is_sound(record)


# --- read_all skips what it cannot read, with one warning line --------------------------------------------------------


def _plant_hostile_files(where: Path) -> list[str]:
    """Every kind of file a records folder should never hold; the names read_all must skip."""
    where.mkdir(parents=True, mode=0o700, exist_ok=True)
    os.mkfifo(where / "fifo.json")  # a reader that opened it waiting for a writer would wait forever
    (where / "zero.json").symlink_to("/dev/zero")  # endless
    (where / "elsewhere.json").symlink_to(where.parent / "outside.json")
    (where.parent / "outside.json").write_text(json.dumps(_record(where, "elsewhere").to_json()))
    (where / "folder.json").mkdir()
    (where / "huge.json").write_bytes(b" " * (records.RECORD_LIMIT + 1) + b"{}")
    (where / "bad.json").write_text('{"run_id": "bad", ')
    (where / "empty.json").write_text("")
    (where / "theirs.json").write_text(json.dumps({"name": "a record of another program's"}))
    (where / "deep.json").write_text("[" * 5_000 + "]" * 5_000)  # deeper than the parser's recursion limit
    (where / "latin1.json").write_bytes(b'{"run_id": "caf\xe9"}')
    (where / "nan.json").write_text(json.dumps({**_ended(where, "nan").to_json(), "started": math.nan}))
    (where / "copy.json").write_text(json.dumps(_ended(where, "another-run").to_json()))  # prune would remove another-run.json
    (where / "line\nbreak\x1b[2J.json").write_text("{}")
    names = ["fifo.json", "zero.json", "elsewhere.json", "folder.json", "huge.json", "bad.json", "empty.json", "theirs.json", "deep.json",
             "latin1.json", "nan.json", "copy.json", "line\nbreak\x1b[2J.json"]  # fmt: skip
    (where / "notes.txt").write_text("not a record, and not named like one: passed over in silence")
    (where / ".20260901-120000-train-abcd.json.x1y2.tmp").write_text('{"run_id": ')  # write()'s temporary file, half written
    return names


def test_read_all_skips_every_file_that_is_not_a_record_with_one_warning_line(state: Path, tmp_path: Path) -> None:
    good = _ended(tmp_path, "20260901-120000-train-abcd")
    records.write(good)
    planted = _plant_hostile_files(records.folder())
    warn = Warnings()
    started = time.monotonic()
    assert records.read_all(warn) == [good]
    assert time.monotonic() - started < 10  # no FIFO waited on, no /dev/zero read
    (line,) = warn
    assert line.startswith("warning: skipped a run record that is not one of tpuctl's: ")
    assert f"and {len(planted) - 1} more" in line and str(records.folder()) in line
    assert line.isprintable(), line  # a file name with a newline or an escape sequence cannot break the line


def test_a_record_filed_under_another_runs_name_is_skipped(state: Path, tmp_path: Path) -> None:
    records.write(_ended(tmp_path, "run-a"))
    _file("run-a").rename(_file("run-b"))
    warn = Warnings()
    assert records.read_all(warn) == []
    assert "run-b.json (it is the record of 'run-a')" in warn[0]


def test_no_records_folder_lists_nothing_and_warns_nothing(state: Path) -> None:
    warn = Warnings()
    assert records.read_all(warn) == [] and warn == []


@SETTINGS
@given(data=st.binary(max_size=600) | _JSON.map(lambda v: json.dumps(v).encode()))
def test_whatever_bytes_a_record_file_holds_read_all_warns_at_most_once(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    home = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(home))
        records.folder().mkdir(parents=True)
        _file("run-1").write_bytes(data)
        warn = Warnings()
        found = records.read_all(warn)
    assert len(found) + len(warn) == 1 and all(_is_sound(r) and r.run_id == "run-1" for r in found)
    assert all(line.isprintable() for line in warn)


# --- running, lost --------------------------------------------------------------------------------------------------


def test_a_run_whose_folder_this_process_holds_is_running(state: Path, tmp_path: Path) -> None:
    record = _record(tmp_path, "run-1")
    claim = RunFolder(Path(record.log_dir)).claim(record.run_id)
    try:
        records.write(record)
        assert _listed() == {"run-1": endings.RUNNING}
        assert records.live_state(record) == record
    finally:
        os.close(claim)
    assert _listed() == {"run-1": Kind.LOST}
    assert records.live_state(record) == replace(record, state=Kind.LOST)


def test_a_run_held_by_another_process_is_running_until_that_process_is_killed(state: Path, holder: tuple[RunRecord, subprocess.Popen[str]]) -> None:
    record, proc = holder
    records.write(record)
    assert _listed() == {record.run_id: endings.RUNNING}
    proc.kill()  # SIGKILL: no end written, the kernel drops the lock with the process
    proc.wait()
    assert _listed() == {record.run_id: Kind.LOST}
    assert json.loads(_file(record.run_id).read_text())["state"] == endings.RUNNING  # the file is left as it was


def test_a_running_record_whose_folder_is_gone_or_was_never_claimed_is_lost(state: Path, tmp_path: Path) -> None:
    records.write(_record(tmp_path, "never-claimed"))
    gone = _record(tmp_path, "folder-gone")
    os.close(RunFolder(Path(gone.log_dir)).claim(gone.run_id))
    records.write(gone)
    (Path(gone.log_dir) / "run.json").unlink()
    Path(gone.log_dir).rmdir()
    assert _listed() == {"never-claimed": Kind.LOST, "folder-gone": Kind.LOST}


def test_only_a_record_that_says_running_is_checked_for_its_lock(state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for number, ending in enumerate((Kind.SUCCEEDED, Kind.FAILED, Kind.STOPPED, Kind.PREEMPTED, Kind.LOST)):
        records.write(_ended(tmp_path, f"run-{number}", state=ending))
    monkeypatch.setattr(RunFolder, "is_running", lambda self: pytest.fail("an ended run's folder was checked"))
    assert sorted(_listed().values()) == sorted((Kind.SUCCEEDED, Kind.FAILED, Kind.STOPPED, Kind.PREEMPTED, Kind.LOST))


@pytest.mark.parametrize("reader", ["read_all", "live_state", "prune"])
def test_a_run_that_ends_while_it_is_being_read_reads_as_it_ended_never_lost(state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    """The record is read `running`, then the run writes its end and lets go of its lock, then the lock is tried.

    Taken for lost, a month-long run that just succeeded would be pruned as a lost one."""
    record = _record(tmp_path, "run-1", started=NOW - 30 * DAY)
    claim = RunFolder(Path(record.log_dir)).claim(record.run_id)
    records.write(record)
    ended = replace(record, state=Kind.SUCCEEDED, ended=time.time(), exit_code=0)
    real = RunFolder.is_running

    def ends_now(folder: RunFolder) -> bool:
        records.write(ended)  # as execute() does: the end first, then the lock
        os.close(claim)
        monkeypatch.setattr(RunFolder, "is_running", real)
        return real(folder)

    monkeypatch.setattr(RunFolder, "is_running", ends_now)
    if reader == "read_all":
        assert records.read_all(Warnings()) == [ended]
    elif reader == "live_state":
        assert records.live_state(record) == ended
    else:
        assert records.prune(7, Warnings()) == []
        assert _listed() == {"run-1": Kind.SUCCEEDED}


# --- find -------------------------------------------------------------------------------------------------------------


@pytest.fixture
def three_runs(state: Path, tmp_path: Path) -> Iterator[dict[str, RunRecord]]:
    """run-1 ended, run-10 running (held here), run-2x ended and newest."""
    made = {
        "run-1": _ended(tmp_path, "run-1", started=NOW - 3 * DAY),
        "run-10": _record(tmp_path, "run-10", started=NOW - 2 * DAY),
        "run-2x": _ended(tmp_path, "run-2x", started=NOW - DAY),
    }
    claim = RunFolder(Path(made["run-10"].log_dir)).claim("run-10")
    for record in made.values():
        records.write(record)
    yield made
    os.close(claim)


def test_find_takes_an_exact_id_before_the_ids_it_prefixes(three_runs: dict[str, RunRecord]) -> None:
    assert records.find("run-1", Warnings()) == (three_runs["run-1"], None)
    assert records.find("run-10", Warnings()) == (three_runs["run-10"], None)


def test_find_takes_a_unique_prefix_and_says_which_run_it_took(three_runs: dict[str, RunRecord]) -> None:
    """Issue 46: a prefix that picked a run did so silently; the line names the run (the command prints it)."""
    assert records.find("run-2", Warnings()) == (three_runs["run-2x"], "the one run whose id starts with 'run-2': run-2x")
    assert records.find("run-1", Warnings(), running=True) == (three_runs["run-1"], None)  # exact still wins


def test_an_ambiguous_prefix_names_the_runs_in_one_line(three_runs: dict[str, RunRecord]) -> None:
    with pytest.raises(TpuctlError) as refused:
        records.find("run", Warnings())
    assert refused.value.exit_code == USAGE
    assert refused.value.message == "'run' names 3 runs (run-2x, run-10, run-1)" and "\n" not in str(refused.value)


def test_an_ambiguous_prefix_among_many_shows_four_and_says_there_are_more(state: Path, tmp_path: Path) -> None:
    for number in range(6):
        records.write(_ended(tmp_path, f"sweep-{number}", started=NOW - number))
    with pytest.raises(TpuctlError) as refused:
        records.find("sweep", Warnings())
    assert refused.value.message == "'sweep' names 6 runs (sweep-0, sweep-1, sweep-2, sweep-3, ...)"


def test_a_prefix_shared_with_ended_runs_finds_the_running_one_where_running_is_preferred(state: Path, tmp_path: Path) -> None:
    live = _record(tmp_path, "sweep-live")
    claim = RunFolder(Path(live.log_dir)).claim(live.run_id)
    try:
        for record in (live, _ended(tmp_path, "sweep-old"), _ended(tmp_path, "sweep-older")):
            records.write(record)
        assert records.find("sweep", Warnings(), running=True) == (live, "the one running run whose id starts with 'sweep': sweep-live")
        with pytest.raises(TpuctlError, match="names 3 runs"):
            records.find("sweep", Warnings())
    finally:
        os.close(claim)


def test_no_name_finds_the_newest_running_run_and_says_which(state: Path, tmp_path: Path) -> None:
    older, newer = _record(tmp_path, "older", started=NOW - DAY), _record(tmp_path, "newer", started=NOW)
    claims = [RunFolder(Path(r.log_dir)).claim(r.run_id) for r in (older, newer)]
    try:
        records.write(older)
        records.write(newer)
        records.write(_ended(tmp_path, "newest-but-ended", started=NOW + 60))
        records.write(_record(tmp_path, "newest-but-lost", started=NOW + 120))
        assert records.find(None, Warnings()) == (newer, "the newest running run: newer")
    finally:
        for claim in claims:
            os.close(claim)


def test_no_name_and_nothing_running_is_one_line(state: Path, tmp_path: Path) -> None:
    records.write(_ended(tmp_path, "run-1"))
    with pytest.raises(TpuctlError, match=r"^no run of yours is running \(") as refused:
        records.find(None, Warnings())
    assert refused.value.exit_code == FAILED


def test_a_name_that_matches_nothing_is_one_line(three_runs: dict[str, RunRecord]) -> None:
    with pytest.raises(TpuctlError, match=r"^no run 'nope' of yours \(") as refused:
        records.find("nope", Warnings())
    assert refused.value.exit_code == FAILED


@pytest.mark.parametrize("name", ["", "x" * 201, "run-1\n", "run\x1b[2J", "\x00"])
def test_a_name_that_cannot_be_a_run_id_is_refused_in_one_printable_line(three_runs: dict[str, RunRecord], name: str) -> None:
    with pytest.raises(TpuctlError) as refused:
        records.find(name, Warnings())
    assert refused.value.exit_code == USAGE and str(refused.value).isprintable()


@SETTINGS
@given(name=st.text(max_size=250))
def test_find_answers_any_name_with_a_record_or_one_line(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    home = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(home))
        records.write(_ended(home, "20260901-120000-train-abcd"))
        try:
            record, chosen = records.find(name, Warnings())
        except TpuctlError as err:
            assert str(err).isprintable() and err.exit_code in (USAGE, FAILED)
            return
    assert record.run_id.startswith(name) and (chosen is None) == (record.run_id == name)


# --- prune ------------------------------------------------------------------------------------------------------------


def test_prune_removes_what_ended_or_was_lost_before_the_limit_and_keeps_running_runs(state: Path, tmp_path: Path) -> None:
    old_ended = _ended(tmp_path, "old-ended", started=NOW - 40 * DAY)
    old_failed = _ended(tmp_path, "old-failed", started=NOW - 40 * DAY, state=Kind.FAILED, exit_code=1)
    long_run = _ended(tmp_path, "long-run", started=NOW - 40 * DAY, ended=NOW - DAY)  # started long ago, ended yesterday
    recent = _ended(tmp_path, "recent", started=NOW - DAY)
    old_lost = _record(tmp_path, "old-lost", started=NOW - 40 * DAY)  # says running; nobody holds its folder
    old_running = _record(tmp_path, "old-running", started=NOW - 40 * DAY)
    claim = RunFolder(Path(old_running.log_dir)).claim(old_running.run_id)
    try:
        for record in (old_ended, old_failed, long_run, recent, old_lost, old_running):
            records.write(record)
        removed = records.prune(30, Warnings(), now=NOW)
        assert sorted(r.run_id for r in removed) == ["old-ended", "old-failed", "old-lost"]
        assert _listed() == {"long-run": Kind.SUCCEEDED, "recent": Kind.SUCCEEDED, "old-running": endings.RUNNING}
        assert sorted(p.name for p in records.folder().iterdir()) == ["long-run.json", "old-running.json", "recent.json"]
        assert records.prune(30, Warnings(), now=NOW) == []
    finally:
        os.close(claim)


def test_prune_leaves_files_that_are_not_records_alone(state: Path, tmp_path: Path) -> None:
    records.write(_ended(tmp_path, "another-run", started=NOW - 40 * DAY))
    planted = _plant_hostile_files(records.folder())
    warn = Warnings()
    assert [r.run_id for r in records.prune(30, warn, now=NOW)] == ["another-run"]
    assert len(warn) == 1
    left = {p.name for p in records.folder().iterdir()}
    assert set(planted) <= left and "another-run.json" not in left


def test_prune_never_removes_a_running_runs_record_for_an_old_copy_filed_under_another_name(state: Path, tmp_path: Path) -> None:
    live = _record(tmp_path, "live-run", started=NOW - 40 * DAY)
    claim = RunFolder(Path(live.log_dir)).claim(live.run_id)
    try:
        records.write(live)
        old = _ended(tmp_path, "live-run", started=NOW - 40 * DAY)
        (records.folder() / "backup-of-live-run.json").write_text(json.dumps(old.to_json()))
        assert records.prune(30, Warnings(), now=NOW) == []
        assert _listed() == {"live-run": endings.RUNNING}
    finally:
        os.close(claim)


# --- atomic writes, modes ---------------------------------------------------------------------------------------------


def test_a_reader_never_sees_half_a_record_while_it_is_rewritten(state: Path, tmp_path: Path) -> None:
    record = _ended(tmp_path, "20260901-120000-train-abcd")
    records.write(record)
    stop = threading.Event()
    writes = []

    def rewrite() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            records.write(replace(record, job="x" * (number % 3000), exit_code=number))  # sizes that differ, up to a few pages
            writes.append(number)

    writer = threading.Thread(target=rewrite)
    writer.start()
    reads = 0
    try:
        # Half a second of reading (and at least 20 rewrites, ~70 reads each): a writer that rewrote the file in place is
        # caught at the first read (tried: 3 runs of 3), a temporary file left as a record at the first listing.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline or len(writes) < 20:
            warn = Warnings()
            (found,) = records.read_all(warn)
            assert warn == [] and found.run_id == record.run_id
            reads += 1
    finally:
        stop.set()
        writer.join()
    assert reads > 20 and len(writes) > 20
    assert [p.name for p in records.folder().iterdir()] == [f"{record.run_id}.json"]  # no temporary file left


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_records_are_private_whatever_the_umask(state: Path, tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        records.write(_ended(tmp_path, "run-1"))
        records.write(_ended(tmp_path, "run-1", exit_code=1))  # replaced: still private
    finally:
        os.umask(previous)
    assert _mode(_file("run-1")) == 0o600
    assert _mode(records.folder()) == 0o700 and _mode(records.folder().parent) == 0o700  # the folders it made too


def test_a_records_folder_open_to_others_is_narrowed_on_the_next_write(state: Path, tmp_path: Path) -> None:
    records.folder().mkdir(parents=True)
    records.folder().chmod(0o755)
    records.write(_ended(tmp_path, "run-1"))
    assert _mode(records.folder()) == 0o700


def test_a_records_folder_writable_by_others_is_refused(state: Path, tmp_path: Path) -> None:
    records.folder().mkdir(parents=True)
    records.folder().chmod(0o777)
    with pytest.raises(TpuctlError, match="writable by other users"):
        records.write(_ended(tmp_path, "run-1"))


def test_a_symlink_planted_at_a_record_is_replaced_not_followed(state: Path, tmp_path: Path) -> None:
    records.folder().mkdir(parents=True, mode=0o700)
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    _file("run-1").symlink_to(target)
    records.write(_ended(tmp_path, "run-1"))
    assert target.read_text() == "keep me" and not _file("run-1").is_symlink()


# --- the folder's claim -----------------------------------------------------------------------------------------------


def test_a_claim_makes_the_folder_private_and_holds_run_json(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "new" / "logs")
    assert not folder.is_running()
    claim = folder.claim("run-1")
    try:
        assert folder.is_running()
        assert _mode(folder.path) == 0o700 and _mode(folder.path.parent) == 0o700 and _mode(folder.run_file) == 0o600
        written = json.loads(folder.run_file.read_text())
        assert written["run_id"] == "run-1" and written["pid"] == os.getpid()
        assert folder.earlier() == ["run.json"]
    finally:
        os.close(claim)
    assert not folder.is_running()


def test_a_folder_of_the_users_keeps_its_mode_unless_others_can_write_it(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o750)
    mine.chmod(0o750)
    os.close(RunFolder(mine).claim("run-1"))
    assert _mode(mine) == 0o750
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(TpuctlError, match="writable by other users") as refused:
        RunFolder(shared).claim("run-2")
    assert "\n" not in str(refused.value) and not (shared / "run.json").exists()


def test_a_second_claim_is_refused_while_the_first_runs_and_after_it_ended(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "logs")
    claim = folder.claim("run-1")
    try:
        with pytest.raises(TpuctlError, match=rf"is in use by a running launch \(run-1, pid {os.getpid()}\)"):
            folder.claim("run-2")
    finally:
        os.close(claim)
    with pytest.raises(TpuctlError, match=r"already holds a launch \(run-1, pid"):
        folder.claim("run-2")


@pytest.mark.parametrize("left", ["outcome.json", "attempt-1"])
def test_a_folder_an_earlier_launch_wrote_into_is_not_claimed(tmp_path: Path, left: str) -> None:
    folder = RunFolder(tmp_path / "logs")
    folder.path.mkdir()
    if left.startswith("attempt"):
        (folder.path / left).mkdir()
    else:
        (folder.path / left).write_text("{}")
    assert folder.earlier() == [left]
    with pytest.raises(TpuctlError, match=rf"already holds a launch \({left}\)"):
        folder.claim("run-1")
    assert not folder.run_file.exists()


def test_a_symlink_planted_at_run_json_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    folder = RunFolder(tmp_path / "logs")
    folder.path.mkdir()
    folder.run_file.symlink_to(target)
    with pytest.raises(TpuctlError, match="already holds a launch"):
        folder.claim("run-1")
    assert target.read_text() == "keep me"
    held = RunFolder(tmp_path / "held")
    claim = held.claim("run-2")
    try:
        folder.run_file.unlink()
        folder.run_file.symlink_to(held.run_file)  # a link to a held run.json proves nothing about this folder
        assert not folder.is_running()
    finally:
        os.close(claim)


def test_of_many_claims_at_once_exactly_one_wins(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "logs")
    won: list[int] = []
    refused: list[str] = []
    start = threading.Barrier(8)

    def race(number: int) -> None:
        start.wait()
        try:
            won.append(folder.claim(f"run-{number}"))
        except TpuctlError as err:
            refused.append(err.message)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(won) == 1 and len(refused) == 7
        assert all("in use by a running launch" in message or "already holds a launch" in message for message in refused)
    finally:
        for claim in won:
            os.close(claim)


def test_a_run_json_that_is_not_a_file_is_not_a_running_run(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "logs")
    folder.path.mkdir()
    os.mkfifo(folder.run_file)
    assert not folder.is_running()  # opened without blocking, and a FIFO cannot be locked by a run

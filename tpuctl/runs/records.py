"""One record per run, every backend's, so that `tpuctl runs`, `logs`, `stop`, `attach` and `stacks` find it.

A record is a small JSON file, `RUN_ID.json` in this user's state folder (platformdirs:
~/.local/state/tpuctl/records on Linux), 0600, replaced whole through a temporary file,
so a crash leaves the old record or the new one, never half of one. The launch core writes
it as the run starts (state `running`) and again as it ends; the run's log folder holds
the rest (logs, plan, outcome).

Whether a `running` record is true is not taken on trust: the run holds the lock of its
folder's run.json for as long as it lives (RunFolder.claim), so a run whose supervisor died
without writing its end (SIGKILL, a power cut) reads `lost`, and its pid, which may be
another process's by now, is never signalled. A record that cannot be read (corrupt, hostile,
not ours) is skipped with one warning line; it never stops a listing.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from tpuctl.endings import RUN_STATES, RUNNING, Kind
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError, one_line
from tpuctl.inputs.private_files import private_dir, write_private
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.owned import mine, open_own

NODE_LIVE, NODE_DELETED, NODE_KEPT = "live", "deleted", "kept"
NODE_FATES = (NODE_LIVE, NODE_DELETED, NODE_KEPT)
# What the launch does with its VM as the run ends, as asked: delete it, keep it (--keep), keep it if the run fails.
NODE_DELETE, NODE_KEEP, NODE_KEEP_ON_FAILURE = "delete", "keep", "keep-on-failure"
NODE_ENDS = (NODE_DELETE, NODE_KEEP, NODE_KEEP_ON_FAILURE)
MAX_PRICE = 1e6  # USD an hour: far above any slice's list price, low enough to catch a unit slip
MAX_COST = MAX_PRICE * 24 * 366 * 10  # USD: ten years at MAX_PRICE
RECORD_LIMIT = 16 * 1024  # a record is a few hundred bytes; a bigger file is not one of ours
_SUFFIX = ".json"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    backend: str
    script: str
    log_dir: str
    started: float  # wall clock, seconds since the epoch
    pid: int  # the process that supervises the run (a detached one's, or the launching terminal's)
    host: str  # the machine that pid is on: records are read where they are written
    detached: bool = False
    state: str = RUNNING
    ended: float | None = None
    exit_code: int | None = None
    job: str | None = None  # what a cluster keeps: `TFJob x (namespace default)`, `CustomJob 123 (us-central1)`
    answers_stacks: bool = False  # the supervisor's SIGQUIT handler is in place: `tpuctl stacks` may signal it
    goodput: float | None = None  # an ended run's training steps / wall time (runs/goodput.py); None: no steps seen
    # The TPU VM a `launch --tpu` ran on, what its cost needs (docs/capacity.md#cost); None on any other backend.
    tpu: str | None = None  # its accelerator type: v5litepod-16
    zone: str | None = None
    capacity: str | None = None  # on-demand, spot, preemptible or reserved (billed by the reservation: no list price)
    price_per_hour: float | None = None  # its slice's list price in USD as the run started; None: no SKU prices it
    price_note: str | None = None  # where that price came from (prices.PriceBook.describe())
    # The TPU VM tpuctl created for this run (`launch --new-tpu`), the only node a run may delete; None for any other run.
    # `tpu`, `zone` and `capacity` above describe it (the current one, after a recreate in another zone).
    created_node: str | None = None  # its name, in `project` and `zone`
    project: str | None = None
    node_fate: str | None = None  # NODE_FATES: live while the run may still delete it; deleted or kept after its end
    node_end: str | None = None  # NODE_ENDS: what the launch will do with it as the run ends (None: a record from before it was kept)
    # A run whose VM was recreated at another price (another kind or zone): what its attempts on the earlier VMs cost,
    # each at its own VM's list price (None: one of them had none), and when price_per_hour began to apply.
    cost_before: float | None = None  # USD
    priced_since: float | None = None  # wall clock; None: since `started`
    # When `pid`'s process started, in clock ticks after boot (/proc/PID/stat's field 22, proc(5)): a pid reused by another
    # process has another. None: a record of a tpuctl before issue 46, or a machine without /proc; its pid is never signalled.
    pid_start: int | None = None

    @property
    def bills(self) -> bool:
        """Whether a VM this run created may still exist and bill: one that is neither deleted nor kept on purpose."""
        return self.created_node is not None and self.node_fate == NODE_LIVE

    @property
    def folder(self) -> RunFolder:
        return RunFolder(Path(self.log_dir))

    def duration(self, now: float | None = None) -> float:
        return max(0.0, (self.ended if self.ended is not None else (now or time.time())) - self.started)

    def cost(self, now: float | None = None) -> float | None:
        """USD of the run on its TPU VM(s) at their list prices, so far for a running one: the time since price_per_hour
        applied at it, plus the earlier VMs' (cost_before). None where a price is not known: tpuctl never guesses."""
        if self.price_per_hour is None or (self.priced_since is not None and self.cost_before is None):
            return None
        since = self.started if self.priced_since is None else self.priced_since
        seconds = max(0.0, (self.ended if self.ended is not None else (now or time.time())) - since)
        return (self.cost_before or 0.0) + seconds / 3600 * self.price_per_hour

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)  # every field is a scalar: asdict's deep copy (20 us a record) would copy nothing more

    @classmethod
    def from_json(cls, raw: object) -> RunRecord:
        """The record, checked field by field: ValueError for anything that is not one of ours.

        Exact JSON types (`true` is no pid), times that sort and subtract (NaN, 1e400 and a
        4000-digit integer do neither), a pid that names one process (kill(0) signals the
        caller's whole group), a log dir that the OS can open."""
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        values = tuple(map(raw.get, _NAMES, _DEFAULTS))  # fields it lacks get their defaults (a required one, _ABSENT)
        shape = tuple(map(type, values))
        if shape[:_HALF] not in _SHAPES[0] or shape[_HALF:] not in _SHAPES[1]:  # two set lookups, not a check per field: `tpuctl runs` reads thousands
            raise ValueError(_misfit(values))
        record = cls(*values)
        problem = record._problem()
        if problem:
            raise ValueError(problem)
        return record

    def _problem(self) -> str | None:
        if not _is_run_id(self.run_id):
            return "run_id is not a run id"
        if self.state not in RUN_STATES:
            return "state is not one of " + ", ".join(RUN_STATES)
        if not 0 < self.pid < _LIMIT:
            return "pid is out of range"
        if self.pid_start is not None and not 0 <= self.pid_start < 1 << 63:
            return "pid_start is out of range"
        if not (_is_time(self.started) and (self.ended is None or _is_time(self.ended))):
            return "started or ended is not a time"
        if self.exit_code is not None and not -_LIMIT < self.exit_code < _LIMIT:
            return "exit_code is out of range"
        if self.goodput is not None and not 0 <= self.goodput <= 1:  # NaN fails both
            return "goodput is not a share between 0 and 1"
        if self.price_per_hour is not None and not 0 <= self.price_per_hour <= MAX_PRICE:  # NaN fails both
            return f"price_per_hour is not a price in USD an hour (0 to {MAX_PRICE:g})"
        if self.cost_before is not None and not 0 <= self.cost_before <= MAX_COST:
            return f"cost_before is not a cost in USD (0 to {MAX_COST:g})"
        if self.priced_since is not None and not _is_time(self.priced_since):
            return "priced_since is not a time"
        if any(text is not None and not (len(text) <= 400 and text.isprintable()) for text in (self.tpu, self.zone, self.capacity, self.price_note)):
            return "tpu, zone, capacity or price_note is not one printable line"
        if not os.path.isabs(self.log_dir) or "\x00" in self.log_dir:
            return "log_dir is not an absolute path"
        if self.created_node is None and self.project is None and self.node_fate is None and self.node_end is None:
            return None  # most runs: no VM of their own (`tpuctl runs` reads thousands)
        return self._node_problem()

    def _node_problem(self) -> str | None:
        if any(text is not None and not (len(text) <= 200 and text.isprintable()) for text in (self.created_node, self.project)):
            return "created_node or project is not one printable line"
        if (self.node_fate is None) != (self.created_node is None) or (self.node_fate is not None and self.node_fate not in NODE_FATES):
            return "node_fate is not one of " + ", ".join(NODE_FATES) + " for a created_node (and null without one)"
        if self.node_end is not None and (self.created_node is None or self.node_end not in NODE_ENDS):
            return "node_end is not one of " + ", ".join(NODE_ENDS) + " for a created_node (and null without one)"
        return None


def price_cut(record: RunRecord | None, now: float) -> dict[str, float | None]:
    """The fields that close the current VM's time at its price as its run's VM is recreated (the attempt on it ended):
    the next VM's price, which a recreate may change, applies from `now`. Nothing for a run with no record."""
    if record is None:
        return {}
    return {"cost_before": record.cost(now), "priced_since": now}


def node_end(keep: bool, keep_on_failure: bool) -> str:
    """What the launch's end does with the run's VM, as `launch --keep` / `--keep-on-failure` ask (NODE_ENDS)."""
    return NODE_KEEP if keep else NODE_KEEP_ON_FAILURE if keep_on_failure else NODE_DELETE


@dataclass(frozen=True)
class SliceCost:
    """The TPU VM a run runs on, as its record keeps it: what `report` and `runs` price the run's wall time at."""

    tpu: str
    zone: str
    capacity: str
    price_per_hour: float | None
    price_note: str


# The JSON types each field may have, compared exactly (to isinstance, `true` is an int).
_KINDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "backend": (str,), "script": (str,), "log_dir": (str,), "started": (int, float), "pid": (int,), "host": (str,),
    "detached": (bool,), "state": (str,), "ended": (int, float, type(None)), "exit_code": (int, type(None)), "job": (str, type(None)),
    "answers_stacks": (bool,), "goodput": (int, float, type(None)), "tpu": (str, type(None)), "zone": (str, type(None)),
    "capacity": (str, type(None)), "price_per_hour": (int, float, type(None)), "price_note": (str, type(None)),
    "created_node": (str, type(None)), "project": (str, type(None)), "node_fate": (str, type(None)),
    "node_end": (str, type(None)), "cost_before": (int, float, type(None)), "priced_since": (int, float, type(None)),
    "pid_start": (int, type(None)),
}  # fmt: skip
_ABSENT = object()  # a required field's "default": no field may be an object
_NAMES = tuple(field.name for field in fields(RunRecord))
_DEFAULTS = tuple(_ABSENT if field.default is MISSING else field.default for field in fields(RunRecord))
_HALF = len(_NAMES) // 2
# Every record's field types, for each half of the fields: one set of all of them would be their product (27,648 tuples, 30 ms).
_SHAPES = tuple(frozenset(itertools.product(*(_KINDS[name] for name in half))) for half in (_NAMES[:_HALF], _NAMES[_HALF:]))
_LIMIT = 1 << 31  # pids and exit statuses are C ints


def folder() -> Path:
    from platformdirs import user_state_path

    return user_state_path("tpuctl") / "records"


def write(record: RunRecord) -> None:
    """Write (or replace) the run's record; OSError when it cannot be (the caller decides what that costs)."""
    where = private_dir(folder())
    write_private(where / f"{record.run_id}{_SUFFIX}", json.dumps(record.to_json()) + "\n")


def proven(record: RunRecord, doing: str = "deleted") -> None:
    """Before a record's word deletes a TPU VM (`stop`, `runs --delete-lost-vms`) or signals its pid (`stop`, `stacks`:
    runs/proof.py): its file is a regular file this user owns and no one else can write, in a records folder no one else
    can write, and says what `record` says. A record planted in a folder others can write, or a file of another user's,
    would otherwise send the DELETE or the signal. `doing`: what is not done where that fails (`nothing deleted`)."""
    nothing = f"nothing {doing}"
    directory = _own_folder(nothing)
    name = f"{record.run_id}{_SUFFIX}"
    try:
        info = os.lstat(name, dir_fd=directory)
        again = _read(name, directory)
    except (OSError, ValueError, RecursionError) as err:
        raise TpuctlError(f"run {record.run_id}'s record cannot be read again: {one_line(str(err), 120)}; {nothing}", exit_code=FAILED) from None
    finally:
        os.close(directory)
    if not mine(info) or stat.S_IMODE(info.st_mode) & 0o022:
        raise TpuctlError(
            f"run {record.run_id}'s record {one_line(str(folder() / name))} is not a file of yours that only you can write; {nothing}",
            hint="tpuctl acts only on the word of a record it wrote for you",
        )
    if again is None or _identity(again) != _identity(record):
        raise TpuctlError(f"run {record.run_id}'s record changed while it was read; {nothing}", hint="run the command again", exit_code=FAILED)


def _own_folder(nothing: str) -> int:
    """The records folder, open, once it is known to be this user's own, no symlink, and writable by no one else: the
    folder a record's word is believed from, and the one --prune deletes in (by name in it, never through a link)."""
    directory = open_own(folder(), "the run records folder", nothing)
    if directory is None:
        raise TpuctlError(f"the run records folder {one_line(str(folder()))} is gone; {nothing}", exit_code=FAILED)
    return directory


def _identity(record: RunRecord) -> tuple[object, ...]:
    """What a record's word acts on: the VM it deletes, the process it signals and where."""
    return record.created_node, record.project, record.zone, record.pid, record.pid_start, record.log_dir, record.host


def live_state(record: RunRecord) -> RunRecord:
    """A `running` record as it really is: `lost` when its supervisor no longer holds its folder's lock.

    A run writes its end before it lets go of the lock, so a free lock sends the record to be read
    once more: the run may have ended since it was read (a long run that just ended is no lost one)."""
    if record.state != RUNNING or record.folder.is_running():
        return record
    try:
        again = _read(str(folder() / f"{record.run_id}{_SUFFIX}"))
    except (OSError, ValueError, RecursionError):
        again = None
    return _ended_or_lost(record, again)


def read_all(warn: Callable[[str], None]) -> list[RunRecord]:
    """This user's runs, newest first, each with its live state; what cannot be read is skipped with one warning.

    `tpuctl runs` reads every record each time (10,000 in about 0.25 s on 2 cores: benchmarks/runs_listing.py),
    so a record costs one open, one read and one parse: the folder is opened once and each file by its
    name in it, and a lock is tried only for a record that says it is running."""
    where = folder()
    try:
        directory = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # no record yet (or no folder tpuctl could use: write() says so)
        return []
    found = []
    skipped = []
    try:
        for name in os.listdir(directory):
            if not name.endswith(_SUFFIX) or name.startswith("."):
                continue  # a temporary file of write()'s, or not a record
            try:
                record = _read(name, directory)
                if record is not None and record.state == RUNNING and not record.folder.is_running():
                    record = _ended_or_lost(record, _read(name, directory))
            except (OSError, ValueError, RecursionError) as err:
                skipped.append(f"{one_line(name, 80)} ({one_line(str(err), 80)})")
                continue
            if record is not None:
                found.append(record)
    finally:
        os.close(directory)
    if skipped:
        more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        warn(f"warning: skipped a run record that is not one of tpuctl's: {skipped[0]}{more} (in {one_line(str(where))})")
    found.sort(key=lambda r: (r.started, r.run_id), reverse=True)
    return found


def find(name: str | None, warn: Callable[[str], None], *, running: bool = False) -> tuple[RunRecord, str | None]:
    """The run a command names: a run id or a unique prefix of one; with none, the newest running run.

    Returns the record and, where tpuctl chose it, a line saying which (the command prints it)."""
    records = read_all(warn)
    if name is None:
        live = [r for r in records if r.state == RUNNING]
        if not live:
            raise TpuctlError("no run of yours is running", hint="`tpuctl runs` lists every run; name one", exit_code=FAILED)
        return live[0], f"the newest running run: {live[0].run_id}"
    if not name or len(name) > 200 or not name.isprintable():
        raise TpuctlError(f"{one_line(name, 40)!r} is not a run id", hint="`tpuctl runs` lists them", exit_code=USAGE)
    exact = [r for r in records if r.run_id == name]
    prefixed = exact or [r for r in records if r.run_id.startswith(name)]
    matches = ([r for r in prefixed if r.state == RUNNING] or prefixed) if running else prefixed
    if not matches:
        raise TpuctlError(f"no run {one_line(name, 60)!r} of yours", hint="`tpuctl runs` lists them", exit_code=FAILED)
    if len(matches) > 1:
        names = ", ".join(r.run_id for r in matches[:4]) + (", ..." if len(matches) > 4 else "")
        raise TpuctlError(f"{one_line(name, 60)!r} names {len(matches)} runs ({names})", hint="give more of the run id", exit_code=USAGE)
    if exact:
        return matches[0], None
    which = "the one running run" if len(matches) < len(prefixed) else "the one run"
    return matches[0], f"{which} whose id starts with {one_line(name, 60)!r}: {matches[0].run_id}"  # a prefix never picks unsaid


def names_a_run(name: str, warn: Callable[[str], None]) -> bool:
    """Whether `name` is a run id of yours or a prefix of one, as `find` reads it: what `tpuctl stop` asks before it
    takes a name for anything else, instead of guessing from how the name looks."""
    return any(r.run_id.startswith(name) for r in read_all(warn)) if name and name.isprintable() else False


def find_or_folder(name: str | None, warn: Callable[[str], None], *, running: bool = False) -> tuple[RunFolder, RunRecord | None, str | None]:
    """The run a command names by its id (as `find`) or by the path of the log folder a launch wrote (a name with a
    path separator, `.` or `..`): its folder, its record (None where a path named it: `record_of` looks it up),
    and where tpuctl chose the run, the line saying which."""
    if name is not None and (os.sep in name or name in (".", "..")):
        path = Path(name).expanduser()
        if not path.is_dir():
            raise TpuctlError(f"{one_line(name, 60)!r} is not a launch's log folder", hint="pass a run id or the LOG_DIR a launch wrote", exit_code=FAILED)
        return RunFolder(path.resolve()), None, None
    record, chosen = find(name, warn, running=running)
    return record.folder, record, chosen


def record_of(folder: RunFolder, warn: Callable[[str], None]) -> RunRecord:
    """The record of the run that wrote `folder` (the newest, where runs of several users' states name it), or one line.

    A record's log_dir is taken for the folder it leads to (stat: the same folder, however either path is spelt); one that
    leads nowhere is passed over, and where no record names `folder`, the ones that could not be followed (a symlink
    loop, a folder that cannot be entered) are named in one warning: no record stops the search for the others."""
    hint = "its run was launched with another state folder (XDG_STATE_HOME), or its record was pruned"
    try:
        wanted = os.stat(folder.path)
    except OSError as err:
        raise TpuctlError(f"the log folder {one_line(str(folder.path), 120)} cannot be read: {err.strerror or err}", exit_code=FAILED) from None
    unfollowed = []
    for record in read_all(warn):
        try:
            info = os.stat(record.log_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue  # a run folder removed since: not this one
        except (OSError, ValueError) as err:
            unfollowed.append(f"{record.run_id} ({err.strerror if isinstance(err, OSError) and err.strerror else err})")
            continue
        if (info.st_dev, info.st_ino) == (wanted.st_dev, wanted.st_ino):
            return record
    if unfollowed:
        more = f" and {len(unfollowed) - 1} more" if len(unfollowed) > 1 else ""
        warn(f"warning: passed over a run record whose log_dir cannot be followed: {one_line(unfollowed[0], 160)}{more}")
    raise TpuctlError(f"no run record of yours names the log folder {one_line(str(folder.path), 120)}", hint=hint, exit_code=FAILED)


def prune(days: float, warn: Callable[[str], None], now: float | None = None) -> list[RunRecord]:
    """Remove the records of runs that ended (or were lost) more than `days` ago; running ones stay, and so do those
    whose TPU VM may still bill: the record is the only thing `runs`, `stop` and --delete-lost-vms find that VM by.
    The removed.

    Removed by name in the records folder, opened once it is known to be this user's own and no symlink (a link to
    another user's folder would delete their records), and only files of this user's; one line where it is not."""
    limit = (now if now is not None else time.time()) - days * 86400
    old = [r for r in read_all(warn) if r.state != RUNNING and (r.ended if r.ended is not None else r.started) < limit]
    billing = [record.run_id for record in old if record.bills]
    removable = [record for record in old if not record.bills]
    removed, others = _remove(removable) if removable else ([], [])
    if others:
        warn(f"warning: kept {len(others)} record(s) that are not files of yours ({_few(others)})")
    if billing:
        warn(
            f"kept the records of {len(billing)} run(s) whose TPU VM may still bill ({_few(billing)}):"
            " `tpuctl stop RUN` or `tpuctl runs --delete-lost-vms` deletes it, then --prune removes the record"
        )
    return removed


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _remove(old: list[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """Remove the records of `old` that are files of this user's from their own folder: the removed, and the run ids
    of those that are not (kept)."""
    removed, others = [], []
    directory = _own_folder("nothing removed")
    try:
        for record in old:
            name = f"{record.run_id}{_SUFFIX}"
            try:
                if not mine(os.lstat(name, dir_fd=directory)):
                    others.append(record.run_id)
                    continue
                os.unlink(name, dir_fd=directory)
            except FileNotFoundError:
                continue  # pruned meanwhile
            removed.append(record)
    finally:
        os.close(directory)
    return removed, others


def _read(name: str, directory: int | None = None) -> RunRecord | None:
    """The record in file `name` (in the folder open as `directory`), None when it is gone (pruned meanwhile);
    OSError or ValueError when it is not a record of tpuctl's.

    What inputs.read_small_bytes checks, without a Path per file: no symlink followed, no FIFO
    waited on, nothing but a regular file, and at most RECORD_LIMIT bytes read (/dev/zero is
    endless). The file's name must be its run id's: prune removes a record by its run id."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, RECORD_LIMIT + 1) if info.st_size <= RECORD_LIMIT else b""
    finally:
        os.close(fd)
    if info.st_size > RECORD_LIMIT or len(data) > RECORD_LIMIT:
        raise ValueError(f"larger than {RECORD_LIMIT} bytes")
    record = RunRecord.from_json(json.loads(data.decode()))  # UTF-8 only; json.loads(bytes) is twice as slow
    if os.path.basename(name) != f"{record.run_id}{_SUFFIX}":
        raise ValueError(f"it is the record of {one_line(record.run_id, 60)!r}")
    return record


def _ended_or_lost(record: RunRecord, again: RunRecord | None) -> RunRecord:
    """A record read as running whose folder's lock was then found free: the run ended in between (it writes its end
    before it lets go of the lock, so `again`, read after the lock, says so) or its supervisor is gone."""
    if again is not None and again.state != RUNNING:
        return again
    return replace(record, state=Kind.LOST.value)


def _misfit(values: tuple[object, ...]) -> str:
    """What is wrong with the first field of `values` (in _NAMES' order) that no record may hold."""
    for name, value in zip(_NAMES, values, strict=True):
        kinds = _KINDS[name]
        if value is _ABSENT:
            return f"it has no {name}"
        if type(value) not in kinds:
            return f"{name} is not a {' or '.join('null' if kind is type(None) else kind.__name__ for kind in kinds)}"
    return "not a run record"


def _is_time(value: float) -> bool:
    """Seconds since the epoch: finite (NaN and infinity compare false) and within the next 3,000 years."""
    return 0 <= value < 1e11


def _is_run_id(text: str) -> bool:
    """A run id is a file name tpuctl made (launch's run_id: date, script stem, random hex): no path, no control."""
    return 0 < len(text) <= 200 and text.isprintable() and "/" not in text and text not in (".", "..") and not text.startswith(".")

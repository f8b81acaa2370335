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
from tpuctl.runs.vm_record import NO_VM_JSON, VM_KINDS, VM_NAMES, NodeState, VmRecord

# What a run is: a launch (its backend says where it runs), or `tpuctl babysit`'s loop, kept as a run (runs/recorded.py).
LAUNCH, BABYSIT = "launch", "babysit"
RUN_KINDS = (LAUNCH, BABYSIT)
RECORD_LIMIT = 16 * 1024  # a record is a few hundred bytes; a bigger file is not one of ours
_SUFFIX = ".json"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    backend: str | None  # the launch backend (local, ssh, kubernetes, vertex); None for a run that is no launch (`kind`)
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
    # When `pid`'s process started, in clock ticks after boot (/proc/PID/stat's field 22, proc(5)): a pid reused by another
    # process has another. None: a record of a tpuctl before issue 46, or a machine without /proc; its pid is never signalled.
    pid_start: int | None = None
    kind: str = LAUNCH  # RUN_KINDS: a launch, or babysit's loop kept as a run (runs/recorded.py)
    # The TPU VM the run ran on (vm_record.py: its cost, and the life of one tpuctl created for the run); None on any
    # other backend. The last field: from_json fills the others by position.
    vm: VmRecord | None = None

    @property
    def bills(self) -> bool:
        """Whether a VM this run created may still exist and bill: one that is neither deleted, kept nor lost."""
        return self.vm is not None and self.vm.bills

    @property
    def folder(self) -> RunFolder:
        return RunFolder(Path(self.log_dir))

    def duration(self, now: float | None = None) -> float:
        return max(0.0, (self.ended if self.ended is not None else (now or time.time())) - self.started)

    def cost(self, now: float | None = None) -> float | None:
        """USD of the run on its TPU VM(s) at their list prices, so far for a running one: the time since price_per_hour
        applied at it, plus the earlier VMs' (cost_before). None where a price is not known: tpuctl never guesses."""
        vm = self.vm
        if vm is None or vm.price_per_hour is None or (vm.priced_since is not None and vm.cost_before is None):
            return None
        since = self.started if vm.priced_since is None else vm.priced_since
        seconds = max(0.0, (self.ended if self.ended is not None else (now or time.time())) - since)
        return (vm.cost_before or 0.0) + seconds / 3600 * vm.price_per_hour

    def to_json(self) -> dict[str, Any]:
        """The record file's fields: the run's, then its VM's as records always kept them, flat (null without a VM)."""
        run = dict(self.__dict__)  # scalars but the VM: asdict's deep copy (20 us a record) would copy nothing more
        del run["vm"]
        return run | (self.vm.to_json() if self.vm is not None else NO_VM_JSON)

    @classmethod
    def from_json(cls, raw: object) -> RunRecord:
        """The record, checked field by field: ValueError for anything that is not one of ours.

        Exact JSON types (`true` is no pid), times that sort and subtract (NaN, 1e400 and a
        4000-digit integer do neither), a pid that names one process (kill(0) signals the
        caller's whole group), a log dir that the OS can open."""
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("backend") == BABYSIT and "kind" not in raw:  # a babysit record from before `kind`: its backend said it
            raw = {**raw, "backend": None, "kind": BABYSIT}
        values = tuple(map(raw.get, _NAMES, _DEFAULTS))  # fields it lacks get their defaults (a required one, _ABSENT)
        if tuple(map(type, values)) not in _SHAPES:  # one set lookup, not a check per field: `tpuctl runs` reads thousands
            raise ValueError(_misfit(values, _NAMES, _KINDS))
        vm_values = tuple(map(raw.get, VM_NAMES))
        if vm_values == _NO_VM:
            record = cls(*values)  # most runs: no TPU VM
        else:
            if not all(type(value) in kinds for value, kinds in zip(vm_values, VM_KINDS.values(), strict=True)):
                raise ValueError(_misfit(vm_values, VM_NAMES, VM_KINDS))
            record = replace(cls(*values), vm=VmRecord.from_fields(vm_values))
        problem = record._problem()
        if problem:
            raise ValueError(problem)
        return record

    def _problem(self) -> str | None:
        if not _is_run_id(self.run_id):
            return "run_id is not a run id"
        if self.kind not in RUN_KINDS or (self.backend is None) != (self.kind != LAUNCH) or self.backend == BABYSIT:
            return "kind is not one of " + ", ".join(RUN_KINDS) + " with a backend for a launch alone"
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
        if not os.path.isabs(self.log_dir) or "\x00" in self.log_dir:
            return "log_dir is not an absolute path"
        return None

    @property
    def orphaned(self) -> bool:
        """A VM this run created that may still bill, with nobody left to delete it: the run is lost, or it ended but its
        launcher died before the delete (a run holds its folder's lock until its VM is gone)."""
        return self.bills and self.state != RUNNING and not self.folder.is_running()

    def vm_gone(self, deleted: bool, now: float) -> RunRecord:
        """The record of an orphaned run once its VM is gone (`tpuctl stop`, `runs --delete-lost-vms`): deleted, or lost
        (a node of its name without the run's label is another's: the run's own is gone either way). A lost run ends
        as its VM went (its workers could not outlive it); an ended run keeps its end."""
        assert self.vm is not None
        vm = self.vm.ended(NodeState.DELETED if deleted else NodeState.LOST)
        return replace(self, vm=vm, ended=now if self.state == Kind.LOST and self.ended is None else self.ended)


# The JSON types each field may have, compared exactly (to isinstance, `true` is an int).
_KINDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "backend": (str, type(None)), "script": (str,), "log_dir": (str,), "started": (int, float), "pid": (int,), "host": (str,),
    "detached": (bool,), "state": (str,), "ended": (int, float, type(None)), "exit_code": (int, type(None)), "job": (str, type(None)),
    "answers_stacks": (bool,), "goodput": (int, float, type(None)), "pid_start": (int, type(None)), "kind": (str,),
}  # fmt: skip
_ABSENT = object()  # a required field's "default": no field may be an object
_NAMES = tuple(field.name for field in fields(RunRecord) if field.name != "vm")
_DEFAULTS = tuple(_ABSENT if field.default is MISSING else field.default for field in fields(RunRecord) if field.name != "vm")
_SHAPES = frozenset(itertools.product(*(_KINDS[name] for name in _NAMES)))  # every run part's field types (288 tuples)
_NO_VM = tuple(NO_VM_JSON.values())
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
    vm = record.vm or VmRecord()
    return vm.created_node, vm.project, vm.zone, record.pid, record.pid_start, record.log_dir, record.host


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


def _misfit(values: tuple[object, ...], names: tuple[str, ...], types: dict[str, tuple[type, ...]]) -> str:
    """What is wrong with the first field of `values` (in `names`' order) that no record may hold."""
    for name, value in zip(names, values, strict=True):
        kinds = types[name]
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

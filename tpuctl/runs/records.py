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

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tpuctl.errors import FAILED, USAGE, TpuctlError, one_line
from tpuctl.inputs import read_small_bytes
from tpuctl.private_files import private_dir, write_private
from tpuctl.runs.folder import RunFolder

RUNNING, SUCCEEDED, FAILED_STATE, PREEMPTED, STOPPED, LOST = "running", "succeeded", "failed", "preempted", "stopped", "lost"
STATES = (RUNNING, SUCCEEDED, FAILED_STATE, PREEMPTED, STOPPED, LOST)
RECORD_LIMIT = 16 * 1024  # a record is a few hundred bytes; a bigger file is not one of ours
_SUFFIX = ".json"


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

    @property
    def folder(self) -> RunFolder:
        return RunFolder(Path(self.log_dir))

    def duration(self, now: float | None = None) -> float:
        return max(0.0, (self.ended if self.ended is not None else (now or time.time())) - self.started)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> RunRecord:
        """The record, checked field by field: ValueError for anything that is not one of ours."""
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        kinds: dict[str, tuple[type, ...]] = {
            "run_id": (str,), "backend": (str,), "script": (str,), "log_dir": (str,), "started": (int, float), "pid": (int,),
            "host": (str,), "detached": (bool,), "state": (str,), "ended": (int, float, type(None)), "exit_code": (int, type(None)),
            "job": (str, type(None)), "answers_stacks": (bool,),
        }  # fmt: skip
        values = {name: raw[name] for name in kinds if name in raw}
        for name, value in values.items():
            if not isinstance(value, kinds[name]) or (isinstance(value, bool) and bool not in kinds[name]):
                raise ValueError(f"{name} is not a {' or '.join(k.__name__ for k in kinds[name])}")
        record = cls(**values)
        if not _is_run_id(record.run_id) or record.state not in STATES or record.pid < 0:
            raise ValueError("not a run record")
        return record


def folder() -> Path:
    from platformdirs import user_state_path

    return user_state_path("tpuctl") / "records"


def write(record: RunRecord) -> None:
    """Write (or replace) the run's record; OSError when it cannot be (the caller decides what that costs)."""
    where = private_dir(folder())
    write_private(where / f"{record.run_id}{_SUFFIX}", json.dumps(record.to_json()) + "\n")


def live_state(record: RunRecord) -> RunRecord:
    """A `running` record as it really is: `lost` when its supervisor no longer holds its folder's lock."""
    if record.state == RUNNING and not record.folder.is_running():
        return replace(record, state=LOST)
    return record


def read_all(warn: Callable[[str], None]) -> list[RunRecord]:
    """This user's runs, newest first, each with its live state; what cannot be read is skipped with one warning."""
    found = []
    skipped = []
    for path in _record_files():
        try:
            data = read_small_bytes(path, "run record", limit=RECORD_LIMIT, exit_code=FAILED)
            found.append(live_state(RunRecord.from_json(json.loads(data or b""))))
        except (TpuctlError, ValueError, TypeError, RecursionError) as err:
            skipped.append(f"{path.name} ({one_line(str(err), 80)})")
    if skipped:
        more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        warn(f"warning: skipped a run record that is not one of tpuctl's: {skipped[0]}{more} (in {folder()})")
    return sorted(found, key=lambda r: (r.started, r.run_id), reverse=True)


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
    matches = exact or [r for r in records if r.run_id.startswith(name)]
    if running:
        matches = [r for r in matches if r.state == RUNNING] or matches
    if not matches:
        raise TpuctlError(f"no run {one_line(name, 60)!r} of yours", hint="`tpuctl runs` lists them", exit_code=FAILED)
    if len(matches) > 1:
        names = ", ".join(r.run_id for r in matches[:4])
        raise TpuctlError(f"{one_line(name, 60)!r} names {len(matches)} runs ({names}, ...)", hint="give more of the run id", exit_code=USAGE)
    return matches[0], None


def prune(days: float, warn: Callable[[str], None], now: float | None = None) -> list[RunRecord]:
    """Remove the records of runs that ended (or were lost) more than `days` ago; running ones stay. The removed."""
    limit = (now or time.time()) - days * 86400
    removed = []
    for record in read_all(warn):
        if record.state != RUNNING and (record.ended or record.started) < limit:
            try:
                (folder() / f"{record.run_id}{_SUFFIX}").unlink()
            except FileNotFoundError:
                continue
            removed.append(record)
    return removed


def _record_files() -> Iterator[Path]:
    try:
        with os.scandir(folder()) as entries:
            for entry in entries:
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith("."):
                    yield Path(entry.path)
    except OSError:
        return


def _is_run_id(text: str) -> bool:
    """A run id is a file name tpuctl made (launch's run_id: date, script stem, random hex): no path, no control."""
    return 0 < len(text) <= 200 and text.isprintable() and "/" not in text and text not in (".", "..") and not text.startswith(".")

"""A run's folder (LOG_DIR): the one place that knows its layout.

Every backend writes the same layout, so that whatever reads a run later (`tpuctl
stacks`, run history, timelines, profiles) reads one shape:

    LOG_DIR/run.json                         the launch that claimed the folder, locked while it runs
    LOG_DIR/outcome.json                     how the run ended (`tpuctl launch --json`'s schema)
    LOG_DIR/stacks.txt                       the newest stacks view (`tpuctl stacks` waits for it)
    LOG_DIR/console.log                      a detached run's console (`tpuctl attach` follows it)
    LOG_DIR/timeline.jsonl                   what happened when (runs/timeline.py): the time report reads it
    LOG_DIR/stop-requested                   `tpuctl stop` asked the run to stop (a job backend then deletes its job)
    LOG_DIR/profile-requests/                `tpuctl profile`'s requests and the launcher's answers (launch/process/profiles.py)
    LOG_DIR/attempt-N/                       one folder per attempt (a Kubernetes container restart is one)
    LOG_DIR/attempt-N/plan.json              the attempt's processes (process backends)
    LOG_DIR/attempt-N/profilers.json         its workers, where they write profiles, how to reach them (local, ssh; `tpuctl profile`)
    LOG_DIR/attempt-N/manifest.yaml          what a Kubernetes launch applied
    LOG_DIR/attempt-N/TYPE-INDEX[@HOST].log  one worker's output (HOST where workers run on several hosts)
    LOG_DIR/attempt-N/environment@HOST.log   pip's words on HOST for --requirements (backends/ssh/environment/hosts.py)
    LOG_DIR/attempt-N/setup@HOST.log         --setup's output on HOST
    LOG_DIR/attempt-N/stacks-M/              every worker's stacks, taken the M-th time, and their view

The folders are private (0700): plans, manifests and logs may hold --env values.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.parse import read_small_bytes
from tpuctl.inputs.private_files import hold_new, is_held, private_dir, write_private

RUN_FILE = "run.json"
PROFILERS_FILE = "profilers.json"
_PROFILERS_LIMIT = 1 << 20  # far past MAX_TASKS workers' entries: more is no file a launch wrote
OUTCOME_FILE = "outcome.json"
STACKS_VIEW = "stacks.txt"
FULL_STACKS = "full stacks: "  # a stacks view's last line, then the private folder that holds every worker's dump
CONSOLE_LOG = "console.log"
STOP_REQUEST = "stop-requested"
TIMELINE = "timeline.jsonl"
PROFILE_REQUESTS = "profile-requests"
CAPTURES = 1  # profilers.json's "captures": the workers take `tpuctl profile`'s captures themselves (not a server's)
# The inverse of the names below (attempt_dir, worker_log), for what reads a folder back: `tpuctl logs`.
_ATTEMPT_NAME = re.compile(r"attempt-([0-9]{1,6})\Z")
_WORKER_LOG = re.compile(r"([a-z]+)-([0-9]{1,6})(?:@(.+))?\.log\Z")
_WRITABLE_HINT = "pass a --log-dir that tpuctl can write"


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def outcome_file(self) -> Path:
        return self.path / OUTCOME_FILE

    @property
    def stacks_view(self) -> Path:
        return self.path / STACKS_VIEW

    @property
    def profile_requests(self) -> Path:
        return self.path / PROFILE_REQUESTS

    def earlier(self) -> list[str]:
        """What in the folder shows that a launch used it already (names in the folder), empty for a fresh one."""
        return [name for name in (RUN_FILE, OUTCOME_FILE, self._attempt_name(1)) if os.path.lexists(self.path / name)]

    def attempt_dir(self, attempt: int) -> Path:
        return self.path / self._attempt_name(attempt)

    def make_attempt(self, attempt: int) -> Path:
        """The attempt's folder, made private; something else in its place (a file named `attempt-1`) is bad input:
        one line, exit 2."""
        folder = self.attempt_dir(attempt)
        try:
            private_dir(folder)
        except OSError as err:
            raise TpuctlError(f"cannot create log folder {folder}: {err.strerror or err}", hint=_WRITABLE_HINT) from None
        return folder

    def environment_log(self, attempt: int, host: str) -> Path:
        """pip's words on `host` for the launch's --requirements (an ssh launch's environments)."""
        return self.attempt_dir(attempt) / f"environment@{host}.log"

    def setup_log(self, attempt: int, host: str) -> Path:
        """--setup's output on `host`."""
        return self.attempt_dir(attempt) / f"setup@{host}.log"

    def plan_file(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "plan.json"

    def profilers_file(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / PROFILERS_FILE

    def write_profilers(
        self, attempt: int, workers: list[dict[str, object]], profile_dir: str, backend: str, connection: dict[str, object] | None = None
    ) -> None:
        """The attempt's workers for `tpuctl profile`: `{"workers": [{"worker", "host", "python"}, ...], "profile_dir",
        "backend", "captures"}`: "captures" (CAPTURES) says the launcher serves profile requests; a worker's entry adds
        "port" where its profiler server listens (--profiler-server), "ssh" (the host it was reached as); the record
        `connection`, the ssh options the launch took: user, key, options, config, fanout. Raises OSError."""
        record: dict[str, object] = {"workers": workers, "profile_dir": profile_dir, "backend": backend, "captures": CAPTURES}
        if connection is not None:
            record["connection"] = connection
        write_private(self.profilers_file(attempt), json.dumps(record, indent=2) + "\n")

    def latest_profilers(self) -> dict[str, Any] | None:
        """The newest attempt's profilers.json, checked; None when that attempt has none (a job backend, workers not all
        started yet). A file no launch wrote is one line (TpuctlError), never a traceback."""
        attempts = [n for entry in _entries(self.path) if (n := self.attempt_of(entry)) is not None]
        if not attempts:
            return None
        path = self.profilers_file(max(attempts))
        what = "profiler record"
        data = read_small_bytes(path, what, limit=_PROFILERS_LIMIT, exit_code=FAILED)
        if data is None:
            return None
        try:
            found = json.loads(data)
            return _checked_profilers(found)
        except (ValueError, TypeError, KeyError, RecursionError):
            hint = "it was changed or cut short; relaunch to record it again"
            raise TpuctlError(f"{what} {path} is not one tpuctl wrote", hint=hint, exit_code=FAILED) from None

    def manifest_file(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "manifest.yaml"

    def worker_log(self, attempt: int, worker: str, host: str | None = None) -> Path:
        """`worker:1` on attempt 2 -> attempt-2/worker-1.log; with a host, worker-1@HOST.log."""
        return self.attempt_dir(attempt) / f"{file_name(worker)}{f'@{host}' if host else ''}.log"

    def next_stacks_dir(self, attempt: int) -> Path:
        """A new private stacks-M folder in the attempt's folder."""
        number = 1
        while (self.attempt_dir(attempt) / f"stacks-{number}").exists():
            number += 1
        return private_dir(self.attempt_dir(attempt) / f"stacks-{number}")

    @property
    def console_log(self) -> Path:
        """A detached run's console: what an attached launch prints on the terminal (`tpuctl attach` follows it)."""
        return self.path / CONSOLE_LOG

    @property
    def timeline(self) -> Path:
        return self.path / TIMELINE

    @property
    def stop_request(self) -> Path:
        """Made by `tpuctl stop` before it signals the run: a stop asked for, not a lost terminal or a shutdown."""
        return self.path / STOP_REQUEST

    def claim(self, run_id: str) -> int:
        """Make the folder this run's alone, or refuse in one line; the descriptor holds the claim.

        One folder, one run: a second launch into the same folder (at once, or after the
        first ended) would interleave or replace its logs and outcome. The folder must be
        this user's and closed to other users' writes (a planted symlink would be followed
        otherwise); run.json, created only if absent (O_EXCL) and locked while the run goes
        on, decides a race and tells a running run from a finished one (`is_running`).
        """
        hint = "pass a --log-dir of your own that other users cannot write"
        try:
            private_dir(self.path, tighten=False, hint=hint)  # new folders 0700; a folder the user made keeps its mode
            earlier = self.earlier()
            if not earlier:
                record = {"run_id": run_id, "pid": os.getpid(), "started": time.time()}
                return hold_new(self.run_file, json.dumps(record) + "\n")
        except FileExistsError:
            earlier = [RUN_FILE]
        except OSError as err:
            raise TpuctlError(f"cannot create log dir {self.path}: {err.strerror or err}", hint=hint) from None
        raise self._taken(earlier[0])

    def is_running(self) -> bool:
        """True while the run that claimed the folder goes on (its process holds run.json's lock), on this machine."""
        try:
            return is_held(self.run_file)
        except OSError:
            return False

    def _taken(self, found: str) -> TpuctlError:
        fresh = "pass a new --log-dir (or leave it out: each launch then gets its own folder)"
        if found == RUN_FILE and self.is_running():
            return TpuctlError(f"--log-dir {self.path} is in use by a running launch ({self.claimed_by()})", hint=fresh)
        return TpuctlError(
            f"--log-dir {self.path} already holds a launch ({self.claimed_by() or found})", hint=f"{fresh}, or remove {self.path} first"
        )

    def claimant(self) -> tuple[str, int] | None:
        """The run id and pid a claimed folder's run.json names, or None where it cannot be read."""
        try:
            raw = json.loads(read_small_bytes(self.run_file, "run record", limit=4096) or b"")
            return str(raw["run_id"]), int(raw["pid"])
        except (TpuctlError, ValueError, KeyError, TypeError, RecursionError):  # RecursionError: 4 KB of `[` nest past json's depth
            return None

    def claimed_by(self) -> str:
        """`RUN_ID, pid N` from a claimed folder's run.json, or "" where it cannot be read."""
        found = self.claimant()
        return "" if found is None else f"{found[0]}, pid {found[1]}"

    @staticmethod
    def attempt_of(name: str) -> int | None:
        """The attempt a folder named `name` holds (`attempt-2`: 2); None for any other name."""
        match = _ATTEMPT_NAME.match(name)
        return int(match[1]) if match else None

    @staticmethod
    def worker_log_of(name: str) -> tuple[str, int, str | None] | None:
        """The task type, index and host a worker log's file name gives (`worker-1@h.log`); None for any other name."""
        match = _WORKER_LOG.match(name)
        return (match[1], int(match[2]), match[3]) if match else None

    @staticmethod
    def _attempt_name(attempt: int) -> str:
        return f"attempt-{attempt}"


def _entries(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _checked_profilers(found: Any) -> dict[str, Any]:
    """Each field of a profilers.json as write_profilers writes it, else ValueError/TypeError/KeyError."""
    workers = []
    for entry in found["workers"]:
        worker: dict[str, Any] = {name: _text(entry[name]) for name in ("worker", "host", "python")}
        if "port" in entry:
            port = entry["port"]
            if not (type(port) is int and 0 < port < 65536):
                raise ValueError(port)
            worker["port"] = port
        if "ssh" in entry:
            worker["ssh"] = _text(entry["ssh"])
        workers.append(worker)
    if not workers:
        raise ValueError("no workers")
    checked: dict[str, Any] = {"workers": workers, "profile_dir": _text(found["profile_dir"]), "backend": _text(found["backend"])}
    captures = found.get("captures")  # absent: a launch by an older tpuctl, whose workers only ran a profiler server
    if captures is not None and type(captures) is not int:
        raise ValueError(captures)
    checked["captures"] = captures
    if "connection" in found:
        checked["connection"] = _checked_connection(found["connection"])
    return checked


def _checked_connection(found: Any) -> dict[str, Any]:
    """The ssh options a launch recorded: its own words back, or ValueError/TypeError."""
    if not isinstance(found, dict):
        raise TypeError(found)
    unknown = set(found) - {"user", "key", "options", "config", "fanout"}
    if unknown:
        raise ValueError(unknown)
    checked: dict[str, Any] = {name: _text(found[name]) for name in ("user", "key", "config") if name in found}
    options = found.get("options", [])
    if not isinstance(options, list) or len(options) > 64:
        raise ValueError(options)
    checked["options"] = [_text(option) for option in options]
    fanout = found.get("fanout", 1)
    if not (type(fanout) is int and 0 < fanout <= 4096):
        raise ValueError(fanout)
    checked["fanout"] = fanout
    return checked


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096 or not value.isprintable():
        raise ValueError(value)
    return value


def file_name(worker: str) -> str:
    """A worker's name (`chief:0`) as it appears in file names (`chief-0`)."""
    return worker.replace(":", "-")

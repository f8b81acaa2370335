"""Capturing a profile of a running run's workers (`tpuctl profile`): asked of the run's launcher, taken by each worker.

The command leaves a request in the run's folder (LOG_DIR/profile-requests/ID.json) and waits for the answer the
launcher writes beside it (tpuctl/launch/process/profiles.py, which asks every worker through its reaper). Each worker
captures inside its own process, between two of its training steps, as `launch --profile` does
(tpuctl/runtime/timeline/profiler.py), and writes its file, on its own disk, at PROFILE_DIR/plugins/profile/SESSION/
<host>_<task>.xplane.pb: so a local run (its workers share this disk) writes into the run's profile dir here, and a
run on other hosts into a gs:// model dir, which every host and this machine reach alike. Where an ssh run's profile
dir is on its hosts' own disks, each host's file is copied back into the run's log dir (`Hosts`, given by the CLI:
the ssh machinery is a higher layer than the run records). Nothing is signalled and nothing connects to a worker:
TensorFlow's profiler server, whose captures could crash a multi-worker run, is not used (docs/profile.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tpuctl import endings
from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.parse import read_small_bytes
from tpuctl.inputs.private_files import private_dir, write_private
from tpuctl.runs import records
from tpuctl.runs.folder import CAPTURES
from tpuctl.runs.records import RunRecord

MAX_DURATION_S = contract.PROFILE_MAX_MS / 1000  # ~10 MB a second per worker on CPU (measured): 5 minutes is GBs already
TAKE_S = 10.0  # for the launcher to take the request: it looks every 0.2 s
POLL_S = 0.1
MIN_FREE_BYTES = 64 * 1024 * 1024
_JOB_BACKENDS = ("kubernetes", "vertex")
_ANSWER_LIMIT = 1 << 20


@dataclass(frozen=True)
class Capture:
    run_id: str
    profile_dir: str  # where the session is read from: an ssh run's copy is under its log dir
    duration_s: float
    session: str | None  # the session's folder (plugins/profile/NAME); None when no worker sent a file
    files: dict[str, str] = field(default_factory=dict)  # worker -> its .xplane.pb
    missing: dict[str, str] = field(default_factory=dict)  # worker -> why it sent none
    hosts_dir: str | None = None  # where an ssh run's hosts wrote the session, before it was copied here

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def workers(record: RunRecord) -> dict[str, Any]:
    """The run's workers as its newest attempt recorded them (profilers.json), or one line saying why it has none."""
    if record.state != endings.RUNNING:
        raise TpuctlError(f"run {record.run_id} is not running ({record.state})", hint="`tpuctl runs` lists the running ones", exit_code=FAILED)
    if record.backend in _JOB_BACKENDS:
        raise TpuctlError(
            f"run {record.run_id} is a {record.backend} job: tpuctl cannot reach its workers to ask for a capture",
            hint="launch with --profile START-END to capture a step window from inside the workers (docs/profile.md)",
            exit_code=FAILED,
        )
    found = record.folder.latest_profilers()
    if found is None:
        raise TpuctlError(
            f"run {record.run_id} has no workers running yet (or was launched by an older tpuctl)",
            hint="try again once its workers have started; `tpuctl logs` shows them",
            exit_code=FAILED,
        )
    if found.get("captures") != CAPTURES:
        raise TpuctlError(
            f"run {record.run_id} was launched by an older tpuctl, whose captures go through TensorFlow's profiler server, "
            "which can crash a multi-worker run (docs/profile.md); this tpuctl does not use it",
            hint="launch it again with this tpuctl, or with --profile START-END",
            exit_code=FAILED,
        )
    return found


class Hosts(Protocol):
    """The hosts of a run whose profile dir is on their own disks (tpuctl/ssh/profile.py)."""

    def fetch(self, files: dict[str, tuple[str, str]], into: Path, timeout: float) -> dict[str, str]:
        """Copy each worker's file (worker -> (its ssh host, its path there)) into `into`: worker -> why its did not come."""
        ...


def capture(record: RunRecord, duration_s: float, hosts: Hosts | None = None) -> Capture:
    """Profile every worker of the running `record` for `duration_s`, into its profile dir; the run goes on.
    `hosts` reaches a run whose profile dir is on its hosts' disks; without it, such a run is refused."""
    if not 0 < duration_s <= MAX_DURATION_S:  # nan fails this too; the CLI's Seconds type refuses these first
        raise TpuctlError(f"--duration {duration_s!r} is not within (0, {MAX_DURATION_S:g}] seconds")
    recorded = workers(record)
    profile_dir = str(recorded["profile_dir"])
    elsewhere = not profile_dir.startswith("gs://") and recorded.get("backend") != "local"
    if elsewhere and hosts is None:
        raise TpuctlError(
            f"run {record.run_id} runs on other hosts and its profile dir {profile_dir} is on their disks, not this one's",
            hint="launch with --model-dir gs://BUCKET/DIR (every host writes there)",
            exit_code=FAILED,
        )
    if not profile_dir.startswith("gs://"):
        _check_writable((Path(record.log_dir) if elsewhere else Path(profile_dir)) / "plugins" / "profile")
    answer = ask(record, duration_s)
    session, files, missing = answer["session"], answer["files"], answer["missing"]
    if not (elsewhere and hosts is not None and files):
        folder = f"{profile_dir.rstrip('/')}/plugins/profile/{session}"
        return Capture(record.run_id, profile_dir, duration_s, folder if files else None, files, missing)
    ssh = {str(w["worker"]): str(w.get("ssh", w["host"])) for w in recorded["workers"]}
    local = Path(record.log_dir) / "plugins" / "profile" / session
    lost = hosts.fetch({w: (ssh.get(w, ""), path) for w, path in files.items()}, local, duration_s + contract.PROFILE_SAVE_S)
    copied = {w: str(local / Path(path).name) for w, path in files.items() if w not in lost and (local / Path(path).name).is_file()}
    missing = {**missing, **{w: lost.get(w) or "its file did not come back from its host" for w in files if w not in copied}}
    ordered = {w: missing[w] for w in [str(w["worker"]) for w in recorded["workers"]] if w in missing}
    return Capture(record.run_id, record.log_dir, duration_s, str(local) if copied else None, copied, ordered, hosts_dir=profile_dir)


def ask(record: RunRecord, duration_s: float) -> dict[str, Any]:
    """Leave the request in the run's folder and wait for the launcher's answer: session, files, missing."""
    records.proven(record, "asked")  # the request goes only into the folder of a record that is the user's own
    claimant = record.folder.claimant()
    if claimant != (record.run_id, record.pid):
        said = f"claimed by {claimant[0]}, pid {claimant[1]}" if claimant else "not claimed by any launch"
        raise TpuctlError(f"run {record.run_id}'s log folder {one_line(record.log_dir)} is {one_line(said)}, not by this run; nothing asked", exit_code=FAILED)
    place = record.folder.profile_requests
    ident = secrets.token_hex(8)
    request, taken, answered = (place / f"{ident}{suffix}" for suffix in (".json", ".taken", ".answer.json"))
    try:
        private_dir(place)
        write_private(request, json.dumps({"seconds": duration_s}) + "\n")
    except OSError as err:
        raise TpuctlError(f"cannot leave the request in {place}: {err.strerror or err}", exit_code=FAILED) from None
    try:
        _await_taking(record, request, taken, answered)
        limit = contract.PROFILE_BEGIN_S + duration_s + contract.PROFILE_SAVE_S + 2 * TAKE_S
        deadline = time.monotonic() + limit
        while not answered.exists():
            if time.monotonic() > deadline:
                raise TpuctlError(f"launch {record.run_id} gave no answer within {limit:.0f}s", hint=f"its log folder: {record.log_dir}", exit_code=FAILED)
            if not record.folder.is_running():
                raise TpuctlError(f"run {record.run_id} ended during the capture", hint="`tpuctl logs` shows how", exit_code=FAILED)
            time.sleep(POLL_S)
        return read_answer(read_small_bytes(answered, "profile answer", limit=_ANSWER_LIMIT, exit_code=FAILED) or b"")
    finally:
        for leftover in (request, answered):
            with contextlib.suppress(OSError):
                os.unlink(leftover)


def _await_taking(record: RunRecord, request: Path, taken: Path, answered: Path) -> None:
    """Until the launcher took the request (renamed it); a request it does not take within TAKE_S is taken back."""
    deadline = time.monotonic() + TAKE_S
    while request.exists() and not (taken.exists() or answered.exists()):
        if time.monotonic() > deadline:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(request)
                how = "it has ended" if not record.folder.is_running() else "is it stopped (SIGSTOP, Ctrl-Z)?"
                raise TpuctlError(f"launch {record.run_id} did not take the request within {TAKE_S:g}s ({how})", exit_code=FAILED)
            return  # taken just now
        time.sleep(POLL_S)


def read_answer(data: bytes) -> dict[str, Any]:
    """The launcher's answer, checked: session, files and missing by worker; its error as one line."""
    bad = TpuctlError("the launcher's answer is not one tpuctl wrote", exit_code=FAILED)
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        raise bad from None
    if not isinstance(raw, dict):
        raise bad
    if isinstance(raw.get("error"), str):
        raise TpuctlError(f"the launcher took no capture: {one_line(raw['error'], 300)}", exit_code=FAILED)
    session, files, missing = raw.get("session"), raw.get("files"), raw.get("missing")
    if not (isinstance(session, str) and contract.profile_session(session)) or not isinstance(files, dict) or not isinstance(missing, dict):
        raise bad
    texts = [*files, *files.values(), *missing, *missing.values()]
    if not all(isinstance(v, str) for v in texts) or set(files) & set(missing) or not all(f.endswith(".xplane.pb") for f in files.values()):
        raise bad
    return {"session": session, "files": files, "missing": {w: one_line(why, 300) for w, why in missing.items()}}


def _check_writable(folder: Path) -> None:
    """A folder the workers cannot write, or a full disk, said before they are asked (they would only log it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tpuctl-"):
            pass
        free = shutil.disk_usage(folder).free
    except OSError as err:
        hint = "launch with a --model-dir tpuctl can write"
        raise TpuctlError(f"cannot write the profile to {folder}: {err.strerror or err}", hint=hint, exit_code=FAILED) from None
    if free < MIN_FREE_BYTES:
        raise TpuctlError(f"the disk of {folder} is full ({free // (1024 * 1024)} MB free; a capture writes tens of MB per worker)", exit_code=FAILED)

"""Capturing a profile of a running run's workers (`tpuctl profile`): where it goes, who captures it, what came back.

The capture runs in the run's own worker interpreter (`python -m tpuctl.runtime.profile_capture`,
under a reaper with a deadline), since only the runtime imports TensorFlow. Each worker's
profiler server writes its own file, on its own disk, at the path it is given: so a local run
(its workers share this disk) writes into the run's profile dir here, and a run on other hosts
into a gs:// model dir, which every host and this machine reach alike. Where an ssh run's profile
dir is on its hosts' own disks, the capture runs on the run's first host instead, which reaches
the workers as they reach each other, and each host's file is copied back into the run's log dir
(`Hosts`, given by the CLI: the ssh machinery is a higher layer than the run records).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tpuctl import endings
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.runs.records import RunRecord
from tpuctl.runtime_path import put_tpuctl_on_path
from tpuctl.safety import reaper

CAPTURE_MODULE = "tpuctl.runtime.profile_capture"
MAX_DURATION_S = 300.0  # ~10 MB a second per worker on CPU (measured): 5 minutes is GBs already
# Beyond the duration: TensorFlow's import, its 20 s connect deadline for a silent worker, the files written.
ALLOWANCE_S = 120.0
MIN_FREE_BYTES = 64 * 1024 * 1024
_JOB_BACKENDS = ("kubernetes", "vertex")


@dataclass(frozen=True)
class Capture:
    run_id: str
    profile_dir: str  # where the session is read from: an ssh run's copy is under its log dir
    duration_s: float
    session: str | None  # the session's folder (plugins/profile/NAME); None when no worker answered
    files: dict[str, str] = field(default_factory=dict)  # worker -> its .xplane.pb
    missing: dict[str, str] = field(default_factory=dict)  # worker -> why it sent none
    hosts_dir: str | None = None  # where an ssh run's hosts wrote the session, before it was copied here

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def profilers(record: RunRecord) -> dict[str, Any]:
    """The run's profiler servers (its newest attempt's profilers.json), or one line saying why it has none."""
    if record.state != endings.RUNNING:
        raise TpuctlError(f"run {record.run_id} is not running ({record.state})", hint="`tpuctl runs` lists the running ones", exit_code=FAILED)
    if record.backend in _JOB_BACKENDS:
        raise TpuctlError(
            f"run {record.run_id} is a {record.backend} job: its workers' profiler ports are not reachable from here",
            hint="launch with --profile START-END to capture a step window from inside the workers (docs/profile.md)",
            exit_code=FAILED,
        )
    found = record.folder.latest_profilers()
    if found is None:
        raise TpuctlError(
            f"run {record.run_id} has no profiler servers (launched with --no-profiler-server, or by an older tpuctl)",
            hint="launch it again without --no-profiler-server, or with --profile START-END",
            exit_code=FAILED,
        )
    return found


class Hosts(Protocol):
    """The hosts of a run whose profile dir is on their own disks (tpuctl/ssh/profile.py)."""

    def capture(self, servers: dict[str, Any], request: str, timeout: float) -> tuple[int, str]:
        """Run the capture with `request` on the run's first host: its exit status and output (stdout and stderr)."""
        ...

    def fetch(self, servers: dict[str, Any], session: str, into: Path, timeout: float) -> dict[str, str]:
        """Copy each host's files of `session` (its folder as the hosts see it) into `into`: worker -> why its did not come."""
        ...


def capture(record: RunRecord, duration_s: float, hosts: Hosts | None = None) -> Capture:
    """Profile every worker of the running `record` for `duration_s`, into its profile dir; the run goes on.
    `hosts` reaches a run whose profile dir is on its hosts' disks; without it, such a run is refused."""
    if not 0 < duration_s <= MAX_DURATION_S:  # nan fails this too; the CLI's Seconds type refuses these first
        raise TpuctlError(f"--duration {duration_s!r} is not within (0, {MAX_DURATION_S:g}] seconds")
    servers = profilers(record)
    profile_dir = str(servers["profile_dir"])
    workers = [(str(w["worker"]), f"{w['host']}:{w['port']}") for w in servers["workers"]]
    elsewhere = not profile_dir.startswith("gs://") and servers.get("backend") != "local"
    if elsewhere and hosts is None:
        raise TpuctlError(
            f"run {record.run_id} runs on other hosts and its profile dir {profile_dir} is on their disks, not this one's",
            hint="launch with --model-dir gs://BUCKET/DIR (every host writes there), or with --profile START-END",
            exit_code=FAILED,
        )
    if not profile_dir.startswith("gs://"):
        _check_writable((Path(record.log_dir) if elsewhere else Path(profile_dir)) / "plugins" / "profile")
    request = {"logdir": profile_dir, "duration_ms": max(1, round(duration_s * 1000)), "workers": [{"worker": w, "address": a} for w, a in workers]}
    limit = duration_s + ALLOWANCE_S
    names = [w for w, _ in workers]
    if hosts is not None and elsewhere:
        return _on_hosts(record, duration_s, hosts, servers, {**request, "elsewhere": True}, names)
    python = _interpreter(str(servers["workers"][0]["python"]))
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="tpuctl-profile-") as shim:
        put_tpuctl_on_path(env, Path(shim))
        try:
            done = reaper.run([python, "-m", CAPTURE_MODULE, json.dumps(request)], timeout=limit, env=env, stdin=subprocess.DEVNULL, capture_output=True)
        except OSError as err:
            raise TpuctlError(f"cannot start {python}: {err.strerror or err}", exit_code=FAILED) from None
        except subprocess.TimeoutExpired:
            raise TpuctlError(f"the capture gave no answer within {limit:.0f}s", exit_code=FAILED) from None
    if done.returncode != 0:
        raise _failure(python, done.returncode, done.stderr.decode("utf-8", "replace"))
    answer = parse_answer(done.stdout.decode("utf-8", "replace"), names)
    return Capture(record.run_id, profile_dir, duration_s, **answer)


def _on_hosts(record: RunRecord, duration_s: float, hosts: Hosts, servers: dict[str, Any], request: dict[str, Any], names: list[str]) -> Capture:
    """The capture on the run's first host, then each host's files copied to LOG_DIR/plugins/profile/SESSION/, the
    layout the hosts wrote under the profile dir; the workers whose file came back are the captured ones."""
    limit = duration_s + ALLOWANCE_S
    code, output = hosts.capture(servers, json.dumps(request), limit)
    where = f"{servers['workers'][0]['python']} on {servers['workers'][0].get('ssh', 'the first host')}"
    if code != 0:
        raise _failure(where, code, output)
    answer = parse_answer(output, names)
    session = answer["session"]
    if session is None:  # the capture names the session whenever it asked the hosts: nothing to fetch
        return Capture(record.run_id, record.log_dir, duration_s, **answer, hosts_dir=str(servers["profile_dir"]))
    local = Path(record.log_dir) / "plugins" / "profile" / Path(session).name
    lost = hosts.fetch(servers, session, local, limit)
    files, missing = {}, {}
    for worker in servers["workers"]:
        name, path = str(worker["worker"]), local / f"{worker['host']}_{worker['port']}.xplane.pb"
        if path.is_file():
            files[name] = str(path)
        else:
            missing[name] = lost.get(name) or answer["missing"].get(name) or "its file is on no host"
    return Capture(record.run_id, record.log_dir, duration_s, str(local), files, missing, hosts_dir=str(servers["profile_dir"]))


def _interpreter(python: str) -> str:
    """The workers' own interpreter where it is on this machine (a local run's always is), else this one."""
    return python if os.path.isabs(python) and os.access(python, os.X_OK) else sys.executable


def _check_writable(folder: Path) -> None:
    """A folder the workers cannot write, or a full disk, said before they are asked (their servers would only log it)."""
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


def _failure(python: str, code: int, stderr: str) -> TpuctlError:
    ours = [line for line in stderr.splitlines() if line.startswith("tpuctl: error: ")]
    if ours:
        return TpuctlError(f"the capture failed: {one_line(ours[-1].removeprefix('tpuctl: error: '), 400)}", exit_code=FAILED)
    if code < 0:
        return TpuctlError(f"the capture ({python}) was killed by signal {-code}", exit_code=FAILED)
    return TpuctlError(f"the capture ({python}) failed: {one_line(stderr, 300, last=True) or f'exit status {code}'}", exit_code=FAILED)


def parse_answer(stdout: str, workers: list[str]) -> dict[str, Any]:
    """The capture's last stdout line, checked against the workers asked: session, files, missing."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    bad = TpuctlError("the capture did not answer with a session", exit_code=FAILED)
    try:
        raw = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):
        raise bad from None
    if not isinstance(raw, dict):
        raise bad
    session, files, missing = raw.get("session"), raw.get("files"), raw.get("missing")
    if not (session is None or isinstance(session, str)) or not isinstance(files, dict) or not isinstance(missing, dict):
        raise bad
    if not all(isinstance(v, str) for v in [*files.values(), *missing.values()]) or set(files) | set(missing) != set(workers) or set(files) & set(missing):
        raise bad
    if files and session is None:
        raise bad
    ordered = {w: files[w] for w in workers if w in files}
    return {"session": session, "files": ordered, "missing": {w: one_line(missing[w], 200) for w in workers if w in missing}}

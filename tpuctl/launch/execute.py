"""Run a prepared launch: claim its log folder, hand the Runner its context, keep the outcome.

Every backend's run passes here, so the folder rule (one folder, one launch), the
outcome record and the scrubbing of secret values from tpuctl's own words hold for all.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from tpuctl import inputs
from tpuctl.errors import TpuctlError
from tpuctl.launch import secret_values
from tpuctl.launch.backend import RunContext
from tpuctl.launch.console import logs
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.prepare import Launch
from tpuctl.private_files import hold_new, is_held, private_dir, write_private
from tpuctl.runs.folder import RUN_FILE, RunFolder


def claim_log_dir(log_dir: Path, run_id: str) -> int:
    """Make LOG_DIR this launch's alone, or refuse in one line; the descriptor holds the claim.

    One folder, one launch: a second launch into the same folder (at once, or after the
    first ended) would interleave or replace its logs and outcome. The folder must be
    this user's and closed to other users' writes (a planted symlink would be followed
    otherwise); LOG_DIR/run.json, created only if absent (O_EXCL) and locked while the
    launch runs, decides a race and tells a running launch from a finished one.
    """
    hint = "pass a --log-dir of your own that other users cannot write"
    try:
        private_dir(log_dir, tighten=False, hint=hint)  # new folders 0700; a folder the user made keeps its mode
        earlier = RunFolder(log_dir).earlier()
        if not earlier:
            record = {"run_id": run_id, "pid": os.getpid(), "started": time.time()}
            return hold_new(RunFolder(log_dir).run_file, json.dumps(record) + "\n")
    except FileExistsError:
        earlier = [RUN_FILE]
    except OSError as err:
        raise TpuctlError(f"cannot create log dir {log_dir}: {err.strerror or err}", hint=hint) from None
    raise _log_dir_taken(log_dir, earlier[0])


def _log_dir_taken(log_dir: Path, found: str) -> TpuctlError:
    fresh = "pass a new --log-dir (or leave it out: each launch then gets its own folder)"
    running = False
    with contextlib.suppress(OSError):
        running = found == RUN_FILE and is_held(RunFolder(log_dir).run_file)
    if running:
        return TpuctlError(f"--log-dir {log_dir} is in use by a running launch ({_run_of(log_dir)})", hint=fresh)
    return TpuctlError(f"--log-dir {log_dir} already holds a launch ({_run_of(log_dir) or found})", hint=f"{fresh}, or remove {log_dir} first")


def _run_of(log_dir: Path) -> str:
    """`RUN_ID, pid N` from a claimed folder's run.json, or "" where it cannot be read."""
    try:
        raw = json.loads(inputs.read_small_bytes(RunFolder(log_dir).run_file, "run record", limit=4096) or b"")
        return f"{raw['run_id']}, pid {int(raw['pid'])}"
    except (TpuctlError, ValueError, KeyError, TypeError):
        return ""


def execute(launch: Launch, stream: TextIO, notice: Callable[[str], None]) -> Outcome:
    """Run a prepared launch: worker lines to `stream`, tpuctl's own to `notice`; the outcome also lands in LOG_DIR/outcome.json.

    tpuctl's own words (notices, errors, which may relay kubectl's or an API's) never carry a secret value.
    """
    log_dir = launch.log_dir
    claim = claim_log_dir(log_dir, launch.run_id)
    job = launch.job
    context = RunContext(
        run_id=launch.run_id,
        log_dir=log_dir,
        writer=logs.LineWriter(stream),
        notice=lambda line: notice(secret_values.scrub(line, job)),
        colour=logs.use_colour(stream),
        tail_view=launch.options.tail_view,
        verbose=launch.options.verbose,
    )
    try:
        outcome = launch.runner.run(job, context)
        secret_values.scrub_outcome(outcome, job)
        record = outcome.to_json(backend=launch.runner.name, run_id=launch.run_id, log_dir=log_dir)
        try:
            write_private(RunFolder(log_dir).outcome_file, json.dumps(record, indent=2) + "\n")
        except OSError as err:  # a full disk loses the record, never the exit status or the summary
            context.notice(f"warning: cannot write {RunFolder(log_dir).outcome_file}: {err.strerror or err}")
    except TpuctlError as err:
        raise TpuctlError(
            secret_values.scrub(err.message, job), hint=err.hint and secret_values.scrub(err.hint, job), exit_code=err.exit_code
        ) from None
    finally:
        os.close(claim)
    return outcome

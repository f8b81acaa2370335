"""A run's folder (LOG_DIR): the one place that knows its layout.

Every backend writes the same layout, so that whatever reads a run later (`tpuctl
stacks`, run history, timelines, profiles) reads one shape:

    LOG_DIR/run.json                         the launch that claimed the folder, locked while it runs
    LOG_DIR/outcome.json                     how the run ended (`tpuctl launch --json`'s schema)
    LOG_DIR/stacks.txt                       the newest stacks view (`tpuctl stacks` waits for it)
    LOG_DIR/attempt-N/                       one folder per attempt (a Kubernetes container restart is one)
    LOG_DIR/attempt-N/plan.json              the attempt's processes (process backends)
    LOG_DIR/attempt-N/manifest.yaml          what a Kubernetes launch applied
    LOG_DIR/attempt-N/TYPE-INDEX[@HOST].log  one worker's output (HOST where workers run on several hosts)
    LOG_DIR/attempt-N/stacks-M/              every worker's stacks, taken the M-th time, and their view

The folders are private (0700): plans, manifests and logs may hold --env values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tpuctl.errors import TpuctlError
from tpuctl.private_files import private_dir

RUN_FILE = "run.json"
OUTCOME_FILE = "outcome.json"
STACKS_VIEW = "stacks.txt"
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

    def plan_file(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "plan.json"

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

    @staticmethod
    def _attempt_name(attempt: int) -> str:
        return f"attempt-{attempt}"


def file_name(worker: str) -> str:
    """A worker's name (`chief:0`) as it appears in file names (`chief-0`)."""
    return worker.replace(":", "-")

"""Running the probe: here, under a reaper with a deadline, or (its argv and source) on other hosts over ssh."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tpuctl.doctor.facts import MAX_ANSWER, Facts, parse
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.safety import child_output
from tpuctl.safety.child_output import TAIL

PROBE = Path(__file__).with_name("probe.py")
DEFAULT_IMPORT_DEADLINE_S = 60.0
# Beyond the import's deadline: the probe's own work, nvidia-smi's 10 s, the metadata server's 2 s.
ALLOWANCE_S = 20.0


@dataclass(frozen=True)
class Request:
    """What the probe is asked to look at, beyond what it always gathers."""

    workers: int = 2
    deadline: float = DEFAULT_IMPORT_DEADLINE_S
    import_tensorflow: bool = True
    paths: tuple[str, ...] = field(default_factory=tuple)

    def argument(self) -> str:
        return json.dumps({"workers": self.workers, "deadline": self.deadline, "import": self.import_tensorflow, "paths": list(self.paths)})

    @property
    def limit(self) -> float:
        return self.deadline + ALLOWANCE_S


def source() -> bytes:
    return PROBE.read_bytes()


def remote_argv(python: str, request: Request) -> list[str]:
    """The probe as a host runs it: its source on stdin."""
    return [python, "-", request.argument()]


def probe_here(python: str, request: Request) -> Facts:
    """The facts of this machine as `python` (the workers' interpreter) sees them."""
    env = dict(os.environ)
    try:  # its answer is its last line, an error its last words: what a sitecustomize prints before them is dropped
        done = child_output.run([python, "-c", source().decode(), request.argument()], env=env, timeout=request.limit, limit=MAX_ANSWER, keep=TAIL)
    except subprocess.TimeoutExpired:
        raise TpuctlError(f"the doctor's probe ({python}) gave no answer within {request.limit:.0f}s", exit_code=FAILED) from None
    except OSError as err:
        raise TpuctlError(f"cannot run {python}: {err.strerror or err}", hint="pass --python an interpreter that exists", exit_code=FAILED) from None
    assert done.returncode is not None  # TAIL reads to the end: only the deadline stops the probe
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode == 127 and b"cannot run " in done.stderr:
        said = one_line(done.stderr.decode("utf-8", "replace"), 200, last=True).rpartition(": ")[2]
        raise TpuctlError(f"cannot run {python}: {said}", hint="pass --python an interpreter that exists", exit_code=FAILED)
    if done.returncode != 0 and "tpuctl-doctor " not in out:
        said = one_line(done.stderr.decode("utf-8", "replace"), 200, last=True) or exit_words(done.returncode)
        raise TpuctlError(f"the doctor's probe failed in {python}: {said}", exit_code=FAILED)
    return parse(out, python)

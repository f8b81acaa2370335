"""How the benchmarks run tpuctl: the console script installed beside their interpreter.

Timing the console script, not `python -m tpuctl`, measures what users type.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tpuctl_command() -> list[str]:
    script = Path(sys.executable).parent / "tpuctl"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "tpuctl"]


def run_checked(argv: list[str], env: dict[str, str], timeout_s: float) -> str:
    """A command's stdout; a failed command ends the benchmark with its status and the end of its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=timeout_s)
    if done.returncode != 0:
        raise SystemExit(f"benchmark command failed with status {done.returncode}: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return done.stdout

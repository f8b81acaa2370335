"""What the benchmark smoke modules share: the list of benchmarks and one smoke run checked.

The smokes are split over two modules (`make test` hands each module to one worker, --dist loadfile): the tail
reader's smoke alone takes minutes (it writes and reads real TensorFlow event files), env_setup's starts eight sshd
hosts, and in one module with the others they made that module the suite's longest path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HELPERS = {"smoke.py", "tpuctl_cli.py"}  # imported by the benchmarks, not run
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)
# test_benchmark_smoke_long.py's; every other script is test_benchmarks_smoke.py's (about even halves, by their durations
# in a full `make test`: the tail reader's ~190 s and env_setup's ~110 s against the rest's ~300 s)
LONG = ("tail_reader.py", "env_setup.py")
VERDICT = re.compile(r"\b(PASS|MISS)\b")


def check_smoke(script: str) -> None:
    """The script at --smoke size runs its whole path to a verdict line."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TPUCTL_LOG_DIR")}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--smoke"], capture_output=True, text=True, env=env, timeout=540, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    verdicts = VERDICT.findall(done.stdout)
    assert verdicts, done.stdout[-3000:]
    if script == "tail_fuzz.py":  # a fuzz run's verdict is a finding, not a figure
        assert done.stdout.rstrip().endswith("PASS"), done.stdout[-3000:]

"""Every benchmark, run as a user would but at --smoke size: a benchmark that breaks fails here, not months later.

Smoke figures mean nothing (one round, tiny sizes, a loaded machine); what is checked is that the script ran its
whole path and came to a verdict line. A script added to benchmarks/ is picked up here and must take --smoke.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HELPERS = {"smoke.py", "tpuctl_cli.py"}  # imported by the benchmarks, not run
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)
VERDICT = re.compile(r"\b(PASS|MISS)\b")


def test_the_list_is_every_benchmark() -> None:
    """The Makefile's bench target and this module agree on what the benchmarks are."""
    makefile = (BENCHMARKS.parent / "Makefile").read_text()
    listed = set(re.findall(r"benchmarks/(\w+\.py)", makefile))
    assert listed | {"tail_fuzz.py"} == set(SCRIPTS)


@pytest.mark.tf
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_smoke(script: str) -> None:
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

"""How the benchmarks run tpuctl: the console script installed beside their interpreter.

Timing the console script, not `python -m tpuctl`, measures what users type.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def tpuctl_command() -> list[str]:
    script = Path(sys.executable).parent / "tpuctl"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "tpuctl"]

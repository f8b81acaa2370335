"""What a run is called and where its folder goes by default: one rule for every run, launched or babysat.

A run id sorts by its start (date and time first), says what ran (a script's stem, a
TPU VM's name) and is unique on a machine without a lock (a random tail): `tpuctl runs`
lists it, and a unique prefix of it names the run to `logs`, `stop` and `attach`.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path


def run_id(name: str) -> str:
    """`20260101-120000-train-1a2b` for `train.py`: the stem of `name`, with anything but [A-Za-z0-9_.-] as `_`."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name).stem) or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{os.urandom(2).hex()}"


def default_log_dir(run_id: str) -> Path:
    """The run's folder where none was given: the user's state folder (platformdirs), beside the records."""
    from platformdirs import user_state_path  # here, not at the top: `--help` imports this module

    return user_state_path("tpuctl") / "runs" / run_id

"""Which offers stocked out lately: per (project, zone, accelerator type, capacity kind), when and why.

A zone that had no capacity ten minutes ago most likely has none now, so a hunt tries it last and `offers`
says so; hours later the pool has turned over and the record only misleads, so it is forgotten. The file
is the user's (platformdirs' state folder, 0600 in a 0700 folder). It is a hint, never a verdict: a
damaged, hostile or unreadable file is ignored with one line on stderr, and a record that cannot be
written costs the memory, not the command.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError

# Spot and on-demand pools refill within hours (Cloud TPU's own advice after a stockout is to retry later or
# elsewhere); after three hours an old stockout says less than a fresh try, so it is forgotten.
FORGET_AFTER_S = 3 * 3600.0
# Not a stockout: a hunt's try that its --hunt-timeout cut short while the zone still worked on it. Ranked as a
# stockout is (tried last), said in its own words.
SLOW = "slow"
MAX_RECORDS = 1000  # a hunt over every zone, type and kind stays far below; a bigger file is not ours
FILE_LIMIT = 256 * 1024
_FIELDS = ("project", "zone", "type", "kind", "why")

Warn = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def path() -> Path:
    from platformdirs import user_state_path

    return user_state_path("tpuctl") / "stockouts.json"


def _valid(record: Any) -> bool:
    if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in _FIELDS):
        return False
    when = record.get("when")
    return isinstance(when, (int, float)) and not isinstance(when, bool) and 0 <= when < 1e11


def _load(warn: Warn) -> list[dict[str, Any]]:
    where = path()
    try:
        text = inputs.read_small_text(where, "stockout memory", limit=FILE_LIMIT)
        records = json.loads(text) if text is not None else []
    except (TpuctlError, ValueError, RecursionError, OSError) as err:
        warn(f"note: ignoring the stockout memory {where}: {str(err) if isinstance(err, TpuctlError) else 'not JSON'}")
        return []
    if not isinstance(records, list) or not all(_valid(record) for record in records):
        warn(f"note: ignoring the stockout memory {where}: not a list of stockout records")
        return []
    return records


def _save(records: list[dict[str, Any]], warn: Warn) -> None:
    from tpuctl.inputs.private_files import private_dir, write_private

    where = path()
    try:
        private_dir(where.parent)
        write_private(where, json.dumps(records[-MAX_RECORDS:], indent=1) + "\n")
    except (OSError, TpuctlError) as err:
        warn(f"note: cannot write the stockout memory {where}: {err.strerror if isinstance(err, OSError) else err}")


def _key(record: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(record[key]) for key in _FIELDS[:4])


def remember(project: str, zone: str, accelerator_type: str, kind: str, why: str, *, now: float | None = None, warn: Warn = _stderr) -> None:
    """Record that (zone, type, kind) stocked out now; `kind` is the capacity kind (on-demand, spot, ...)."""
    stamp = time.time() if now is None else now
    record = {"project": project, "zone": zone, "type": accelerator_type, "kind": kind, "why": why, "when": stamp}
    kept = [r for r in _load(warn) if _key(r) != _key(record) and stamp - float(r["when"]) < FORGET_AFTER_S]
    _save([*kept, record], warn)


def recent(project: str, zone: str, accelerator_type: str, kind: str, *, now: float | None = None, warn: Warn = _stderr) -> float | None:
    """When that offer last stocked out (seconds since the epoch), or None when not in the last FORGET_AFTER_S."""
    last = latest(project, zone, accelerator_type, kind, now=now, warn=warn)
    return None if last is None else last[0]


def latest(project: str, zone: str, accelerator_type: str, kind: str, *, now: float | None = None, warn: Warn = _stderr) -> tuple[float, str] | None:
    """When and why (a Stockout's name in lower case, or SLOW) that offer last failed a try, if in FORGET_AFTER_S."""
    stamp = time.time() if now is None else now
    wanted = (project, zone, accelerator_type, kind)
    found = [(float(r["when"]), str(r["why"])) for r in _load(warn) if _key(r) == wanted and stamp - float(r["when"]) < FORGET_AFTER_S]
    return max(found) if found else None


def forget_older_than(seconds: float, *, now: float | None = None, warn: Warn = _stderr) -> int:
    """Drop the records older than `seconds`; how many were dropped."""
    stamp = time.time() if now is None else now
    records = _load(warn)
    kept = [r for r in records if stamp - float(r["when"]) < seconds]
    if len(kept) != len(records):
        _save(kept, warn)
    return len(records) - len(kept)

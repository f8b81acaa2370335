"""The long fuzz run of `tpuctl tail`'s parsers: >= 10,000 hypothesis examples each, 0 tracebacks, 0 hangs.

The targets are the fuzz tests in tests/unit/test_watch_hostile.py (the normal
suite runs them with a modest example count); here each runs with
TPUCTL_FUZZ_EXAMPLES examples (default 10,000), every example under a 10 s
alarm, so a hang is a failure like a traceback:

    event_files        any bytes, and mutated real events inside valid CRCs, read in two
                       appends, then rendered as strict JSON, plain lines and the live table
    checkpoint_states  any text in a `checkpoint` state file, with .index files of any name
    tag_filter         any --tags text, then any tag against the patterns
    seconds            any --interval / --until-idle text

    .venv/bin/python benchmarks/tail_fuzz.py [--examples N]      # about 3 min at 10,000
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smoke import parse_args  # benchmarks/smoke.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
HANG_S = 10


class Hang(Exception):
    pass


class TempFolders:
    """What the targets ask of pytest's tmp_path_factory."""

    def __init__(self, base: str) -> None:
        self.base = base

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=name, dir=self.base))


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"an example ran over {HANG_S} s")


def run_target(name: str, test: Any, args: tuple[Any, ...]) -> tuple[int, float, str | None]:
    """Run one hypothesis test; (examples run, seconds, the failure or None)."""
    inner: Callable[..., Any] = test.hypothesis.inner_test
    count = 0

    def counted(*a: Any, **k: Any) -> Any:
        nonlocal count
        count += 1
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            return inner(*a, **k)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    test.hypothesis.inner_test = counted
    started = time.perf_counter()
    try:
        test(*args)
    except BaseException:  # noqa: BLE001 - report any failure, including a Hang
        return count, time.perf_counter() - started, traceback.format_exc(limit=8)
    finally:
        test.hypothesis.inner_test = inner
    return count, time.perf_counter() - started, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    options = parse_args(parser, examples=30)
    os.environ["TPUCTL_FUZZ_EXAMPLES"] = str(options.examples)  # read when the test module is imported
    sys.path.insert(0, str(ROOT))
    signal.signal(signal.SIGALRM, _alarm)
    from tests.unit import test_watch_hostile as targets

    failures = 0
    with tempfile.TemporaryDirectory(prefix="tpuctl-fuzz-") as base:
        folders = TempFolders(base)
        plan = [
            ("event_files", targets.test_fuzz_event_files, (folders,)),
            ("checkpoint_states", targets.test_fuzz_checkpoint_state_files, (folders,)),
            ("tag_filter", targets.test_fuzz_tag_filter, ()),
            ("seconds", targets.test_fuzz_seconds, ()),
        ]
        print(f"{'parser':18} {'examples':>9} {'seconds':>8}  result")
        for name, test, args in plan:
            count, seconds, failure = run_target(name, test, args)
            failures += failure is not None
            print(f"{name:18} {count:9} {seconds:8.1f}  {'FAIL' if failure else 'ok: 0 tracebacks, 0 hangs'}")
            if failure:
                print(failure)
    print("PASS" if not failures else f"FAIL: {failures} parser(s)")


if __name__ == "__main__":
    main()

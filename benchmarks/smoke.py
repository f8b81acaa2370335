"""The benchmarks' --smoke mode: the whole path once, at small sizes, so that a benchmark that breaks fails CI.

A benchmark rots unseen when nobody runs it (a changed flag, a refused log dir, a submit that moved into a detached
process): the test suite runs every script with --smoke (tests/integration/test_benchmarks_smoke.py). The figures a
smoke run prints mean nothing; it proves the benchmark still measures what it says.
"""

from __future__ import annotations

import argparse


def parse_args(parser: argparse.ArgumentParser, **small: object) -> argparse.Namespace:
    """The benchmark's arguments; under --smoke, the `small` values replace whatever the sizes would have been."""
    parser.add_argument(
        "--smoke", action="store_true", help="one round at small sizes: the whole path once, its ratio printed (what the test suite runs)"
    )
    args = parser.parse_args()
    if args.smoke:
        for name, value in small.items():
            if not hasattr(args, name):
                raise SystemExit(f"smoke value for unknown option {name!r}")
            setattr(args, name, value)
    return args

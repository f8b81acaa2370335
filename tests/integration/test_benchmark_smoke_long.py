"""The benchmarks whose smoke takes longest, each in a module of its own (tests/integration/benchmark_smoke.py)."""

from __future__ import annotations

import pytest

from tests.integration.benchmark_smoke import LONG, check_smoke


@pytest.mark.tf
@pytest.mark.parametrize("script", LONG)
def test_benchmark_smoke(script: str) -> None:
    check_smoke(script)

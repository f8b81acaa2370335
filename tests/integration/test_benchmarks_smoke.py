"""Every benchmark, run as a user would but at --smoke size: a benchmark that breaks fails here, not months later.

Smoke figures mean nothing (one round, tiny sizes, a loaded machine); what is checked is that the script ran its
whole path and came to a verdict line. A script added to benchmarks/ is picked up here and must take --smoke.
The longest smokes are test_benchmark_smoke_long.py's (tests/integration/benchmark_smoke.py says why).
"""

from __future__ import annotations

import re

import pytest

from tests.integration.benchmark_smoke import BENCHMARKS, LONG, SCRIPTS, check_smoke


def test_the_list_is_every_benchmark() -> None:
    """The Makefile's bench target and this module agree on what the benchmarks are."""
    makefile = (BENCHMARKS.parent / "Makefile").read_text()
    listed = set(re.findall(r"benchmarks/(\w+\.py)", makefile))
    assert listed | {"tail_fuzz.py"} == set(SCRIPTS)
    assert set(LONG) <= set(SCRIPTS)


@pytest.mark.tf
@pytest.mark.parametrize("script", [script for script in SCRIPTS if script not in LONG])
def test_benchmark_smoke(script: str) -> None:
    check_smoke(script)

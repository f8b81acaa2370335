"""Review of issue 37 as landed: each test shows one defect and is xfail(strict=True) until it is fixed.

Timelines are written by tpuctl's own Timeline (clock injected), as the launcher writes them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.standins.timelines import Clock
from tests.unit.test_view import _one_worker_run
from tpuctl.runs import goodput, view
from tpuctl.runs.folder import RunFolder


def test_review_helpers_write_what_the_launcher_writes(tmp_path: Path) -> None:
    """The fixtures above are sound: without a jump or a long pause the view and the report agree."""
    _one_worker_run(tmp_path, Clock())
    built = view.build(RunFolder(tmp_path), live=False)
    first = [s for s in built["rows"][0]["segments"] if s["kind"] == "first-step"]
    assert first[0]["end"] - first[0]["start"] == pytest.approx(built["goodput"]["categories"][goodput.FIRST_STEP], abs=0.01)
    assert not [s for s in built["rows"][0]["segments"] if s["kind"] == "stall"]
    assert os.path.basename(str(tmp_path)) not in json.dumps(built)

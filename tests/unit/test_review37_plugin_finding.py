"""Review of issue 37's TensorBoard plugin (tpuctl/tensorboard_plugin/): how it finds runs under a local logdir, and
the TensorBoard its extra installs.

Each test is a defect found by the review, marked xfail(strict=True) until it is fixed. Real folders on disk, the
plugin's own Listing, as TensorBoard's is_active and the `runs` route use it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tpuctl.tensorboard_plugin import finding


def _publish(model_dir: Path, run_id: str) -> None:
    folder = model_dir / finding.FOLDER / run_id
    folder.mkdir(parents=True)
    (folder / finding.VIEW_NAME).write_text(json.dumps({"schema": "tpuctl.run-view/1", "run": {"id": run_id}}))


@pytest.mark.xfail(
    strict=True,
    reason="finding.py:68-69: the walk stops after MAX_FOLDERS folders and says nothing, so a logdir such as ~/experiments "
    "with a big folder walked first shows 'No tpuctl runs under ...' while runs are there; fix: set Listing.error "
    "(shown by the page) when the bound is hit, naming the bound and the narrower --logdir to use",
)
def test_a_logdir_cut_short_by_the_folder_bound_says_so(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = (Path(entry.path) for entry in os.scandir(tmp_path))  # os.walk goes depth first, in scandir's order
    for i in range(finding.MAX_FOLDERS):
        (first / f"ckpt-{i}").mkdir()
    _publish(second / "model", "20261128-101010-train-ab12")

    listing = finding.Listing(str(tmp_path))
    runs = listing.runs()

    assert [run.run_id for run in runs] == ["20261128-101010-train-ab12"] or listing.error is not None

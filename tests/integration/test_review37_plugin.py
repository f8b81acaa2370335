"""Review of issue 37's TensorBoard plugin (tpuctl/tensorboard_plugin/): what a bucket listing costs, and the tab as
a user in another time zone or a narrow window sees it.

Each test is a defect found by the review, marked xfail(strict=True) until it is fixed. The bucket is the GCS emulator
in this process (tests/integration/conftest.py), reached through STORAGE_EMULATOR_HOST as tpuctl.cloud.storage.client()
does. The page is TensorBoard's real server and Debian's headless Chromium (tests/integration/browser.py) on a view
tpuctl.runs.view.build made from a timeline tpuctl's writer wrote (tests/integration/run_views.py): one TensorBoard and
one browser for the module, the browser started in a time zone that is not UTC, as the terminal drawing is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import browser, run_views
from tests.integration.tensorboard_server import tensorboard
from tests.integration.test_tensorboard_page import _all, _in_tab, _wait

RUN = "20261128-101010-train-ab12"


ZONE = "America/Los_Angeles"  # UTC-8 in November: every hour differs from UTC's
LIVE = "20251128-150000-train-cd34"


@pytest.fixture(scope="module")
def tab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The browser on the tab with the run drawn, and the run's log folder (for `tpuctl report --timeline`)."""
    browser.require_browser()
    top = tmp_path_factory.mktemp("review37")
    run_views.publish(top / "logs" / "exp1" / "model", run_views.built(top / "run", model_dir=str(top / "logs" / "exp1" / "model")))
    live = run_views.built(top / "live-run", model_dir=str(top / "logs" / "exp2" / "model"), run_id=LIVE)
    live["run"].update(end=None, state="running")  # as the launcher publishes while the run goes on (launch/publish.py)
    run_views.publish(top / "logs" / "exp2" / "model", live)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TZ", ZONE)  # Chromium takes its zone from the environment chromedriver hands it
        with tensorboard(str(top / "logs"), top / "tensorboard.log") as server, browser.chromium(top / "chromium") as driver:
            driver.get(server.url + "/#tpuctl")
            _in_tab(driver)
            _wait(lambda: driver.execute_script("const p = document.getElementById('run-page'); return p && p.dataset.ready === '1'"))
            yield driver, top / "run"


@pytest.mark.tf
@pytest.mark.xfail(
    strict=True,
    reason="static/index.js:125, :171 and :265 draw each chart as width=100% of a fixed 1000-unit viewBox, so the 11 px "
    "labels of style.css shrink with the window: 5 px at 480 px, unreadable on a half-screen laptop window; fix: a "
    "minimum drawn width with the section scrolling sideways (overflow-x: auto), or the viewBox sized to the frame",
)
def test_the_timeline_labels_stay_readable_in_a_narrow_window(tab: tuple[Any, Path]) -> None:
    driver, _ = tab
    driver.switch_to.default_content()
    driver.set_window_size(640, 1000)
    try:
        _in_tab(driver)
        label = _all(driver, "svg.timeline text.label")[0]
        height = driver.execute_script("return arguments[0].getBoundingClientRect().height", label)
    finally:
        driver.switch_to.default_content()
        driver.set_window_size(1400, 1000)

    assert height >= 9, f"a worker row's label is {height:.1f} px tall at a 640 px window"


@pytest.mark.xfail(
    strict=True,
    reason="runs/view.py:133-134 (and :146-148 for hangs only): a row gets its ending only from its own worker's "
    "failure/preempted event, so the workers the launcher stops when another fails or is preempted end with no mark "
    "and no cause in the tab (static/index.js draws row.ending); in the real 2-worker run published under "
    "/tmp/docrun, attempt 1's worker:0 trails off while worker:1 has its X; fix: a row of an ended attempt without "
    "its own ending gets 'stopped' (the issue's list of endings) at the attempt_end, with the attempt's cause in words",
)
def test_every_row_of_an_ended_attempt_shows_how_it_ended(tmp_path: Path) -> None:
    shown = run_views.built(tmp_path / "run", model_dir=str(tmp_path / "model"))
    first = [row for row in shown["rows"] if row["attempt"] == 1]

    assert len(first) == 2 and shown["attempts"][0]["ending"]["state"] == "preempted"
    assert [row["worker"] for row in first if row["ending"] is None] == []

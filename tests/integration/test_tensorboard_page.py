"""The tpuctl tab in a real browser: Debian's headless Chromium opens TensorBoard's page, the tab's iframe draws a run,
and the DOM holds what the view says (rows, segments, bands, restarts, bars, profile links, hang markers). A run whose
worker names and words carry an <img onerror> shows them as text, and the handler never runs in either frame.
One TensorBoard and one browser for the module; the screenshot is left in the module's temporary folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pytest

from tests.integration import browser, run_views
from tests.integration.tensorboard_server import Server, tensorboard

SESSION = "2025_11_28_14_40_00"
HOSTILE = '<img src=x onerror="window.top.__pwned=1">'
GOOD = "exp1/model/tpuctl/20251128-142640-train-ab12"
BAD = "hostile/tpuctl/20251128-hostile"
CUT = "truncated/tpuctl/cut"
T = TypeVar("T")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Any]]:
    browser.require_browser()
    top = tmp_path_factory.mktemp("tb") / "logs"
    good = top / "exp1" / "model"
    run_views.publish(good, run_views.view(profile_dir=str(good), session=SESSION))
    (good / "plugins" / "profile" / SESSION).mkdir(parents=True)
    run_views.publish(top / "hostile", run_views.view("20251128-hostile", workers=[HOSTILE, "worker:1"], words=HOSTILE, stacks=HOSTILE))
    run_views.publish(top / "truncated", '{"schema": "tpuctl.run-view/1", "rows": [', run_id="cut")
    with (
        tensorboard(str(top), tmp_path_factory.mktemp("tblog") / "tensorboard.log") as server,
        browser.chromium(tmp_path_factory.mktemp("chromium-profile")) as driver,
    ):
        driver.get(server.url + "/#tpuctl")
        yield server, driver


def _wait(what: Callable[[], T | None], timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, "the page did not get there in time"
        time.sleep(0.2)


def _in_tab(driver: Any) -> None:
    """Into the tab's iframe (TensorBoard loads dynamic plugins in one: tensorboard/backend/application.py)."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    frame = _wait(lambda: driver.find_elements(By.TAG_NAME, "iframe"))[0]
    driver.switch_to.frame(frame)


def _show(driver: Any, key: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _in_tab(driver)
    select = _wait(lambda: driver.find_elements(By.ID, "run-select"))[0]
    Select(select).select_by_value(key)
    drawn = "return document.getElementById('run-page').dataset.ready === '1' && document.querySelector('#run-page .loading') === null"
    _wait(lambda: driver.execute_script(drawn))


def _all(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    found: list[Any] = driver.find_elements(By.CSS_SELECTOR, css)
    return found


def test_a_run_is_drawn_row_by_row_with_its_bars_links_and_markers(page: tuple[Server, Any], shots: Path) -> None:
    server, driver = page
    _show(driver, GOOD)
    written = run_views.view()
    rows = _all(driver, "#timeline g.row")
    assert [(r.get_attribute("data-attempt"), r.get_attribute("data-worker")) for r in rows] == [
        (str(row["attempt"]), row["worker"]) for row in written["rows"]
    ]
    kinds = [seg.get_attribute("class") for seg in _all(driver, "#timeline rect.seg")]
    assert kinds == [f"seg seg-{s['kind']}" for row in written["rows"] for s in row["segments"]]
    assert len(_all(driver, "#timeline path.rate")) == len(written["rows"]), "a step-rate band per row"
    assert len(_all(driver, "#timeline path.ending-bad")) == 2 and len(_all(driver, "#timeline path.ending-ok")) == 2
    assert [t.text for t in _all(driver, "#timeline g.restart text")] == ["restart: preempted"]
    bars = _all(driver, "#goodput g.bar")
    assert [b.get_attribute("data-label") for b in bars] == ["run", "attempt 1 (preempted)", "attempt 2"]
    assert [t.text for t in _all(driver, "#goodput g.bar text.value")] == ["goodput 73.3%", "goodput 66.8%", "goodput 78.7%"]
    assert len(_all(driver, "#goodput-over-time rect.window")) == len(written["goodput_over_time"])
    link = _all(driver, "#profiles a.profile-link")[0]
    assert link.get_attribute("target") == "_top"
    assert link.get_attribute("href") == f"{server.url}/?run={quote('exp1/model/' + SESSION, safe='')}&tool=overview_page#profile"
    assert [td.text for td in _all(driver, "#profiles tr.straggler td")][:3] == ["worker:1 (straggler)", "40", "340.0 ± 20.0"]
    driver.switch_to.default_content()
    assert driver.save_screenshot(str(shots / "tpuctl-tab.png"))
    assert (shots / "tpuctl-tab.png").stat().st_size > 20_000


def test_a_hang_marker_opens_its_stacks(page: tuple[Server, Any]) -> None:
    _, driver = page
    _show(driver, GOOD)
    details = _all(driver, "#hangs details.hang")
    assert len(details) == 1 and details[0].get_attribute("open") is None
    marker = _all(driver, "#timeline path.hang-marker")[0]
    marker.click()
    assert details[0].get_attribute("open") == "true"
    assert "model.fit(ds)" in _all(driver, "#hangs pre.stacks")[0].text


def test_markup_in_a_run_is_shown_as_text_and_never_runs(page: tuple[Server, Any], shots: Path) -> None:
    _, driver = page
    _show(driver, BAD)
    labels = [t.text for t in _all(driver, "#timeline g.row text.label")]
    assert labels[0] == f"a1 {HOSTILE}"
    assert _all(driver, "#timeline g.row")[0].get_attribute("data-worker") == HOSTILE
    assert _all(driver, "#profiles td")[0].text == HOSTILE
    _all(driver, "#timeline path.hang-marker")[0].click()
    assert _all(driver, "#hangs pre.stacks")[0].text == HOSTILE
    assert _all(driver, "img") == [], "no element was made from a run's text"
    time.sleep(1.0)  # an <img src=x> would have failed to load by now, and its handler run
    assert driver.execute_script("return window.__pwned") is None
    driver.switch_to.default_content()
    assert driver.execute_script("return window.__pwned") is None
    driver.save_screenshot(str(shots / "tpuctl-tab-hostile.png"))


def test_a_cut_view_is_a_line_of_text(page: tuple[Server, Any]) -> None:
    _, driver = page
    _show(driver, CUT)
    said = [p.text for p in _all(driver, "#run-page p.message")]
    assert len(said) == 1 and said[0].startswith(f"{CUT}: view.json is not JSON")
    assert _all(driver, "#timeline") == []


def test_the_profile_link_opens_the_profile_tab_in_the_top_window(page: tuple[Server, Any]) -> None:
    server, driver = page
    _show(driver, GOOD)
    _all(driver, "#profiles a.profile-link")[0].click()
    driver.switch_to.default_content()
    _wait(lambda: driver.current_url.endswith("#profile"))
    assert driver.current_url == f"{server.url}/?run={quote('exp1/model/' + SESSION, safe='')}&tool=overview_page#profile"


def test_a_missing_browser_skips_here_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("TPUCTL_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium missing"):
        browser.require_browser()
    monkeypatch.setenv("TPUCTL_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="make test"):
        browser.require_browser()

"""The tpuctl tab in a real browser: Debian's headless Chromium opens TensorBoard's page, the tab's iframe draws a run,
and the DOM holds what the view says (rows, segments, bands, restarts, bars, profile links, hang markers). One run
is a real TensorFlow launch preempted once and restarted (tests/integration/scripts/fit_preempted_once.py), the one
test_time_report.py reports (tests/integration/shared_runs.py launches it once for both), whose view the launcher
published into the model dir; the others are views tpuctl.runs.view.build made from timelines tpuctl's writer wrote
(tests/integration/run_views.py), one with a profile session and a hang report, one whose worker names, words and
stacks carry an <img onerror>: shown as text, the handler never runs in either frame; one is a live run (no end yet)
whose view is republished while the tab is open. One TensorBoard and one browser for the module, the browser in a
time zone that is not UTC (as `tpuctl report --timeline` is drawn in); screenshots go to the module's temporary
folder, and also to TPUCTL_SCREENSHOTS when it names a folder (how docs/images/ got its pictures).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pytest

from tests.conftest import run_tpuctl
from tests.integration import browser, run_views, shared_runs
from tests.integration.tensorboard_server import Server, tensorboard

pytestmark = pytest.mark.tf

SESSION = run_views.SESSION
HOSTILE = '<img src=x onerror="window.top.__pwned=1">'
GOOD = "exp1/model/tpuctl/20251128-142640-train-ab12"
BAD = "hostile/tpuctl/20251128-hostile"
CUT = "truncated/tpuctl/cut"
LIVE_ID = "20251128-150000-train-cd34"
LIVE = f"live/model/tpuctl/{LIVE_ID}"
ZONE = "America/Los_Angeles"  # UTC-8 in November: every hour differs from UTC's
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
T = TypeVar("T")



@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def _shot(driver: Any, shots: Path, name: str) -> Path:
    path = shots / name
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 20_000
    if os.environ.get("TPUCTL_SCREENSHOTS"):
        shutil.copy(path, Path(os.environ["TPUCTL_SCREENSHOTS"]) / name)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs' log folders (the launcher's --log-dir), for `tpuctl report`."""
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, runs: Path) -> tuple[Path, str]:
    """The logdir, and the key of the real run in it."""
    browser.require_browser()
    top = tmp_path_factory.mktemp("tb") / "logs"
    real = top / "real" / "model"
    launched = shared_runs.preempted_once(tmp_path_factory)  # the run test_time_report.py reports: launched once
    assert launched.returncode == 0, launched.stderr
    shutil.copytree(launched.model_dir, real)
    [published] = (real / "tpuctl").glob("*/view.json")
    good = top / "exp1" / "model"
    run_views.publish(good, run_views.built(runs / "good", model_dir=str(good)))
    (good / "plugins" / "profile" / SESSION).mkdir(parents=True)
    hostile = run_views.built(runs / "hostile", model_dir="m", names=[HOSTILE, "worker:1"], run_id="20251128-hostile", cause=HOSTILE, stacks=HOSTILE)
    run_views.publish(top / "hostile", hostile)
    run_views.publish(top / "truncated", '{"schema": "tpuctl.run-view/1", "rows": [', run_id="cut")
    live = run_views.built(runs / "live", model_dir=str(top / "live" / "model"), run_id=LIVE_ID)
    live["run"].update(end=None, state="running")  # as the launcher publishes while the run goes on (launch/publish.py)
    run_views.publish(top / "live" / "model", live)
    return top, str(published.parent.relative_to(top))


@pytest.fixture(scope="module")
def page(logdir: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Any]]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TZ", ZONE)  # Chromium takes its zone from the environment chromedriver hands it
        with (
            tensorboard(str(logdir[0]), tmp_path_factory.mktemp("tblog") / "tensorboard.log") as server,
            browser.chromium(tmp_path_factory.mktemp("chromium-profile")) as driver,
        ):
            driver.get(server.url + "/#tpuctl")
            yield server, driver


def _written(logdir: tuple[Path, str], key: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads((logdir[0] / key / "view.json").read_text())
    return shown


def _share(value: float) -> str:
    """As the page's toFixed(1) writes it: the float's exact value, a tie rounded up (Python's format rounds it to even,
    so a share of 0.5225 read 52.2% here and 52.3% in the page)."""
    exact = Decimal(value * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return f"goodput {exact}%"


def _wait(what: Callable[[], T | None], timeout: float = 60.0) -> T:
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            found = what()
        except StaleElementReferenceException:  # the page re-rendered between finding an element and reading it
            found = None
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
    # The run list arrives after the select is drawn: wait for the run's own option.
    _wait(lambda: driver.find_elements(By.CSS_SELECTOR, f"#run-select option[value={json.dumps(key)}]"))
    Select(driver.find_element(By.ID, "run-select")).select_by_value(key)
    drawn = "return document.getElementById('run-page').dataset.ready === '1' && document.querySelector('#run-page .loading') === null"
    _wait(lambda: driver.execute_script(drawn))


def _all(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    found: list[Any] = driver.find_elements(By.CSS_SELECTOR, css)
    return found


def test_a_real_run_with_a_restart_is_drawn(page: tuple[Server, Any], logdir: tuple[Path, str], shots: Path) -> None:
    _, driver = page
    key = logdir[1]
    _show(driver, key)
    written = _written(logdir, key)
    rows = [(r.get_attribute("data-attempt"), r.get_attribute("data-worker")) for r in _all(driver, "#timeline g.row")]
    assert rows == [("1", "worker:0"), ("2", "worker:0")]
    kinds = [seg.get_attribute("class") for seg in _all(driver, "#timeline rect.seg")]
    assert kinds == [f"seg seg-{s['kind']}" for row in written["rows"] for s in row["segments"]]
    # A restore the launcher heard begin and end of in one read has no length and no segment (test_time_report checks
    # it was told); the saves of two attempts and the steps always have one.
    assert {"seg seg-checkpoint-save", "seg seg-steps"} <= set(kinds)
    assert [t.text for t in _all(driver, "#timeline g.restart text")] == ["restart: preempted"]
    band, cross = driver.execute_script(
        "const row = document.querySelector('#timeline g.row'); const box = (n) => { const b = n.getBBox(); return [b.x, b.x + b.width]; };"
        "return [box(row.querySelector('path.rate')), box(row.querySelector('path.ending'))];"
    )
    assert band[1] <= cross[1], "the first attempt's step-rate band stops where its worker ended (a 30 s bin outlasts the attempt)"
    assert [b.get_attribute("data-label") for b in _all(driver, "#goodput g.bar")] == ["run", "attempt 1 (preempted)", "attempt 2"]
    values = [written["goodput"]["goodput"], *(a["goodput"] for a in written["goodput"]["attempts"])]
    assert [t.text for t in _all(driver, "#goodput g.bar text.value")] == [_share(v) for v in values]
    assert _all(driver, "h2.run-id")[0].text == written["run"]["id"]
    driver.switch_to.default_content()
    _shot(driver, shots, "tensorboard-tab.png")


def test_a_run_is_drawn_row_by_row_with_its_bands_bars_and_profile_links(page: tuple[Server, Any], logdir: tuple[Path, str]) -> None:
    server, driver = page
    _show(driver, GOOD)
    written = _written(logdir, GOOD)
    rows = _all(driver, "#timeline g.row")
    assert [(r.get_attribute("data-attempt"), r.get_attribute("data-worker")) for r in rows] == [
        (str(row["attempt"]), row["worker"]) for row in written["rows"]
    ]
    kinds = [seg.get_attribute("class") for seg in _all(driver, "#timeline rect.seg")]
    assert kinds == [f"seg seg-{s['kind']}" for row in written["rows"] for s in row["segments"]]
    assert len(_all(driver, "#timeline path.rate")) == sum(1 for row in written["rows"] if row["rate"]), "a step-rate band per row"
    ended = [row["ending"] for row in written["rows"] if row["ending"] and row["ending"]["at"] is not None]
    assert len(_all(driver, "#timeline path.ending")) == len(ended) > 0
    assert len(_all(driver, "#goodput-over-time rect.window")) == sum(1 for w in written["goodput_over_time"] if w["goodput"] is not None) > 0
    link = _all(driver, "#profiles a.profile-link")[0]
    assert link.get_attribute("target") == "_top"
    assert link.get_attribute("href") == f"{server.url}/?run={quote('exp1/model/' + SESSION, safe='')}&tool=overview_page#profile"
    assert [td.text for td in _all(driver, "#profiles tr.straggler td")][:3] == ["worker:1 (straggler)", "40", "340.0 ± 17.0"]


def test_a_hang_marker_opens_its_stacks(page: tuple[Server, Any]) -> None:
    _, driver = page
    _show(driver, GOOD)
    details = _all(driver, "#hangs details.hang")
    assert len(details) == 1 and details[0].get_attribute("open") is None
    _all(driver, "#timeline path.hang-marker")[0].click()
    assert details[0].get_attribute("open") == "true"
    assert "model.fit(ds, epochs=10)" in _all(driver, "#hangs pre.stacks")[0].text


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
    _shot(driver, shots, "tensorboard-tab-hostile.png")


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


def _reopen(server: Server, driver: Any) -> None:
    """Back on the tab (a test before may have followed a link to the Profile tab)."""
    driver.switch_to.default_content()
    driver.get(server.url + "/#tpuctl")


def test_the_tab_and_the_terminal_give_the_run_the_same_start_time(page: tuple[Server, Any], runs: Path) -> None:
    """Both in the local time of where they are looked at (the browser's, the terminal's), the tab saying its zone."""
    server, driver = page
    _reopen(server, driver)
    _show(driver, GOOD)
    drawn = run_tpuctl("report", str(runs / "good"), "--timeline", env={**os.environ, "TZ": ZONE, "COLUMNS": "120", "NO_COLOR": "1"})
    assert drawn.returncode == 0, drawn.stderr
    terminal = next(STAMP.search(line) for line in drawn.stdout.splitlines() if "local time" in line and STAMP.search(line))
    meta = _all(driver, "#run-page p.meta")[0].text
    page_stamp = STAMP.search(meta)

    assert terminal is not None and page_stamp is not None
    assert page_stamp.group() == terminal.group()
    assert "local time, UTC-08:00" in meta


def test_the_timeline_labels_stay_readable_in_a_narrow_window(page: tuple[Server, Any]) -> None:
    server, driver = page
    _reopen(server, driver)
    _show(driver, GOOD)
    driver.switch_to.default_content()
    driver.set_window_size(640, 1000)
    try:
        _in_tab(driver)
        fits = "const s = document.querySelector('svg.timeline'); return s.getBoundingClientRect().width <= Math.max(s.parentElement.clientWidth, 480) + 1"
        _wait(lambda: driver.execute_script(fits), timeout=10.0)  # the resize drew the charts again, to the section's width
        label = _all(driver, "svg.timeline text.label")[0]
        height = driver.execute_script("return arguments[0].getBoundingClientRect().height", label)
    finally:
        driver.switch_to.default_content()
        driver.set_window_size(1400, 1000)

    assert height >= 9, f"a worker row's label is {height:.1f} px tall at a 640 px window"


def test_a_live_runs_republished_view_reaches_the_open_tab(page: tuple[Server, Any], logdir: tuple[Path, str]) -> None:
    """The launcher republishes a live run's view every few seconds: the open tab picks it up without a reload, on
    the run that was picked."""
    server, driver = page
    _reopen(server, driver)
    _show(driver, LIVE)
    assert LIVE_ID in _all(driver, "#run-page h2.run-id")[0].text
    shown = _written(logdir, LIVE)
    shown["run"]["workers"] = 7  # the next publication: anything the page shows, here the header's worker count
    run_views.publish(logdir[0] / "live" / "model", shown)

    _wait(lambda: "7 workers" in _all(driver, "#run-page p.meta")[0].text, timeout=45.0)
    assert _all(driver, "#run-select")[0].get_attribute("value") == LIVE


def test_a_missing_browser_skips_here_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("TPUCTL_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium missing"):
        browser.require_browser()
    monkeypatch.setenv("TPUCTL_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="make test"):
        browser.require_browser()

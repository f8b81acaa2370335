"""Debian's headless Chromium driven by Selenium, for the pages tpuctl serves (the TensorBoard tab).

`make test` installs `chromium` and `chromium-driver` from Debian as it installs sshd, never a downloaded browser.
Where they are missing the browser tests skip, saying why; with TPUCTL_REQUIRE_BROWSER=1 (CI: .ci/run) they fail
instead, so CI cannot skip them quietly. The flags keep Chromium off the network (no background fetches, updates,
sync or QUIC) and in a profile folder of the test's own.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
)


def require_browser() -> None:
    """Skip (or fail, under TPUCTL_REQUIRE_BROWSER=1) where Chromium, its driver or selenium is missing."""
    missing = [str(p) for p in (CHROMIUM, DRIVER) if not p.exists()]
    if importlib.util.find_spec("selenium") is None:
        missing.append("the selenium package (the test extra)")
    if not missing:
        return
    why = f"no browser for the page tests: {', '.join(missing)} missing (`make test` installs Debian's chromium and chromium-driver)"
    if os.environ.get("TPUCTL_REQUIRE_BROWSER") == "1":
        pytest.fail(why)
    pytest.skip(why)


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()

"""What the tpuctl tab costs for a week-long 64-worker run: its data route and its page, against reading the raw timeline.

The run's folder is the one benchmarks/report_big_timeline.py writes with tpuctl's own Timeline writer (64 workers,
a step line each every 30 s for 7 days, 10 attempts: ~1.3 M lines, ~165 MB); its view is built by
tpuctl.runs.view.build, as the launcher publishes it, into MODEL_DIR/tpuctl/RUN/view.json under a logdir. Then:

    anchor   reading the raw timeline's bytes and counting its lines, in this process (what a plugin shipping the
             timeline itself would at least pay, before any drawing)
    route    GET /data/plugin/tpuctl/view?run=... from TensorBoard's real server (a process of its own), median of N
    page     the tab's page (TensorBoard's plugin_entry.html, what the tab's iframe loads) in headless Chromium, from
             navigation until every row is drawn, median of N; and the whole TensorBoard page opened on the tab, once

Targets: route < 1 s, page < 2 s (PASS/MISS), ratios to the anchor printed beside the seconds. A measurement, not a
test: it exits 0 even when a target is missed. Without Debian's chromium and chromium-driver the page part is skipped.

    .venv/bin/python benchmarks/plugin_view.py [--workers N] [--days D] [--attempts N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from report_big_timeline import write_week  # benchmarks/report_big_timeline.py, beside this script
from smoke import parse_args  # benchmarks/smoke.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration import browser  # noqa: E402 - after the checkout is on the path
from tests.integration.tensorboard_server import Server, tensorboard  # noqa: E402
from tpuctl.runs import view  # noqa: E402
from tpuctl.runs.folder import RunFolder  # noqa: E402

ROUTE_TARGET_S = 1.0
PAGE_TARGET_S = 2.0


def _raw(timeline: Path) -> tuple[float, int]:
    started = time.perf_counter()
    with timeline.open("rb") as file:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))
    return time.perf_counter() - started, lines


def _route(server: Server, key: str, rounds: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        status, body, _ = server.get(f"/data/plugin/tpuctl/view?run={quote(key)}")
        times.append(time.perf_counter() - started)
        assert status == 200 and "view" in json.loads(body), body[:300]
        size = len(body)
    return statistics.median(times), size


def _drawn(driver: Any, url: str, rows: int, frame: bool) -> float:
    """Seconds from navigating to `url` until the tab shows `rows` rows (inside the tab's iframe when `frame`)."""
    started = time.perf_counter()
    driver.get(url)
    while True:
        try:
            if frame:
                driver.switch_to.default_content()
                frames = driver.find_elements("tag name", "iframe")
                if not frames:
                    continue
                driver.switch_to.frame(frames[0])
            if driver.execute_script("return document.querySelectorAll('#timeline g.row').length") >= rows:
                return time.perf_counter() - started
        except Exception:  # noqa: BLE001 - the frame was replaced while it was looked at: look again
            pass
        if time.perf_counter() - started > 120:
            raise SystemExit(f"the page did not draw {rows} rows in 120 s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parse_args(parser, workers=4, days=0.25, attempts=2, rounds=1)
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-") as where:
        folder, logdir = Path(where) / "run", Path(where) / "logs"
        folder.mkdir()
        lines = write_week(folder, args.workers, args.days, args.attempts)
        timeline = RunFolder(folder).timeline
        print(f"timeline: {args.workers} workers x {args.days:g} days x {args.attempts} attempts, {lines} lines, {timeline.stat().st_size / 1e6:.1f} MB")
        anchor, counted = _raw(timeline)
        built = view.build(RunFolder(folder), live=False, model_dir=str(logdir / "model"))
        run_dir = logdir / "model" / "tpuctl" / "bench-run"
        run_dir.mkdir(parents=True)
        (run_dir / "view.json").write_text(json.dumps(built), encoding="utf-8")
        key, rows = "model/tpuctl/bench-run", len(built["rows"])
        print(f"anchor  read raw ({counted} lines): {anchor:.2f} s")
        with tensorboard(str(logdir), Path(where) / "tensorboard.log") as server:
            route, size = _route(server, key, args.rounds)
            ratio = f"{route / anchor:.2f}x the raw read"
            print(f"route   /data/plugin/tpuctl/view: {route:.3f} s median of {args.rounds} ({ratio}), {size / 1e6:.2f} MB, {rows} rows")
            page = _page(server, rows, args.rounds, Path(where))
            if page is not None:
                print(f"        the page is {page / anchor:.1f}x the raw read of the timeline it draws")
        ok = route < ROUTE_TARGET_S and (page is None or page < PAGE_TARGET_S)
        shown = "page skipped (no browser)" if page is None else f"page {page:.2f} s (target < {PAGE_TARGET_S:g} s)"
        print(f"{'PASS' if ok else 'MISS'}: route {route:.3f} s (target < {ROUTE_TARGET_S:g} s), {shown}")


def _page(server: Server, rows: int, rounds: int, where: Path) -> float | None:
    try:
        browser.require_browser()
    except BaseException as why:  # noqa: BLE001 - pytest's skip: the page part is left out, saying why
        print(f"page    skipped: {why}")
        return None
    with browser.chromium(where / "chromium-profile") as driver:
        times = [_drawn(driver, f"{server.url}/data/plugin_entry.html?name=tpuctl", rows, frame=False) for _ in range(rounds)]
        whole = _drawn(driver, f"{server.url}/#tpuctl", rows, frame=True)
    page = statistics.median(times)
    print(f"page    the tab's page drawn ({rows} rows): {page:.2f} s median of {rounds}; TensorBoard's whole page opened on the tab: {whole:.2f} s")
    return page


if __name__ == "__main__":
    main()

"""`tpuctl report RUN`: where a run's wall time went, and its goodput (docs/report.md).

RUN is what `tpuctl logs` takes (a run id, a unique prefix, none for the newest running run) or a
launch's log folder. The split itself is tpuctl/runs/goodput.py; this module finds the run and renders it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import click

from tpuctl import endings
from tpuctl.runs import goodput, records
from tpuctl.runs.folder import RunFolder

MAX_PRICE = 1e6  # USD an hour: far above any accelerator's price, low enough to catch a unit slip


class Price(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.2
    """A finite, positive price in USD an hour (click's FloatRange lets "nan" through)."""

    name = "USD"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            price = float(value) if not isinstance(value, bool) else math.nan  # type: ignore[arg-type]
        except (TypeError, ValueError):
            price = math.nan
        if not (math.isfinite(price) and 0 < price <= MAX_PRICE):
            self.fail(f"{value!r} is not a price in USD an hour (a positive number, at most {MAX_PRICE:g})", param, ctx)
        return price


# The keys a [report] table of tpuctl.toml or the user's config file may set (read by tpuctl.cli).
CONFIG_KEYS: dict[str, type | tuple[type, Any]] = {"price_per_hour": (float, Price())}


def _say(line: str) -> None:
    click.echo(f"tpuctl: {line}", err=True)


@click.command("report")
@click.argument("run", metavar="[RUN|LOG_DIR]", required=False)
@click.option("--json", "as_json", is_flag=True, help="JSON: wall_s, goodput, categories (name: seconds), attempts, step_source, run_id.")
@click.option("--price-per-hour", type=Price(), metavar="USD", help="What an hour of the run's machines costs: prints what the lost time cost.")
def report(run: str | None, as_json: bool, price_per_hour: float | None) -> None:
    """Show where a run's wall time went: start-up, first step, training steps, checkpoints, lost work, restarts, hangs.

    The categories add up to the wall time; the goodput is the training steps' share of it. A run
    still going is reported so far. RUN is a run id or a unique prefix (left out, the newest running
    run), or the path of a launch's log folder. --price-per-hour (or price_per_hour in a [report]
    config table) prices the time that was not training; tpuctl ships no price table.
    """
    folder, run_id, live = _find(run)
    result = goodput.of_folder(folder, live=live)
    if as_json:
        lost = result.total.wall_s - result.total.categories[goodput.TRAINING]
        cost = None if price_per_hour is None else round(lost / 3600 * price_per_hour, 2)
        body = {"run_id": run_id, "log_dir": str(folder.path), "running": live, **result.to_json(), "price_per_hour": price_per_hour, "lost_cost": cost}
        click.echo(json.dumps(body, indent=2))
        return
    for line in render(result, run_id or str(folder.path), live=live, price_per_hour=price_per_hour):
        click.echo(line)


def render(result: goodput.Report, name: str, *, live: bool, price_per_hour: float | None = None) -> list[str]:
    """The report for a person: a line per category with its seconds and share, the goodput, then each attempt."""
    total = result.total
    so_far = " so far (still running)" if live else ("" if result.finished else " (the timeline stops without the run's end)")
    lines = [f"run {name}: {total.wall_s:.1f}s of wall time{so_far}"]
    lines += _categories(total, "  ")
    source = result.step_source or "none: no steps seen (docs/report.md says what a custom loop needs)"
    lines.append(f"{result.summary_line()}; steps from: {source}")
    if price_per_hour is not None:
        lost = total.wall_s - total.categories[goodput.TRAINING]
        lines.append(f"time not training: {lost / 3600:.2f} h, at {price_per_hour:g} USD/h: {lost / 3600 * price_per_hour:.2f} USD")
    if len(result.attempts) > 1:
        for attempt in result.attempts:
            ended = f", ended: {attempt.ended}" if attempt.ended else ""
            lines.append(f"attempt {attempt.number}: {attempt.split.wall_s:.1f}s{ended}")
            lines += _categories(attempt.split, "    ")
    if result.skipped:
        lines.append(f"skipped {result.skipped} line(s) of the timeline that are not events (truncated, garbage or out of range)")
    return lines


def _categories(split: goodput.Split, indent: str) -> list[str]:
    wall = split.wall_s
    width = max(map(len, goodput.CATEGORIES))
    return [f"{indent}{name:<{width}}  {seconds:10.1f}s  {seconds / wall:6.1%}" for name, seconds in split.categories.items() if seconds > 0 and wall > 0]


def _find(run: str | None) -> tuple[RunFolder, str | None, bool]:
    """The run's folder, its id where a record names it, and whether it still goes on."""
    folder, record, chosen = records.find_or_folder(run, _say)
    if chosen is not None:
        _say(chosen)
    if record is None:
        return folder, None, folder.is_running()
    return folder, record.run_id, record.state == endings.RUNNING

"""`tpuctl report RUN`: where a run's wall time went, and its goodput (docs/report.md).

RUN is what `tpuctl logs` takes (a run id, a unique prefix, none for the newest running run) or a
launch's log folder. The split itself is tpuctl/runs/goodput.py; this module finds the run and renders it.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click

from tpuctl import endings
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.terminal import columns, printable
from tpuctl.runs import goodput, records
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.runs.vm_record import MAX_PRICE, NODE_DELETED, NODE_KEEP, NODE_KEEP_ON_FAILURE, NODE_KEPT


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
    click.echo(f"tpuctl: {printable(line)}", err=True)


@click.command("report")
@click.argument("run", metavar="[RUN|LOG_DIR]", required=False)
@click.option("--json", "as_json", is_flag=True, help="JSON: wall_s, goodput, categories (name: seconds), attempts, step_source, run_id, cost.")
@click.option("--price-per-hour", type=Price(), metavar="USD", help="What an hour of the run's machines costs, over a TPU VM's list price.")
@click.option("--timeline", is_flag=True, help="Also draw the run's timeline: a line per worker and attempt, as wide as the terminal.")
def report(run: str | None, as_json: bool, price_per_hour: float | None, timeline: bool) -> None:
    """Show where a run's wall time went: start-up, first step, training steps, checkpoints, lost work, restarts, hangs.

    The categories add up to the wall time; the goodput is the training steps' share of it. A run
    still going is reported so far. RUN is a run id or a unique prefix (left out, the newest running
    run), or the path of a launch's log folder. A run on a TPU VM (`launch --tpu`) is priced at its
    slice's list price as it started (`launch --new-tpu`: each attempt at its VM's); --price-per-hour (or price_per_hour in a [report] config table)
    is your own price instead, for any run. The cost and the cost of the time not training are shown.
    --timeline draws the run's view (docs/report.md) under the report; NO_COLOR keeps it apart by characters.
    """
    if timeline and as_json:
        raise TpuctlError("--timeline draws for the terminal; --json has the numbers", hint="the drawn view's data is MODEL_DIR/tpuctl/RUN_ID/view.json")
    folder, run_id, live, record = _find(run)
    drawn, result = _drawn(folder, live) if timeline else ([], goodput.of_folder(folder, live=live))
    price, source, note, by_attempt = _prices(result, record, price_per_hour)
    if as_json:
        costs = None if price is None else result.costs(price, by_attempt)
        body = {"run_id": run_id, "log_dir": str(folder.path), "running": live, **result.to_json(), **_slice_json(record)}
        body |= {"price_per_hour": price, "price_source": source, "price_note": note or None}
        body["price_by_attempt"] = None if price is None else {str(a.number): by_attempt.get(a.number, price) for a in result.attempts}
        body |= {"cost": None if costs is None else round(sum(costs.values()), 2), "lost_cost": None if costs is None else round(_lost(costs), 2)}
        body["lost_cost_by_category"] = None if costs is None else {k: round(v, 4) for k, v in costs.items() if k != goodput.TRAINING}
        body["cost_by_attempt"] = None if price is None else {str(a.number): round(_attempt_cost(a, price, by_attempt), 4) for a in result.attempts}
        body["vm"] = _vm_json(record)
        click.echo(json.dumps(body, indent=2))
        return
    vm = _vm_line(record)
    for line in render(result, run_id or str(folder.path), live=live, price_per_hour=price, price_words=note, vm=vm, by_attempt=by_attempt):
        click.echo(line)
    for line in drawn:
        click.echo(line)


def _drawn(folder: RunFolder, live: bool) -> tuple[list[str], goodput.Report]:
    """The run's view drawn for this terminal (timeline_drawing.py), and the report it holds: one read of the timeline.
    The view is checked as the TensorBoard tab checks the ones it serves, so both draw one checked view."""
    from tpuctl.cli.diagnosis import timeline_drawing
    from tpuctl.launch.console.logs import use_colour
    from tpuctl.runs import view
    from tpuctl.tensorboard_plugin import checking

    built, result = view.with_report(folder, live=live)
    colour = use_colour(sys.stdout)
    lines: list[str] = timeline_drawing.draw(checking.checked(built, logdir=""), width=columns(), color=colour)
    return ["", *lines], result


def _price(record: RunRecord | None, given: float | None) -> tuple[float | None, str | None, str]:
    """The price the report uses, its source ("user" or "list") and the words that say which, from the user's price,
    else the list price the run's record kept for its TPU VM (a run on no TPU VM has none: tpuctl does not guess)."""
    if given is not None:
        return given, "user", "your price_per_hour (--price-per-hour or a [report] table)"
    vm = record.vm if record is not None else None
    if vm is None or vm.tpu is None:
        return None, None, ""
    where = f"{vm.tpu} ({vm.capacity}) in {vm.zone}"
    if vm.price_per_hour is None:
        return None, None, f"no list price for {where} ({vm.price_note}); --price-per-hour prices the run"
    return vm.price_per_hour, "list", f"list price of {where} as the run started; {vm.price_note}"


def _prices(result: goodput.Report, record: RunRecord | None, given: float | None) -> tuple[float | None, str | None, str, dict[int, float]]:
    """_price's, and each attempt's list price where the run's VM changed price between attempts (a recreate as another
    capacity kind or in another zone): each attempt is priced at the VM it ran on, never all at the last VM's."""
    price, source, note = _price(record, given)
    if price is None or source != "list":
        return price, source, note, {}  # the user's price holds for every attempt
    listed = result.list_prices(price)
    for attempt in result.attempts:
        if listed[attempt.number] is None and attempt.vm is not None:
            where = f"{attempt.vm.capacity or 'its kind'} in {attempt.vm.zone}"
            return None, None, f"no list price for attempt {attempt.number}'s TPU VM ({where}); --price-per-hour prices the run", {}
    by_attempt = {number: usd for number, usd in listed.items() if usd is not None}
    if len(set(by_attempt.values())) > 1:
        each = "; ".join(f"attempt {a.number}: {_vm_kind(a)} {by_attempt[a.number]:g} USD/h" for a in result.attempts)
        note = f"list price of the TPU VM each attempt ran on: {each}; {record.vm.price_note if record and record.vm else ''}"
    elif by_attempt:
        price = next(iter(by_attempt.values()))
    return price, source, note, by_attempt


def _vm_kind(attempt: goodput.AttemptSplit) -> str:
    vm = attempt.vm
    return "the run's VM" if vm is None else f"{vm.capacity or 'unknown kind'} in {vm.zone}"


def _attempt_cost(attempt: goodput.AttemptSplit, price: float, by_attempt: dict[int, float]) -> float:
    return attempt.split.wall_s / 3600 * by_attempt.get(attempt.number, price)


def _slice_json(record: RunRecord | None) -> dict[str, object]:
    vm = record.vm if record is not None else None
    if vm is None or vm.tpu is None:
        return {"tpu": None}
    return {"tpu": {"type": vm.tpu, "zone": vm.zone, "capacity": vm.capacity}}


def _vm_json(record: RunRecord | None) -> dict[str, object] | None:
    """The TPU VM tpuctl created for the run (`launch --new-tpu`), and whether it may still bill; None for any other run."""
    vm = record.vm if record is not None else None
    if record is None or vm is None or vm.created_node is None:
        return None
    return {"name": vm.created_node, "project": vm.project, "zone": vm.zone, "fate": vm.node_fate, "at_end": vm.node_end, "orphaned": record.orphaned}


def _vm_line(record: RunRecord | None) -> str:
    """What became of the VM tpuctl created for the run: the run deletes it as it ends, unless asked to keep it (the
    record says which); a lost run cannot."""
    vm = record.vm if record is not None else None
    if record is None or vm is None or vm.created_node is None:
        return ""
    name, zone = vm.created_node, vm.zone
    if record.orphaned:
        fate = f"still billing, and nobody is left to delete it: `tpuctl stop {record.run_id}` does"
    elif vm.node_fate == NODE_KEPT:
        why = "--keep-on-failure: the run failed" if vm.node_end == NODE_KEEP_ON_FAILURE else "--keep"
        fate = f"kept ({why}), billing until `tpuctl delete {name} --zone {zone}`"
    elif vm.node_fate == NODE_DELETED:
        fate = "deleted"
    elif vm.node_end == NODE_KEEP:
        fate = f"kept after the run (--keep), billing until `tpuctl delete {name} --zone {zone}`"
    elif vm.node_end == NODE_KEEP_ON_FAILURE:
        fate = "deleted as the run ends if it succeeds or is stopped, kept if it fails (--keep-on-failure)"
    else:
        fate = "deleted as the run ends"
    return f"TPU VM {name} ({vm.tpu}, {vm.capacity}, {zone}), created for this run: {fate}"


def _lost(costs: dict[str, float]) -> float:
    return sum(usd for name, usd in costs.items() if name != goodput.TRAINING)


def render(
    result: goodput.Report, name: str, *, live: bool, price_per_hour: float | None = None, price_words: str = "", vm: str = "",
    by_attempt: dict[int, float] | None = None,
) -> list[str]:
    """The report for a person: a line per category with its seconds and share, the goodput, its cost (and the VM that
    was created for it), then each attempt with its cost, at its own price where `by_attempt` has one. The lines quote
    the timeline (a step's source, a VM's node and zone) and the record: each is made safe for a terminal whole."""
    prices = by_attempt or {}
    total = result.total
    so_far = " so far (still running)" if live else ("" if result.finished else " (the timeline stops without the run's end)")
    lines = [f"run {name}: {total.wall_s:.1f}s of wall time{so_far}"]
    lines += _categories(total, "  ")
    source = result.step_source or "none: no steps seen (docs/report.md says what a custom loop needs)"
    lines.append(f"{result.summary_line()}; steps from: {source}")
    if price_per_hour is not None:
        costs = result.costs(price_per_hour, prices)
        at = "each attempt's price" if len(set(prices.values())) > 1 else f"{price_per_hour:g} USD/h"
        lines.append(f"cost: {sum(costs.values()):.2f} USD, {total.wall_s / 3600:.2f} h at {at} ({price_words})")
        lost = total.wall_s - total.categories[goodput.TRAINING]
        biggest = sorted(((usd, n) for n, usd in costs.items() if n != goodput.TRAINING and usd >= 0.005), reverse=True)
        split = f" ({', '.join(f'{n} {usd:.2f}' for usd, n in biggest)})" if biggest else ""
        lines.append(f"time not training: {lost / 3600:.2f} h, at {at}: {_lost(costs):.2f} USD{split}")
    elif price_words:
        lines.append(f"cost: unknown: {price_words}")
    if vm:
        lines.append(vm)
    if len(result.attempts) > 1:
        for attempt in result.attempts:
            ended = f", ended: {attempt.ended}" if attempt.ended else ""
            cost = "" if price_per_hour is None else f", {_attempt_cost(attempt, price_per_hour, prices):.2f} USD"
            on = "" if attempt.vm is None else f" on TPU VM {attempt.vm.node} ({attempt.vm.zone}{_kind_price(attempt.vm, prices)})"
            lines.append(f"attempt {attempt.number}{on}: {attempt.split.wall_s:.1f}s{cost}{ended}")
            lines += _categories(attempt.split, "    ")
    if result.skipped:
        lines.append(f"skipped {result.skipped} line(s) of the timeline that are not events (truncated, garbage or out of range)")
    return [printable(line) for line in lines]


def _kind_price(vm: goodput.RanOn, prices: dict[int, float]) -> str:
    """`, spot at 2.5 USD/h` where the attempts ran at several prices: which VM cost what."""
    return "" if len(set(prices.values())) < 2 or vm.capacity is None or vm.price_per_hour is None else f", {vm.capacity} at {vm.price_per_hour:g} USD/h"


def _categories(split: goodput.Split, indent: str) -> list[str]:
    wall = split.wall_s
    width = max(map(len, goodput.CATEGORIES))
    return [f"{indent}{name:<{width}}  {seconds:10.1f}s  {seconds / wall:6.1%}" for name, seconds in split.categories.items() if seconds > 0 and wall > 0]


def _find(run: str | None) -> tuple[RunFolder, str | None, bool, RunRecord | None]:
    """The run's folder, its id where a record names it, whether it still goes on, and its record (what prices it)."""
    folder, record, chosen = records.find_or_folder(run, _say)
    if chosen is not None:
        _say(chosen)
    if record is None:
        try:
            record = records.record_of(folder, _say)  # a log folder given by path: its record, where one names it
        except TpuctlError:
            return folder, None, folder.is_running(), None
        return folder, None, folder.is_running(), record
    return folder, record.run_id, record.state == endings.RUNNING, record

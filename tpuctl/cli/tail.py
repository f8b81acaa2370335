"""`tpuctl tail MODEL_DIR`: scalars and checkpoints as training writes them.

The polling loop is tpuctl.watch.follow_loop; this module parses the flags and
draws each update (JSON lines, plain lines, or a live view on a terminal).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from tpuctl.errors import TpuctlError

if TYPE_CHECKING:
    from tpuctl.watch.tailer import Update

DEFAULT_INTERVAL_S = 2.0


def parse_tags(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    tags = tuple(part.strip() for part in text.split(","))
    if not all(tags):
        raise TpuctlError(f"--tags {text!r} has an empty pattern", hint="e.g. --tags loss,acc*")
    return tags


class Display:
    """Where updates go: JSON lines, plain lines, or a live rich view on a terminal."""

    def __init__(self, as_json: bool, live: bool) -> None:
        from tpuctl.watch.board import Board

        self.as_json = as_json
        self.board = Board()
        self._live: Any = None
        if live and not as_json:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self.board.render("starting"), console=Console(), refresh_per_second=4, transient=False)
            self._live.__enter__()

    def show(self, update: Update, status: str) -> None:
        from tpuctl.watch import board

        self.board.add(update)
        if self.as_json:
            for line in board.json_lines(update):
                click.echo(line)
            return
        for damage in update.damage:
            click.echo(f"tpuctl: warning: {damage.file} at byte {damage.offset}: {damage.reason}", err=True)
        if self._live is not None:
            self._live.update(self.board.render(status))
            return
        for line in board.plain_lines(update):
            click.echo(line)

    def close(self) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)


def _say(line: str) -> None:
    click.echo(f"tpuctl: {line}", err=True)


@click.command("tail")
@click.argument("model_dir")
@click.option("--once", is_flag=True, help="Read everything present, print it, exit.")
@click.option("--follow", "follow_flag", is_flag=True, help="Keep polling until Ctrl-C (the default).")
@click.option("--until-idle", type=click.FloatRange(min=0, min_open=True), metavar="S", help="Exit after S seconds without new data.")
@click.option("--tags", metavar="PATTERNS", help="Only these tags: comma-separated, shell wildcards (loss,acc*).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=DEFAULT_INTERVAL_S, show_default=True, help="Seconds between polls.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event (docs/tail.md).")
def tail(model_dir: str, once: bool, follow_flag: bool, until_idle: float | None, tags: str | None, interval: float, as_json: bool) -> None:
    """Follow the scalars and checkpoints a training run writes under MODEL_DIR (a folder or gs://BUCKET/PATH).

    Reads only the bytes appended since the last poll, checks every record's
    CRC, and never imports TensorFlow.
    """
    from tpuctl.cli.display import rich_wanted
    from tpuctl.watch.follow_loop import follow
    from tpuctl.watch.sources import open_source

    if sum((once, follow_flag, until_idle is not None)) > 1:
        raise TpuctlError("give one of --once, --follow, --until-idle")
    patterns = parse_tags(tags)
    source = open_source(model_dir)
    display = Display(as_json, live=rich_wanted(sys.stdout))
    try:
        follow(source, patterns, display.show, _say, once=once, until_idle=until_idle, interval=interval)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    finally:
        display.close()

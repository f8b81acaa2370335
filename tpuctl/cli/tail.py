"""`tpuctl tail MODEL_DIR`: scalars and checkpoints as training writes them."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from tpuctl.errors import TpuctlError

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

    def show(self, update: Any, status: str) -> None:
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


def follow(source: Any, tags: tuple[str, ...], display: Display, *, once: bool, until_idle: float | None, interval: float) -> None:
    """Poll until told to stop: --once after one full read, --until-idle after a quiet spell, else forever."""
    from tpuctl.watch.tailer import Tailer

    tailer = Tailer(source, tags)
    quiet_since = time.monotonic()
    said_waiting = False
    while True:
        try:
            for update in tailer.updates(last=once):
                if update:
                    quiet_since = time.monotonic()
                status = f"{tailer.event_files} event file(s) under {source.root}; polling every {interval:g}s"
                display.show(update, status)
        except Exception as err:
            if once or not _passing(err):
                raise _unreadable(source.root, err) from None
            # A dropped connection or a 503 from the bucket: say so, keep the view, try again.
            click.echo(f"tpuctl: warning: cannot read {source.root} now ({_reason(err)}); retrying", err=True)
        now = time.monotonic()
        if tailer.event_files == 0 and not said_waiting:
            click.echo(f"tpuctl: no event files under {source.root} yet" + ("" if once else "; waiting"), err=True)
            said_waiting = True
        if once or (until_idle is not None and now - quiet_since >= until_idle):
            return
        time.sleep(interval)


def _passing(err: Exception) -> bool:
    from tpuctl.cloud import retry

    return isinstance(err, OSError) or retry.is_transient(err)


def _reason(err: Exception) -> str:
    return " ".join(str(err).split())[:200] or type(err).__name__


def _unreadable(root: str, err: Exception) -> Exception:
    from tpuctl.cloud.api_errors import is_api_failure
    from tpuctl.errors import FAILED

    if isinstance(err, TpuctlError):
        return err
    if isinstance(err, OSError) or is_api_failure(err):
        return TpuctlError(f"cannot read {root}: {_reason(err)}", exit_code=FAILED)
    return err


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
    from tpuctl.watch.sources import open_source

    if sum((once, follow_flag, until_idle is not None)) > 1:
        raise TpuctlError("give one of --once, --follow, --until-idle")
    patterns = parse_tags(tags)
    source = open_source(model_dir)
    display = Display(as_json, live=rich_wanted(sys.stdout))
    try:
        follow(source, patterns, display, once=once, until_idle=until_idle, interval=interval)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    finally:
        display.close()

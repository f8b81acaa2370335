"""`tpuctl tail MODEL_DIR`: scalars and checkpoints as training writes them.

The polling loop is tpuctl.watch.follow_loop; this module parses the flags and
draws each update (JSON lines, plain lines, or a live view on a terminal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from tpuctl.endings import INTERRUPTED
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.seconds import Seconds
from tpuctl.inputs.terminal import printable

if TYPE_CHECKING:
    from tpuctl.watch.tailer import Update

DEFAULT_INTERVAL_S = 2.0
MIN_INTERVAL_S = 0.05  # faster polling only burns CPU (and, on gs://, requests)


def parse_tags(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    tags = tuple(part.strip() for part in text.split(","))
    if not all(tags):
        raise TpuctlError(f"--tags {text!r} has an empty pattern", hint="e.g. --tags loss,acc*")
    return tags


class PipeClosed(Exception):
    """Whoever read our output has gone (`tail --json | head -1`): time to stop, quietly."""


class Display:
    """Where updates go: JSON lines, plain lines, or a live rich view on a terminal.

    JSON and plain lines are written a whole update (up to a 4 MB chunk of the
    file) at a time, straight to the binary stdout and on a thread of their own:
    one write per chunk, not one click.echo per line, overlapped with reading the
    next, is what lets `tail --once --json` keep up with its reader."""

    def __init__(self, as_json: bool, live: bool, out: BinaryIO | None = None, *, only_tags: bool = False) -> None:
        from tpuctl.watch.board import Board
        from tpuctl.watch.overlapped_output import OverlappedWriter

        self.as_json = as_json
        self.only_tags = only_tags  # --tags: other summaries are not what was asked for
        self.board = Board()
        stream = out if out is not None else sys.stdout.buffer
        self._out = OverlappedWriter(stream)
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # an in-memory stream
            self._fd = None
        self._live: Any = None
        if live and not as_json:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self.board.render("starting"), console=Console(), refresh_per_second=4, transient=False)
            self._live.__enter__()

    def show(self, update: Update, status: str) -> None:
        from tpuctl.watch import board

        if not update and self._reader_gone():
            raise PipeClosed  # `tail ... | head -1`, nothing new to write: a write would never come to tell
        if self.only_tags and update.others:
            update = dataclasses.replace(update, others=Counter())
        if self.as_json:
            self._write(board.json_text(update))
            return
        for line in board.damage_lines(update):
            _say(line)
        if self._live is not None:
            self.board.add(update)
            self._live.update(self.board.render(status))
            return
        self._write("".join(line + "\n" for line in board.plain_lines(update)))

    def _reader_gone(self) -> bool:
        """Whether stdout is a pipe nobody reads any more (poll reports POLLERR on its write end)."""
        import select
        import stat

        try:
            fd = self._fd
            if fd is None or not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return False
            poller = select.poll()
            poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
            return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
        except (OSError, ValueError):
            return False

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            self._out.write(text.encode("utf-8", "replace"))
        except BrokenPipeError:
            raise PipeClosed from None

    def flush(self) -> None:
        """Wait until everything shown has been written."""
        try:
            self._out.finish()
        except BrokenPipeError:
            raise PipeClosed from None

    def close(self) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)


def _quiet_exit() -> None:
    """The reader closed the pipe: point stdout at /dev/null, so that flushing what is
    still buffered at exit cannot fail ("Broken pipe"), and end with status 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _say(line: str) -> None:
    with contextlib.suppress(BrokenPipeError):  # nobody reads stderr any more: the notice has nowhere to go
        click.echo(f"tpuctl: {printable(line)}", err=True)  # it may quote the folder's name


@click.command("tail")
@click.argument("model_dir")
@click.option("--once", is_flag=True, help="Read everything present, print it, exit.")
@click.option("--follow", "follow_flag", is_flag=True, help="Keep polling until Ctrl-C (the default).")
@click.option("--until-idle", type=Seconds(), metavar="S", help="Exit after S seconds without new data (0 < S <= 604800).")
@click.option("--tags", metavar="PATTERNS", help="Only these tags: comma-separated, shell wildcards (loss,acc*).")
@click.option(
    "--interval", type=Seconds(MIN_INTERVAL_S, inclusive_minimum=True), metavar="S", default=DEFAULT_INTERVAL_S, show_default=True,
    help="Seconds between polls (0.05 <= S <= 604800).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event (docs/tail.md).")
def tail(model_dir: str, once: bool, follow_flag: bool, until_idle: float | None, tags: str | None, interval: float, as_json: bool) -> None:
    """Follow the scalars and checkpoints a training run writes under MODEL_DIR (a folder or gs://BUCKET/PATH).

    Reads only the bytes appended since the last poll, checks every record's
    CRC, and never imports TensorFlow. On gs:// each request waits at most 5 s
    to connect and 60 s for its whole reply, retried for 5 s: a bucket that does
    not answer ends --once in about a minute, in one line; following, it is
    said and the next poll tries again.
    """
    from tpuctl.cli.display import rich_wanted
    from tpuctl.watch.follow_loop import follow
    from tpuctl.watch.sources import open_source

    if sum((once, follow_flag, until_idle is not None)) > 1:
        raise TpuctlError("give one of --once, --follow, --until-idle")
    patterns = parse_tags(tags)
    source = open_source(model_dir)
    display = Display(as_json, live=rich_wanted(sys.stdout), only_tags=bool(patterns))
    try:
        follow(source, patterns, display.show, _say, once=once, until_idle=until_idle, interval=interval)
        display.flush()
    except KeyboardInterrupt:
        raise SystemExit(INTERRUPTED) from None
    except PipeClosed:
        _quiet_exit()
    finally:
        display.close()

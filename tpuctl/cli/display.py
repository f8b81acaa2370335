"""Tables and a one-line progress display: rich on a terminal, plain lines when piped."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import click

from tpuctl.inputs.terminal import printable


def rich_wanted(stream: Any) -> bool:
    return bool(stream.isatty()) and "NO_COLOR" not in os.environ


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, whole: Sequence[str] = ()) -> None:
    """On a terminal a rich table; otherwise space-aligned columns that `awk` and `column` read.

    On a terminal too narrow for the table, the columns named in `whole` (an id to copy, a state) are
    never cut, and the others are folded onto more lines rather than cut (a path is no use cut). A cell's text comes
    from outside (a record, an API's reply): it is made safe for a terminal first (terminal.printable)."""
    rows = [[printable(cell) for cell in row] for row in rows]
    if rich_wanted(sys.stdout):
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table(*headers, box=None, header_style="bold")
        for index, column in enumerate(table.columns if whole else ()):
            column.overflow = "fold"
            if headers[index] in whole:
                column.no_wrap, column.min_width = True, max(len(headers[index]), *(len(row[index]) for row in rows))
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))  # a label like "[x]" is text, not markup
        Console().print(table)
        return
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())


class StatusLine:
    """Progress of a long operation on stderr: a live spinner on a TTY, a line per change otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._last = ""
        self._status: Any = None

    def __enter__(self) -> StatusLine:
        if rich_wanted(sys.stderr):
            from rich.console import Console

            self._status = Console(stderr=True).status(self.label)
            self._status.__enter__()
        return self

    def __call__(self, state: str, elapsed: float) -> None:
        text = f"{self.label}: {state} ({elapsed:.0f}s)"
        if self._status is not None:
            self._status.update(text)
        elif state != self._last:
            click.echo(text, err=True)
        self._last = state

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        if self._status is not None:
            self._status.__exit__(kind, value, trace)


def age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


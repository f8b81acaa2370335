"""`Seconds`: the click type for a duration flag (`--interval`, `--until-idle`, timeouts).

A plain `float` flag accepts "nan", "inf", "-1" and "1e300": nan compares false with
everything (a deadline that never comes, a sleep that raises), inf or 1e300 overflow
`time.sleep`/`time.monotonic() + x` or simply hang, and a negative wait is nonsense.
Every duration flag uses this type so those are one usage line and exit 2, the same
wording everywhere.
"""

from __future__ import annotations

import math

import click

WEEK_S = 7 * 24 * 3600.0


class Seconds(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.2; pyproject allows 8.1
    """A finite number of seconds within [minimum, maximum].

    `minimum` is exclusive by default (a zero interval would spin, a zero timeout
    fail at once); pass `inclusive_minimum=True` where 0 means something. The
    maximum (a week unless given) keeps the value small enough for `time.sleep`
    and deadline arithmetic, and catches a unit slip (ms typed as s)."""

    name = "SECONDS"

    def __init__(self, minimum: float = 0.0, maximum: float = WEEK_S, *, inclusive_minimum: bool = False) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.inclusive_minimum = inclusive_minimum

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            text = str(value).strip()
            try:
                seconds = float(text)
            except ValueError:
                self.fail(f"{_shown(text)!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{_shown(str(value))!r} is not a finite number of seconds", param, ctx)
        low_ok = seconds >= self.minimum if self.inclusive_minimum else seconds > self.minimum
        if not low_ok or seconds > self.maximum:
            self.fail(f"{_shown(str(value))!r} is not within {self._range()}", param, ctx)
        return seconds

    def _range(self) -> str:
        low = "[" if self.inclusive_minimum else "("
        return f"{low}{self.minimum:g}, {self.maximum:g}] seconds"

    def __repr__(self) -> str:
        return "SECONDS"


def _shown(text: str) -> str:
    """Echo user input back on one line: control characters escaped, long text cut."""
    from tpuctl.inputs.errors import one_line

    return one_line(text, 40)


def from_env(variable: str, default: float, minimum: float = 0.05, maximum: float = 3600.0) -> float:
    """A polling interval from the environment (how tests make a backend poll fast), checked as a flag would be."""
    import os

    from tpuctl.inputs.errors import TpuctlError

    raw = os.environ.get(variable, "")
    if not raw:
        return default
    try:
        return float(Seconds(minimum, maximum, inclusive_minimum=True).convert(raw, None, None))
    except click.BadParameter:
        raise TpuctlError(f"{variable}={raw[:40]!r} is not between {minimum:g} and {maximum:g} seconds") from None

"""The notice for a run that has gone quiet before its first step (docs/hangs.md, "Quiet before the first step").

A script can block before it trains at all (an Estimator under MirroredStrategy on several virtual
CPUs does so under plain `python` too) and, without --hang-timeout, nothing would say so: the
console just stops. After `--quiet-notice` seconds with no output line and no step, counted like
--hang-timeout from the moment every worker reported ready, tpuctl takes the workers' stacks once
and says where they are, in one line that names `tpuctl stacks`. It is a notice, never a stop: a
first step may legitimately take minutes (an XLA compilation on a TPU, a large input pipeline's
first fill), and the frame the notice names tells that case from a hang. Once any worker reports
a step (tpuctl's runtime in Keras' fit, or a summary or checkpoint in --model-dir) it is never said
again; after new output, a new quiet spell may say it once more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tpuctl.safety import stack_view

MAX_PLACES = 3  # places named on the one line; the rest are counted


class QuietSpell:
    """When the quiet notice is due: `period` seconds after the last sign of life, once per spell."""

    def __init__(self, period: float) -> None:
        self.period = period
        self._said_for: float | None = None  # the clock's last touch when the notice was given

    def wake_at(self, last: float, now: float) -> float:
        """When to look again: the notice's time for the spell that began at `last`; once it was given for that
        spell, a period from now (output since then starts a new spell, whose notice is at least a period away)."""
        return now + self.period if self._said_for == last else last + self.period

    def due(self, last: float, now: float) -> bool:
        return self._said_for != last and now >= last + self.period

    def said(self, last: float) -> None:
        self._said_for = last


def notice(names: Sequence[str], dumps: Sequence[str | None], own: Callable[[str], bool], period: float, run_id: str) -> str:
    """The one line: how long it has been quiet, where each worker is (workers at one place named together)."""
    places: dict[str, list[str]] = {}
    for name, dump in zip(names, dumps, strict=True):
        where = stack_view.innermost(dump, own) if dump else None
        places.setdefault(where or "(no stack)", []).append(name)
    shown = [f"{', '.join(who)} at {where}" if where != "(no stack)" else f"{', '.join(who)}: no stack" for where, who in places.items()]
    rest = len(shown) - MAX_PLACES
    more = f" and {rest} more place{'s' if rest > 1 else ''}" if rest > 0 else ""
    return (
        f"no step yet, and no worker printed anything for {period:g}s (--quiet-notice): {'; '.join(shown[:MAX_PLACES])}{more}; "
        f"`tpuctl stacks {run_id}` shows every worker's stacks (nothing was stopped; --hang-timeout stops a run that hangs)"
    )

"""Where a lost node comes back, as a named policy: its own zone first, or elsewhere first and its own zone last.

Kept apart from the mechanism (lifecycle.recreate deletes the lost node and creates it from its saved spec; the hunt
tries one candidate after another), as SkyPilot keeps its recovery strategies apart from provisioning
(sky/jobs/recovery_strategy.py, github.com/skypilot-org/skypilot at 027bbcdb): FAILOVER relaunches in the region the job ran in
first and fails over only when that fails; EAGER_NEXT_REGION, registered as its default, relaunches with the region
it ran in blocked first — "based on the observation that the preemption is likely to happen again shortly in the same
region" — and comes back to it only when everything else failed. tpuctl's two policies are those two, by zone:

- same-zone-first (FAILOVER): the own zone first, as the node was (same type, same kind): its disks, reservation and
  the user's data path were chosen for it; then, on a stockout there, the hunt over the other candidates.
- elsewhere-first (EAGER_NEXT_REGION): the hunt over the other candidates first, the own zone as its last try
  (when there is no other candidate, the own zone alone).

The default follows the kind (`default_for`): a spot or preemptible node was taken back by its zone, so it goes
elsewhere first, as SkyPilot's default does; an on-demand or reserved node (a reservation holds capacity in its own
zone only) and a flex-start one come back in their own zone first.

Each is bounded. Every try may stay CREATING for create-deadline, as any create's, and the hunt tries each candidate
once, so a recovery ends within (candidates + 1) times create-deadline. The one try that waits while others could already
be tried — same-zone-first's own zone for a spot or preemptible node, a zone that just took capacity back — gets
FIRST_LOOK_SHARE of it (600 s of the default 1800); elsewhere-first's own zone comes last, with nothing waiting behind
it, and keeps the whole deadline. The node goes elsewhere only when the user gave somewhere to go (babysit's --zones or
the zones setting, a run's own hunt); a failure that is no stockout stops as today, in one line. A node that comes back
in another zone has its saved spec moved with it, so every command finds it by name alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuctl.cloud.capacity.hunt import Candidate, HuntTerms, hunt
from tpuctl.cloud.nodes import lifecycle, nodespec
from tpuctl.cloud.nodes.creating import CREATE_DEADLINE_S, Naming, Terms
from tpuctl.cloud.nodes.lifecycle import Ensured, Progress
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import NodeApi
from tpuctl.inputs.errors import CapacityError, Stockout
from tpuctl.tpu import stockouts
from tpuctl.tpu.capacity import TAKEN_BACK, Capacity, Recovery

if TYPE_CHECKING:
    from tpuctl.settings.cloud import Settings

# The hunt's candidates, best first; gathered only once they are needed (gathering offers reads every zone).
Candidates = Callable[[], Sequence[Candidate]]
# tpuctl's choice, not Google's number: a slice that comes up does so in minutes (the create-deadline setting's note),
# so a third of the deadline sees most creates through while the other candidates wait no longer than that.
FIRST_LOOK_SHARE = 1 / 3


DEFAULTS = "elsewhere-first for spot and preemptible, same-zone-first otherwise"  # default_for, in words


def asked(resolved: Settings) -> Recovery | None:
    """The policy the recovery setting names (--recovery, TPUCTL_RECOVERY, a config file), already checked by the
    settings layer; None where no layer names one: each lost node then gets its kind's default."""
    return Recovery(resolved.require("recovery")) if resolved.given("recovery") else None


Named = Callable[[Naming], None]  # what a recovery tells: each try's Naming (its Accepted is no news: the wait is for READY)


def _unheard(event: Naming) -> None:
    """A sink for a recovery whose caller needs to hear nothing."""


def _named(naming: Named) -> Callable[[object], None]:
    """The create events of a recovery's tries, as `naming` hears them: their Naming alone."""

    def told(event: object) -> None:
        if isinstance(event, Naming):
            naming(event)

    return told


@dataclass(frozen=True)
class Recovered:
    ensured: Ensured
    line: str  # where the node came back and why, for the user


def own_capacity(spec: NodeSpec) -> Capacity:
    """The capacity kind the node was created as (its reservation's name included)."""
    return Capacity(spec.capacity(), spec.reservation if spec.reserved else None)


def recover(
    api: NodeApi,
    spec: NodeSpec,
    progress: Progress,
    *,
    say: Callable[[str], None],
    candidates: Candidates | None,
    recovery: Recovery | None = None,
    deadline_s: float = CREATE_DEADLINE_S,
    sleep: Callable[[float], None] = time.sleep,
    naming: Named = _unheard,
) -> Recovered:
    """The lost node back from `spec`, by `recovery` (None: the default for its kind), over `candidates` when given;
    `naming` hears each try's Naming before its create is sent (creating.py). A queued resource, and a node named by
    --type/--topology, come back in their zone only: a queued request waits where it was placed, and the hunt's
    candidates are accelerator types."""
    movable = candidates if candidates is not None and not spec.queues() and spec.accelerator_type else None
    policy = recovery or Recovery.default_for(spec.capacity())
    if movable is not None and policy is Recovery.ELSEWHERE_FIRST:
        return _elsewhere_first(api, spec, progress, say, movable, deadline_s, sleep, naming)
    first = deadline_s * FIRST_LOOK_SHARE if movable is not None and spec.capacity() in TAKEN_BACK else deadline_s
    try:
        ensured = lifecycle.recreate(api, spec, progress, Terms(deadline_s=first, sleep=sleep), _named(naming))
    except CapacityError as stockout:
        cut_short = stockout.kind is Stockout.STUCK and first < deadline_s
        if not cut_short:  # as the hunt's: a try a shorter bound ended says nothing about the zone
            stockouts.remember(spec.project, spec.zone, spec.accelerator(), spec.capacity(), stockout.kind.name.lower())
        others = _others(movable, spec) if movable is not None else []
        if not others:
            raise
        if cut_short:
            why = f"{spec.zone} did not make it READY within {first:g} s (same-zone-first's look at a {spec.capacity()} node's own zone)"
        else:
            why = f"{spec.zone} has no capacity ({stockout.kind.value})"
        say(f"{why}; hunting over {_count(others, 'other candidate')}, next: {others[0].zone}")
        return _hunted(api, spec, others, progress, say, deadline_s, sleep, naming, why=why, before="more ")
    return Recovered(ensured, f"recreated in its own zone {spec.zone}")


def _elsewhere_first(
    api: NodeApi,
    spec: NodeSpec,
    progress: Progress,
    say: Callable[[str], None],
    candidates: Candidates,
    deadline_s: float,
    sleep: Callable[[float], None],
    naming: Named,
) -> Recovered:
    """The other candidates first, the own zone as the hunt's last try. The lost node goes first: the hunt would find
    it by its saved spec and try its zone first (a rerun's rule), and a node of that name in its zone is of no use.
    A node that is not lost (the service brought it back meanwhile) is kept, as lifecycle.recreate keeps one."""
    existing = api.get_node(spec.zone, spec.name)
    others = [] if existing is not None and not existing.lost else _others(candidates, spec)
    if not others:
        back = lifecycle.recreate(api, spec, progress, Terms(deadline_s=deadline_s, sleep=sleep), _named(naming))
        return Recovered(back, f"recreated in its own zone {spec.zone}")
    lifecycle.clear_lost(api, spec, existing, progress, sleep)
    say(f"elsewhere-first: hunting over {_count(others, 'other candidate')} before {spec.zone}, next: {others[0].zone}")
    own = Candidate(str(spec.accelerator_type), own_capacity(spec), spec.zone)
    return _hunted(api, spec, [*others, own], progress, say, deadline_s, sleep, naming, why=f"elsewhere-first ({spec.zone} last)", before="")


def _others(candidates: Candidates, spec: NodeSpec) -> list[Candidate]:
    """The candidates that are not the node itself (its zone, type and kind)."""
    own = (spec.zone, spec.accelerator_type, own_capacity(spec))
    return [c for c in candidates() if (c.zone, c.accelerator_type, c.capacity) != own]


def _hunted(
    api: NodeApi,
    spec: NodeSpec,
    order: list[Candidate],
    progress: Progress,
    say: Callable[[str], None],
    deadline_s: float,
    sleep: Callable[[float], None],
    naming: Named,
    *,
    why: str,
    before: str,
) -> Recovered:
    """The hunt over `order`, each try bounded by create-deadline; the node's own spec kept saved when it finds nothing."""
    try:
        done = hunt(api, spec, order, progress, HuntTerms(runtime_given=True, create_deadline_s=deadline_s, sleep=sleep), say=say, heard=_named(naming))
    except BaseException:
        nodespec.save(spec)  # a try of another kind in this zone overwrote it: recreate and babysit need the node's own
        raise
    moved = done.ensured.spec
    if moved.zone != spec.zone:
        nodespec.forget(spec)  # the old zone's spec: describe, ssh, launch --tpu and delete now find the new one alone
    tries = f" after {_count(done.tried, before + 'stocked-out candidate')}" if done.tried else ""
    return Recovered(done.ensured, f"recreated in {moved.zone} as {done.candidate.capacity}: {why}{tries}")


def _count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"

"""Where a lost node comes back, as named strategies: its own zone first, or elsewhere first and its own zone last.

Kept apart from the mechanism (lifecycle.recreate deletes the lost node and creates it from its saved spec; the hunt
tries one candidate after another), as SkyPilot keeps its recovery strategies apart from provisioning
(sky/jobs/recovery_strategy.py, github.com/skypilot-org/skypilot at 027bbcdb): each is a class registered under its
name, with one `recover()`, chosen by the name the job asks for. FAILOVER relaunches in the region the job ran in
first and fails over only when that fails; EAGER_NEXT_REGION, a FAILOVER that registers as the default, relaunches
with the region it ran in blocked first — "based on the observation that the preemption is likely to happen again
shortly in the same region" — and comes back to it only when everything else failed. tpuctl's two strategies are
those two, by zone, registered under the recovery setting's names (`STRATEGIES`, `strategy`):

- same-zone-first (`SameZoneFirst`, FAILOVER): the own zone first, as the node was (same type, same kind): its disks, reservation and
  the user's data path were chosen for it; then, on a stockout there, the hunt over the other candidates.
- elsewhere-first (`ElsewhereFirst`, EAGER_NEXT_REGION): the hunt over the other candidates first, the own zone as its last try
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
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

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
class Lost:
    """The node to bring back: the API that makes it, its saved spec, and where else it may go (`candidates`, gathered
    only when needed; None: its own zone alone)."""

    api: NodeApi
    spec: NodeSpec
    candidates: Candidates | None = None

    @property
    def movable(self) -> Candidates | None:
        """Where else it may go. A queued resource, and a node named by --type/--topology, come back in their zone only:
        a queued request waits where it was placed, and the hunt's candidates are accelerator types."""
        spec = self.spec
        return self.candidates if self.candidates is not None and not spec.queues() and spec.accelerator_type else None


@dataclass(frozen=True)
class Tries:
    """How each try of a recovery runs and whom it tells: the wait's progress, the user's lines (`say`), each try's
    Naming before its create is sent (`naming`: creating.py), each try's create-deadline, and the pause between polls."""

    progress: Progress
    say: Callable[[str], None]
    deadline_s: float = CREATE_DEADLINE_S
    sleep: Callable[[float], None] = time.sleep
    naming: Named = _unheard

    def terms(self, deadline_s: float | None = None) -> Terms:
        """One create's terms: this recovery's deadline unless a shorter look is asked for."""
        return Terms(deadline_s=self.deadline_s if deadline_s is None else deadline_s, sleep=self.sleep)


@dataclass(frozen=True)
class Recovered:
    ensured: Ensured
    line: str  # where the node came back and why, for the user


def own_capacity(spec: NodeSpec) -> Capacity:
    """The capacity kind the node was created as (its reservation's name included)."""
    return Capacity(spec.capacity(), spec.reservation if spec.reserved else None)


STRATEGIES: dict[Recovery, Strategy] = {}  # each strategy by the name the recovery setting gives it


class Strategy(ABC):
    """A way to bring a lost node back; its subclasses register under the recovery setting's name for them."""

    name: ClassVar[Recovery]

    def __init_subclass__(cls, name: Recovery, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name
        STRATEGIES[name] = cls()

    @abstractmethod
    def recover(self, lost: Lost, tries: Tries) -> Recovered:
        """The lost node back from its spec, by this strategy, over its other candidates where it may go elsewhere."""

    @staticmethod
    def _others(candidates: Candidates, spec: NodeSpec) -> list[Candidate]:
        """The candidates that are not the node itself (its zone, type and kind)."""
        own = (spec.zone, spec.accelerator_type, own_capacity(spec))
        return [c for c in candidates() if (c.zone, c.accelerator_type, c.capacity) != own]

    @staticmethod
    def _hunted(lost: Lost, order: list[Candidate], tries: Tries, *, why: str, before: str) -> Recovered:
        """The hunt over `order`, each try bounded by create-deadline; the node's own spec kept saved when it finds nothing."""
        spec = lost.spec
        terms = HuntTerms(runtime_given=True, create_deadline_s=tries.deadline_s, sleep=tries.sleep)
        try:
            done = hunt(lost.api, spec, order, tries.progress, terms, say=tries.say, heard=_named(tries.naming))
        except BaseException:
            nodespec.save(spec)  # a try of another kind in this zone overwrote it: recreate and babysit need the node's own
            raise
        moved = done.ensured.spec
        if moved.zone != spec.zone:
            nodespec.forget(spec)  # the old zone's spec: describe, ssh, launch --tpu and delete now find the new one alone
        tries_before = f" after {_count(done.tried, before + 'stocked-out candidate')}" if done.tried else ""
        return Recovered(done.ensured, f"recreated in {moved.zone} as {done.candidate.capacity}: {why}{tries_before}")


class SameZoneFirst(Strategy, name=Recovery.SAME_ZONE_FIRST):
    """Its own zone first, as the node was; on a stockout there, the hunt over the other candidates."""

    def recover(self, lost: Lost, tries: Tries) -> Recovered:
        spec, movable, deadline_s = lost.spec, lost.movable, tries.deadline_s
        first = deadline_s * FIRST_LOOK_SHARE if movable is not None and spec.capacity() in TAKEN_BACK else deadline_s
        try:
            ensured = lifecycle.recreate(lost.api, spec, tries.progress, tries.terms(first), _named(tries.naming))
        except CapacityError as stockout:
            cut_short = stockout.kind is Stockout.STUCK and first < deadline_s
            if not cut_short:  # as the hunt's: a try a shorter bound ended says nothing about the zone
                stockouts.remember(spec.project, spec.zone, spec.accelerator(), spec.capacity(), stockout.kind.name.lower())
            others = self._others(movable, spec) if movable is not None else []
            if not others:
                raise
            if cut_short:
                why = f"{spec.zone} did not make it READY within {first:g} s (same-zone-first's look at a {spec.capacity()} node's own zone)"
            else:
                why = f"{spec.zone} has no capacity ({stockout.kind.value})"
            tries.say(f"{why}; hunting over {_count(others, 'other candidate')}, next: {others[0].zone}")
            return self._hunted(lost, others, tries, why=why, before="more ")
        return Recovered(ensured, f"recreated in its own zone {spec.zone}")


class ElsewhereFirst(SameZoneFirst, name=Recovery.ELSEWHERE_FIRST):
    """The other candidates first, the own zone as the hunt's last try; a node that may go nowhere else comes back as
    same-zone-first brings it."""

    def recover(self, lost: Lost, tries: Tries) -> Recovered:
        """The lost node goes first: the hunt would find it by its saved spec and try its zone first (a rerun's rule),
        and a node of that name in its zone is of no use. A node that is not lost (the service brought it back
        meanwhile) is kept, as lifecycle.recreate keeps one."""
        spec, movable = lost.spec, lost.movable
        if movable is None:
            return super().recover(lost, tries)
        existing = lost.api.get_node(spec.zone, spec.name)
        others = [] if existing is not None and not existing.lost else self._others(movable, spec)
        if not others:
            back = lifecycle.recreate(lost.api, spec, tries.progress, tries.terms(), _named(tries.naming))
            return Recovered(back, f"recreated in its own zone {spec.zone}")
        lifecycle.clear_lost(lost.api, spec, existing, tries.progress, tries.sleep)
        tries.say(f"elsewhere-first: hunting over {_count(others, 'other candidate')} before {spec.zone}, next: {others[0].zone}")
        own = Candidate(str(spec.accelerator_type), own_capacity(spec), spec.zone)
        return self._hunted(lost, [*others, own], tries, why=f"elsewhere-first ({spec.zone} last)", before="")


def strategy(recovery: Recovery | None, spec: NodeSpec) -> Strategy:
    """The strategy the recovery setting names; None: the default for the node's kind (Recovery.default_for)."""
    return STRATEGIES[recovery or Recovery.default_for(spec.capacity())]


def recover(lost: Lost, tries: Tries, recovery: Recovery | None = None) -> Recovered:
    """The lost node back by the strategy `recovery` names (None: its kind's default)."""
    return strategy(recovery, lost.spec).recover(lost, tries)


def _count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"

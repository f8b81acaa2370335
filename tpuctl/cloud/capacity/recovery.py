"""Babysit's recovery policy: where a lost node comes back — its own zone first, then the hunt.

Kept apart from the mechanism (lifecycle.recreate deletes the lost node and creates it from its saved spec; the hunt
tries one candidate after another), as SkyPilot keeps its recovery strategies apart from provisioning. The own zone
is tried first, as the node was (same type, same kind): its disks, reservation and the user's data path were chosen
for it. Only a stockout there — a CapacityError, of any kind the hunt knows — moves on, and only when the user gave
zones to hunt over (babysit's --zones or the zones setting); anything else stops as today, in one line. A node that
comes back in another zone has its saved spec moved with it, so every command finds it by name alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tpuctl.cloud import lifecycle, nodespec
from tpuctl.cloud.capacity.hunt import Candidate, hunt
from tpuctl.cloud.lifecycle import Ensured, Progress
from tpuctl.cloud.nodespec import NodeSpec
from tpuctl.cloud.tpu import NodeApi
from tpuctl.inputs.errors import CapacityError
from tpuctl.tpu import stockouts
from tpuctl.tpu.capacity import Capacity

# The hunt's candidates, best first; called only once the own zone stocked out (gathering offers reads every zone).
Candidates = Callable[[], Sequence[Candidate]]


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
    deadline_s: float = lifecycle.CREATE_DEADLINE_S,
    sleep: Callable[[float], None] = time.sleep,
    naming: Callable[[NodeSpec], None] = lambda spec: None,
) -> Recovered:
    """The lost node back from `spec`: in its own zone, else (a stockout there, `candidates` given) in the first
    candidate that holds; `naming` hears each spec before its create is sent (lifecycle.ensure). A queued resource,
    and a node named by --type/--topology, come back in their zone only: a queued request waits where it was placed,
    and the hunt's candidates are accelerator types."""
    try:
        ensured = lifecycle.recreate(api, spec, progress, deadline_s=deadline_s, sleep=sleep, naming=naming)
    except CapacityError as stockout:
        stockouts.remember(spec.project, spec.zone, spec.accelerator(), spec.capacity(), stockout.kind.name.lower())
        others = list(candidates()) if candidates is not None and not spec.queues() and spec.accelerator_type else []
        others = [c for c in others if (c.zone, c.accelerator_type, c.capacity) != (spec.zone, spec.accelerator_type, own_capacity(spec))]
        if not others:
            raise
        why = f"{spec.zone} has no capacity ({stockout.kind.value})"
        say(f"{why}; hunting over {len(others)} other candidate{'s' if len(others) != 1 else ''}, next: {others[0].zone}")
        try:
            done = hunt(api, spec, others, progress, say=say, runtime_given=True, create_deadline_s=deadline_s, sleep=sleep, naming=naming)
        except BaseException:
            nodespec.save(spec)  # a try of another kind in this zone overwrote it: recreate and babysit need the node's own
            raise
        moved = done.ensured.spec
        if moved.zone != spec.zone:
            nodespec.forget(spec)  # the old zone's spec: describe, ssh, launch --tpu and delete now find the new one alone
        tries = f" after {len(done.tried)} more stocked-out candidate{'s' if len(done.tried) != 1 else ''}" if done.tried else ""
        return Recovered(done.ensured, f"recreated in {moved.zone} as {done.candidate.capacity}: {why}{tries}")
    return Recovered(ensured, f"recreated in its own zone {spec.zone}")

"""A run's own TPU VM (`launch --new-tpu`): hunted and created for the run, recreated after a preemption, deleted at its end.

The pieces are the capacity issue's and babysit's, reused as they are: the candidates `tpuctl create --zones` ranks
(candidates.py), its hunt (hunt.py) and babysit's recovery policies (recovery.py: same-zone-first, elsewhere-first).
Its recreations have no limit of their own: each follows a preemption the launch's supervisor counted against the
run's --max-preemptions, the one budget of both. What is the run's own is the node's name and label (run_nodes: the run id, cut to Cloud's rules; the
full id in the description) and the one guard before every delete or recreate: the node must be the one the run's
record names AND carry the run's label, so a node the user made, or one another run made, is never touched.

What happens is told as typed events (`VmEvent`: Hunting, Naming, Creating, Provisioned, Recreating, Recreated,
Ended), values handed to the one sink the launch gives (launch/provisioning.py writes them into the run's timeline
and record: tpuctl/runs/ is not imported from here), and to the user one line at a time through `say`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from tpuctl.cloud.capacity import candidates as ranking
from tpuctl.cloud.capacity.hunt import Candidate, Chosen, HuntTerms, Tried, hunt
from tpuctl.cloud.capacity.prices import price_text
from tpuctl.cloud.capacity.recovery import Lost, Tries, own_capacity, recover
from tpuctl.cloud.nodes import lifecycle, nodespec
from tpuctl.cloud.nodes.creating import CREATE_DEADLINE_S, Naming
from tpuctl.cloud.nodes.health import condition
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value, owned_by
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.tpu.capacity import Recovery

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.prices import PriceBook
    from tpuctl.cloud.nodes.node import Node
    from tpuctl.cloud.nodes.tpu import TpuApi

Say = Callable[[str], None]


def node_name(run_id: str) -> str:
    """The VM's name: the run id as its label holds it (run_nodes.label_value: the id's readable head and its hash, at
    most 63 characters), which is also a valid TPU node id, so a user finds the run's VM by its run id."""
    return nodespec.check_name(label_value(run_id))


@dataclass(frozen=True)
class Hunting:
    """The hunt begins over these candidates, best first, for these types."""

    types: tuple[str, ...]
    tries: tuple[Candidate, ...]


@dataclass(frozen=True)
class Creating:
    """The service accepted this try (creating.Naming came before its request): the VM is this spec, at this list price
    (None: no SKU prices it) from the price book `note` describes."""

    spec: NodeSpec
    usd_per_hour: float | None
    note: str | None


@dataclass(frozen=True)
class Provisioned:
    """The VM is READY; `tried`: the candidates before it that did not hold."""

    spec: NodeSpec
    tried: tuple[Tried, ...]
    usd_per_hour: float | None


@dataclass(frozen=True)
class Recreating:
    """The VM was lost (`why`: its condition) and is being made again."""

    spec: NodeSpec
    why: str


@dataclass(frozen=True)
class Recreated:
    """The VM is READY again as this spec (its zone and kind may be new), at this list price."""

    spec: NodeSpec
    usd_per_hour: float | None
    note: str | None


@dataclass(frozen=True)
class Ended:
    """The run is done with its VM: deleted (the service accepted the delete), kept on purpose, or lost (gone without
    this delete, or a node of its name that does not carry the run's label: the run's own is gone)."""

    spec: NodeSpec
    how: Literal["deleted", "kept", "lost"]


VmEvent = Hunting | Naming | Creating | Provisioned | Recreating | Recreated | Ended
OnEvent = Callable[[VmEvent], None]


@dataclass(frozen=True)
class Wanted:
    """What the run asked for: the hunt's plan (types, kinds, zones), the image (given or tpuctl's default), and how a
    preempted VM comes back: where first, and how often (the run's --max-preemptions, said with each recreation)."""

    plan: ranking.Plan
    runtime_version: str | None  # None: each type's image from `images`, else its default (settings.default_runtime)
    max_preemptions: int
    recovery: Recovery | None = None  # None: the default for the lost VM's kind
    create_deadline_s: float = CREATE_DEADLINE_S
    images: Mapping[str, str] = field(default_factory=dict)  # each type's image, where the launch chose one (tfpair/choice.py)


class RunVm:
    """The VM of one run. `provision` makes it READY, `recreate` brings it back after a preemption, `delete` ends it."""

    def __init__(self, api: TpuApi, run_id: str, wanted: Wanted, on_event: OnEvent, say: Say, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.api, self.run_id, self.wanted, self.on_event, self.say, self.sleep = api, run_id, wanted, on_event, say, sleep
        self.name = node_name(run_id)
        self.spec: NodeSpec | None = None  # the node as it was last asked for: its zone, type and kind
        self.book: PriceBook | None = None
        self.recreated = 0
        self.unanswered = False  # a create request was sent and its reply not read yet: the node may still come

    def base(self, first: Candidate) -> NodeSpec:
        """The spec every try starts from: the run's label, the full run id in the description, the hunt it made."""
        plan = self.wanted.plan
        zones = "all" if plan.zones is None else ",".join(plan.zones)
        return NodeSpec(
            name=self.name,
            project=self.api.project,
            zone=first.zone,
            runtime_version=self.wanted.runtime_version or "",
            accelerator_type=first.accelerator_type,
            labels={LABEL_KEY: label_value(self.run_id)},
            description=f"tpuctl run {self.run_id}",
            hunt_zones=zones,
            hunt_capacity=",".join(str(c) for c in plan.capacities),
        )

    def provision(self) -> Node:
        """Hunt through the candidates (their prices said first) until one holds, and wait for it to be READY."""
        found = ranking.offers(self.api, self.wanted.plan, self.say)
        self.book = found.book
        tries, skipped = ranking.candidates(found, self.wanted.plan)
        if not tries:
            raise ranking.all_short(skipped) if skipped else TpuctlError(
                "no zone offers these types for these capacity kinds", hint="`tpuctl offers TYPE` lists what each zone offers", exit_code=FAILED
            )
        for skip in skipped:
            self.say(f"{skip.candidate}: {skip.why}")
        self.say(f"TPU VM {self.name} for this run: {len(tries)} candidate(s), best first, at list price ({found.book.describe()}): " + price_list(tries))
        self.on_event(Hunting(tuple(self.wanted.plan.types), tuple(tries)))
        terms = HuntTerms(self.wanted.runtime_version is not None, self.wanted.create_deadline_s, sleep=self.sleep, images=self.wanted.images)
        done = hunt(self.api, self.base(tries[0]), tries, _states(self.say, self.name), terms, say=self.say, heard=self._heard)
        spec = self._now(done.ensured.spec, unanswered=False)
        self.on_event(Provisioned(spec, tuple(done.tried), done.candidate.usd_per_hour))
        self.say(f"TPU VM {self.name} is READY in {spec.zone} ({done.candidate.capacity})")
        return done.ensured.node

    def _heard(self, event: Naming | Chosen) -> None:
        """A try's create events: its Naming (_naming), and its candidate Chosen once the service accepted it."""
        if isinstance(event, Naming):
            self._naming(event)
            return
        candidate = event.candidate
        self.on_event(Creating(self._now(event.spec, unanswered=False), candidate.usd_per_hour, self.book.describe() if self.book else None))
        self.say(f"creating TPU VM {self.name}: {candidate}, {price_text(candidate.usd_per_hour, '/h')}; waiting for it to be READY")

    def _now(self, spec: NodeSpec, *, unanswered: bool) -> NodeSpec:
        """The one place the VM's spec changes: as each create is named, accepted, or READY (`unanswered`: a create
        request was sent and its reply not read yet, so the node may still come)."""
        self.spec, self.unanswered = spec, unanswered
        return spec

    def down(self) -> str | None:
        """The node's condition when it cannot run workers (preempted, terminated, gone), else None."""
        assert self.spec is not None
        node = self.api.get_node(self.spec.zone, self.name)
        return condition(node) if node is None or node.lost else None

    def recreate(self, why: str) -> Node:
        """The lost node made again, by the run's recovery policy over its zones and kinds (recovery.py); its new zone,
        type and kind go to the log. A node that is not this run's is left alone. No count is kept here against a limit:
        the supervisor calls this once per preemption it counted, so --max-preemptions bounds both."""
        spec = self.spec
        assert spec is not None
        existing = self.api.get_node(spec.zone, self.name)
        if existing is not None and not owned_by(existing, self.run_id):
            raise TpuctlError(f"TPU VM {self.name} in {spec.zone} does not carry this run's label; tpuctl leaves it alone", exit_code=FAILED)
        self.recreated += 1
        self.say(f"TPU VM {self.name} is {why}; recreating it ({self.recreated}/{self.wanted.max_preemptions})")
        self.on_event(Recreating(spec, why))
        tries = Tries(_states(self.say, self.name), self.say, self.wanted.create_deadline_s, self.sleep, self._naming)
        back = recover(Lost(self.api, spec, self._elsewhere(spec)), tries, self.wanted.recovery)
        spec = self._now(back.ensured.spec, unanswered=False)
        usd = self.book.slice_price(spec.accelerator(), spec.zone, spec.capacity()) if self.book is not None else None
        self.on_event(Recreated(spec, usd, self.book.describe() if self.book is not None else None))
        self.say(f"TPU VM {self.name} is READY again: {back.line}")
        return back.ensured.node

    def _naming(self, event: Naming) -> None:
        """Before every create request, the first and each recreate's, in whichever zone: the service may make the node
        before its reply comes back, so a stop meanwhile (`delete`) and the record a killed launcher leaves (`tpuctl stop`)
        must already name the node where it is being made, not where it was."""
        self._now(event.spec, unanswered=True)
        self.on_event(event)

    def _elsewhere(self, spec: NodeSpec) -> Callable[[], list[Candidate]] | None:
        """Where the node may go once its own zone stocked out: the run's zones and kinds, its own type (the hosts the
        launch was planned for), its own kind first; gathered only then. None when the run named one zone."""
        plan = self.wanted.plan
        if (plan.zones is not None and len(plan.zones) < 2) or spec.accelerator_type is None:
            return None
        kinds = list(dict.fromkeys([own_capacity(spec), *plan.capacities]))
        again = replace(plan, types=[spec.accelerator_type], capacities=kinds)
        return lambda: ranking.ranked(self.api, again, self.say)

    def delete(self, recorded: str | None) -> str:
        """Delete the node if it is this run's: the one its record names (`recorded`) AND labelled for its run id. Waits
        until the service has accepted the delete; what happened, in one line."""
        spec = self.spec or self._saved()
        if spec is None:
            return f"no TPU VM was created for this run ({self.name})"
        if recorded != self.name:
            return f"TPU VM {self.name} in {spec.zone} is not this run's to delete (its record names another node): left as it is"
        node = self.api.get_node(spec.zone, self.name)
        if node is not None and not owned_by(node, self.run_id):
            # A node of that name without the run's label is another's: the run's own VM is gone, as `tpuctl stop`
            # (cli/runs.py) writes it too, so the record stops saying it may bill.
            self.on_event(Ended(spec, "lost"))
            return (
                f"TPU VM {self.name} in {spec.zone} is not this run's to delete (it does not carry the run's label): left as it is;"
                " the run's own VM is gone"
            )
        # The run's node goes with the queued resource that made it (a reserved=NAME or --queued kind), which would
        # otherwise stay SUSPENDED and hold quota; the launch waits only for the service to accept the delete.
        progress = _states(self.say, self.name)
        removed = lifecycle.remove(self.api, spec.zone, self.name, progress, queued_id=spec.queued_id(), wait=False)
        if not removed.found and self.unanswered:  # a stop cut the create off before its reply: the node may come yet
            removed = lifecycle.late(self.api, spec, progress, self.sleep, wait=False, forget=True)
            if not removed.found:  # the record keeps saying it may bill: `runs` shows it, `tpuctl stop` deletes it
                return f"no TPU VM {self.name} showed in {spec.zone}; should the service still make it, {lifecycle.delete_command(self.name, spec.zone)}"
        self.on_event(Ended(spec, "deleted" if removed.found else "lost"))
        if not removed.found:
            return f"TPU VM {self.name} in {spec.zone} is gone already"
        queued = f" and its queued resource ({removed.queued})" if removed.node and removed.queued else ""
        return f"deleting TPU VM {self.name}{queued} in {spec.zone}: the service accepted the delete"

    def _saved(self) -> NodeSpec | None:
        """The spec a create saved before it was told (a stop that came between the service's accept and the hunt's word)."""
        for zone in nodespec.saved_zones(self.api.project, self.name):
            return nodespec.load(self.api.project, zone, self.name)
        return None

    def keep(self, why: str) -> str:
        """Leave the node running, and say how to delete it."""
        spec = self.spec or self._saved()
        if spec is None:
            return f"no TPU VM was created for this run ({self.name})"
        if self.api.get_node(spec.zone, self.name) is None:  # a hunt that found nothing left nothing to keep
            self.on_event(Ended(spec, "lost"))
            return f"TPU VM {self.name} in {spec.zone} is gone already: nothing to keep"
        self.on_event(Ended(spec, "kept"))
        return f"kept TPU VM {self.name} in {spec.zone} ({why}); it bills until deleted: tpuctl delete {self.name} --zone {spec.zone}"


def price_list(tries: Sequence[Candidate], limit: int = 6) -> str:
    shown = ", ".join(f"{c} {price_text(c.usd_per_hour, '/h')}" for c in tries[:limit])
    return shown + (f", and {len(tries) - limit} more" if len(tries) > limit else "")


def _states(say: Say, name: str) -> Callable[[str, float], None]:
    """The create's and the recreate's progress: one line per new state, not one per poll."""
    seen = [""]

    def progress(state: str, elapsed: float) -> None:
        if state != seen[0]:
            seen[0] = state
            say(f"TPU VM {name}: {state} ({elapsed:.0f}s)")

    return progress

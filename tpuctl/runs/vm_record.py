"""The TPU VM a run ran on, as its record keeps it: one value (`VmRecord`), replaced whole at each step of the VM's life.

A `launch --tpu NAME` run keeps only what its cost needs (type, zone, kind, list price); a `launch --new-tpu` run's VM
has a life of its own, and its record follows it through explicit transitions, each a method that returns the next
value and raises `IllegalTransition` where the VM cannot be in that state (a READY VM is not named again, a deleted
one is not recreated):

    (none) -naming-> creating -ready-> ready -recreating-> recreating -ready-> ready
    creating | ready | recreating -ended-> deleted | kept | lost

`naming` comes before every create request (the node may exist from then on, so a record a killed launcher leaves
names it), `priced` once a try is accepted or a recreate is READY (its type, kind and list price). `lost`: the VM went
without tpuctl's delete (the service took it, or a node of its name no longer carries the run's label).

The record file keeps the fields it always had (`node_fate`: live, deleted or kept, what older records hold and older
tpuctl reads) and the state beside it (`node_state`); a record from before `node_state` reads its live VM as ready.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

NODE_LIVE, NODE_DELETED, NODE_KEPT = "live", "deleted", "kept"
NODE_FATES = (NODE_LIVE, NODE_DELETED, NODE_KEPT)
# What the launch does with its VM as the run ends, as asked: delete it, keep it (--keep), keep it if the run fails.
NODE_DELETE, NODE_KEEP, NODE_KEEP_ON_FAILURE = "delete", "keep", "keep-on-failure"
NODE_ENDS = (NODE_DELETE, NODE_KEEP, NODE_KEEP_ON_FAILURE)
MAX_PRICE = 1e6  # USD an hour: far above any slice's list price, low enough to catch a unit slip
MAX_COST = MAX_PRICE * 24 * 366 * 10  # USD: ten years at MAX_PRICE


class NodeState(enum.Enum):
    """Where a VM tpuctl created for a run is in its life; its value is the record's `node_state` word."""

    CREATING = "creating"  # a create request for it was sent (it may exist from now on), not READY yet
    READY = "ready"
    RECREATING = "recreating"  # lost, being made again (in its own zone or another)
    DELETED = "deleted"  # tpuctl deleted it (the service accepted the delete)
    KEPT = "kept"  # left running on purpose (--keep, --keep-on-failure)
    LOST = "lost"  # gone without tpuctl's delete

    @property
    def fate(self) -> str:
        """The record's node_fate word: live while the run may still delete it, else deleted or kept."""
        return NODE_LIVE if self in LIVE else NODE_KEPT if self is NodeState.KEPT else NODE_DELETED


LIVE = frozenset({NodeState.CREATING, NodeState.READY, NodeState.RECREATING})
ENDS = frozenset({NodeState.DELETED, NodeState.KEPT, NodeState.LOST})
_OF_FATE = {NODE_LIVE: NodeState.READY, NODE_DELETED: NodeState.DELETED, NODE_KEPT: NodeState.KEPT}  # a record from before node_state
STATES = tuple(state.value for state in NodeState)


class IllegalTransition(ValueError):
    """A step the VM's life does not have (a bug in its owner, never the user's doing)."""


@dataclass(frozen=True)
class VmRecord:
    """The TPU VM a run runs on: what its cost needs and, for one tpuctl created (`launch --new-tpu`), its name, its
    state and what the launch does with it at the end. `tpu`, `zone` and `capacity` describe the current VM (after a
    recreate in another zone, the new one)."""

    tpu: str | None = None  # its accelerator type: v5litepod-16
    zone: str | None = None
    capacity: str | None = None  # on-demand, spot, preemptible or reserved (billed by the reservation: no list price)
    price_per_hour: float | None = None  # its slice's list price in USD as the run started; None: no SKU prices it
    price_note: str | None = None  # where that price came from (prices.PriceBook.describe())
    created_node: str | None = None  # the VM tpuctl created for this run, in `project` and `zone`: the only node a run may delete
    project: str | None = None
    state: NodeState | None = None  # None: a VM the run did not create (--tpu NAME), or none named yet
    node_end: str | None = None  # NODE_ENDS: what the launch will do with it as the run ends (None: a record from before it was kept)
    # A run whose VM was recreated at another price (another kind or zone): what its attempts on the earlier VMs cost,
    # each at its own VM's list price (None: one of them had none), and when price_per_hour began to apply.
    cost_before: float | None = None  # USD
    priced_since: float | None = None  # wall clock; None: since the run started

    @property
    def node_fate(self) -> str | None:
        return self.state.fate if self.state is not None else None

    @property
    def bills(self) -> bool:
        """Whether a VM this run created may still exist and bill: one that is neither deleted, kept nor lost."""
        return self.created_node is not None and self.state in LIVE

    def naming(self, node: str, project: str, zone: str, at_end: str) -> VmRecord:
        """A create request for `node` in `zone` is about to be sent (the first try, the hunt's next, a recreate's)."""
        self._must((None, NodeState.CREATING, NodeState.RECREATING), "named for a create")
        state = NodeState.RECREATING if self.state is NodeState.RECREATING else NodeState.CREATING
        return replace(self, created_node=node, project=project, zone=zone, node_end=at_end, state=state)

    def priced(self, tpu: str, zone: str, capacity: str, usd_per_hour: float | None, note: str | None) -> VmRecord:
        """The VM being made is this type and kind in this zone, at this list price (a try the service accepted)."""
        self._must((NodeState.CREATING, NodeState.RECREATING), "priced")
        return replace(self, tpu=tpu, zone=zone, capacity=capacity, price_per_hour=usd_per_hour, price_note=note)

    def ready(self) -> VmRecord:
        self._must((NodeState.CREATING, NodeState.RECREATING), "READY")
        return replace(self, state=NodeState.READY)

    def recreating(self, cost_so_far: float | None, now: float) -> VmRecord:
        """The READY VM was lost: the attempts on it are priced at its price (`cost_so_far`, the run's cost until `now`);
        the next VM's price, which a recreate may change, applies from `now`."""
        self._must((NodeState.READY,), "recreated")
        return replace(self, state=NodeState.RECREATING, cost_before=cost_so_far, priced_since=now)

    def ended(self, end: NodeState) -> VmRecord:
        """The run is done with its VM: deleted, kept on purpose, or found gone (lost)."""
        if end not in ENDS:
            raise IllegalTransition(f"{end.value} is no end of a run's VM")
        self._must(tuple(LIVE), end.value)
        return replace(self, state=end)

    def _must(self, sources: tuple[NodeState | None, ...], becoming: str) -> None:
        if self.state not in sources:
            now = self.state.value if self.state is not None else "not named yet"
            name = f" {self.created_node}" if self.created_node else ""
            raise IllegalTransition(f"the run's VM{name} cannot be {becoming}: it is {now}")

    def to_json(self) -> dict[str, Any]:
        """The record file's fields, as records always kept them (node_fate), with the state beside them."""
        said = {"node_fate": self.node_fate, "node_state": self.state.value if self.state is not None else None}
        return {name: said[name] if name in said else getattr(self, name) for name in VM_NAMES}

    @classmethod
    def from_fields(cls, values: tuple[Any, ...]) -> VmRecord:
        """The value from the record file's fields in VM_NAMES' order, their JSON types already checked; ValueError for
        one that no record holds."""
        tpu, zone, capacity, price, note, node, project, fate, end, before, since, state = values
        if fate is not None and fate not in NODE_FATES:
            raise ValueError("node_fate is not one of " + ", ".join(NODE_FATES) + " for a created_node (and null without one)")
        if state is not None and (state not in STATES or NodeState(state).fate != fate):
            raise ValueError(f"node_state is not one of {', '.join(STATES)} that agrees with node_fate")
        now = NodeState(state) if state is not None else _OF_FATE.get(fate) if fate is not None else None
        record = cls(tpu, zone, capacity, price, note, node, project, now, end, before, since)
        problem = record._problem()
        if problem:
            raise ValueError(problem)
        return record

    def _problem(self) -> str | None:
        if self.price_per_hour is not None and not 0 <= self.price_per_hour <= MAX_PRICE:  # NaN fails both
            return f"price_per_hour is not a price in USD an hour (0 to {MAX_PRICE:g})"
        if self.cost_before is not None and not 0 <= self.cost_before <= MAX_COST:
            return f"cost_before is not a cost in USD (0 to {MAX_COST:g})"
        if self.priced_since is not None and not 0 <= self.priced_since < 1e11:  # a time, as records.RunRecord's
            return "priced_since is not a time"
        if any(text is not None and not (len(text) <= 400 and text.isprintable()) for text in (self.tpu, self.zone, self.capacity, self.price_note)):
            return "tpu, zone, capacity or price_note is not one printable line"
        if any(text is not None and not (len(text) <= 200 and text.isprintable()) for text in (self.created_node, self.project)):
            return "created_node or project is not one printable line"
        if (self.state is None) != (self.created_node is None):
            return "node_fate is not one of " + ", ".join(NODE_FATES) + " for a created_node (and null without one)"
        if self.node_end is not None and (self.created_node is None or self.node_end not in NODE_ENDS):
            return "node_end is not one of " + ", ".join(NODE_ENDS) + " for a created_node (and null without one)"
        return None


# The record file's fields of the VM part, in from_fields' order, and the JSON types each may have (compared exactly).
VM_KINDS: dict[str, tuple[type, ...]] = {
    "tpu": (str, type(None)), "zone": (str, type(None)), "capacity": (str, type(None)), "price_per_hour": (int, float, type(None)),
    "price_note": (str, type(None)), "created_node": (str, type(None)), "project": (str, type(None)), "node_fate": (str, type(None)),
    "node_end": (str, type(None)), "cost_before": (int, float, type(None)), "priced_since": (int, float, type(None)),
    "node_state": (str, type(None)),
}  # fmt: skip
VM_NAMES = tuple(VM_KINDS)
NO_VM_JSON: dict[str, None] = dict.fromkeys(VM_NAMES)


def node_end(keep: bool, keep_on_failure: bool) -> str:
    """What the launch's end does with the run's VM, as `launch --keep` / `--keep-on-failure` ask (NODE_ENDS)."""
    return NODE_KEEP if keep else NODE_KEEP_ON_FAILURE if keep_on_failure else NODE_DELETE

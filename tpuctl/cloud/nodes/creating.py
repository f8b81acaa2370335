"""One create as values: what it is asked (`Terms`), and what it tells as it goes (`Naming`, `Accepted`).

`lifecycle.ensure` takes the terms whole and hands each event to one sink, so whoever must know (a run's record,
`tpuctl create`'s price line) hears them without a callback per moment threaded through every layer between.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tpuctl.cloud.nodes.nodespec import NodeSpec

CREATE_DEADLINE_S = 1800.0  # the create-deadline setting's default (tpuctl/settings/cloud.py says why)


@dataclass(frozen=True)
class Terms:
    """How one create goes.

    `runtime_given`: the spec's runtime is the user's; without it, it is only tpuctl's default, which changes between
    releases and with the accelerator type, so an existing node's own runtime is then the one asked for, not a conflict.
    `deadline_s`: how long one create may stay CREATING (a node reused waits for READY that long too);
    `queued_deadline_s`: how long a queued request may wait (None: as long as the queue keeps it, a plain `create
    --queued`; a hunt bounds it, or a flex-start first would never reach the next kind). Without `wait`, ensure returns
    once the service accepted the create."""

    wait: bool = True
    runtime_given: bool = True
    deadline_s: float = CREATE_DEADLINE_S
    queued_deadline_s: float | None = None
    sleep: Callable[[float], None] = time.sleep


AS_ASKED = Terms()  # a plain create: waited for, the runtime the user's, the default deadline


@dataclass(frozen=True)
class Naming:
    """A create request for this spec goes out next: the service may make the node before its reply comes back, so
    whoever must delete it after a stop or a kill (a run's record) learns its name and zone first."""

    spec: NodeSpec


@dataclass(frozen=True)
class Accepted:
    """The service accepted the create of this spec, which is saved: the wait for READY comes next (not for a reused
    node or a refused one). `create` says the price here."""

    spec: NodeSpec


Heard = Callable[[Naming | Accepted], None]


def deaf(event: Naming | Accepted) -> None:
    """A sink for a caller that needs to hear nothing."""

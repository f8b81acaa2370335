"""A JAX run's processes meet in `jax.distributed.initialize()`: one that never arrives is named, not waited for.

Every process of a JAX cluster blocks in `initialize()` until all have
connected to the coordinator (jax/_src/distributed.py; its default
initialization_timeout is 300 s), and on a TPU slice the TPU backend waits for
every host too, saying only "TPU backend initialization is taking more than
60.0 seconds. Did you run your code on all TPU hosts?" without naming one. Each
tpuctl worker says on its control channel when its script enters `initialize()`
("joining") and when it returns ("joined", tpuctl/runtime/jax_run.py). Once one
process waits there, the others have JOIN_WAIT_S (or --start-timeout, if
shorter) to arrive; past that the launch stops, naming each one that did not.
"""

from __future__ import annotations

import time

from tpuctl.launch.process.events import Joining

# JAX's TPU backend warns after 60 s that a host is missing (its message above): past that nobody is coming.
JOIN_WAIT_S = 60.0
JOINING = "joining"
JOINED = "joined"


class JoinWatch:
    """Who arrived in initialize() and when; the deciding thread alone uses it."""

    def __init__(self, count: int, start_timeout: float) -> None:
        self.count = count
        self.wait_s = min(JOIN_WAIT_S, start_timeout)
        self.arrived: set[int] = set()
        self.first_at: float | None = None
        self.formed = False

    def take(self, event: Joining) -> None:
        if event.joined:
            self.formed = True  # initialize() returns in a process only once every process has connected
            return
        self.arrived.add(event.position)
        if self.first_at is None:
            self.first_at = time.monotonic()

    def due(self) -> float | None:
        """When the missing ones are late, while someone waits for them."""
        if self.formed or self.first_at is None or len(self.arrived) >= self.count:
            return None
        return self.first_at + self.wait_s

    def late(self, now: float) -> list[int]:
        due = self.due()
        return [] if due is None or now < due else [p for p in range(self.count) if p not in self.arrived]

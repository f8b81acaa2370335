"""The capacity kinds a TPU slice can be had as, and `--capacity`'s spelling of them.

One vocabulary for `create`, `offers`, the price book, the stockout memory and a hunt: a stockout is
remembered per kind and a hunt tries kinds in the user's order, so every layer must name them alike.
The kinds are Cloud TPU's (https://cloud.google.com/tpu/docs/about-tpu-capacity): on-demand, spot
(`schedulingConfig.spot`), legacy preemptible, a reservation (`--reserved`, optionally one named
reservation) and flex-start (a queued resource with a maximum run duration, deleted when it ends).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.parse import shown

ON_DEMAND, SPOT, PREEMPTIBLE, RESERVED, FLEX_START = "on-demand", "spot", "preemptible", "reserved", "flex-start"
KINDS = (ON_DEMAND, SPOT, PREEMPTIBLE, RESERVED, FLEX_START)
_HINT = "e.g. --capacity spot,on-demand, --capacity reserved=my-reservation or --capacity flex-start"
_RESERVATION = 200  # a reservation's name or path: longer is not one


@dataclass(frozen=True)
class Capacity:
    """One capacity kind as asked for; `reservation` only for RESERVED, None meaning any reservation the project has."""

    kind: str
    reservation: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}={self.reservation}" if self.reservation else self.kind


def parse_capacities(text: str, allowed: tuple[str, ...] = KINDS) -> list[Capacity]:
    """A `--capacity` value, KIND[,KIND...] in the user's order (repeats dropped), each one of `allowed`."""
    found: list[Capacity] = []
    for part in text.split(","):
        kind, named, reservation = part.strip().partition("=")
        kind = kind.strip().lower()
        if kind not in allowed:
            raise TpuctlError(f"--capacity: {shown(part.strip())} is not a capacity kind ({', '.join(allowed)})", hint=_HINT)
        if named and (kind != RESERVED or not reservation.strip() or len(reservation) > _RESERVATION or not reservation.isprintable()):
            raise TpuctlError(f"--capacity: {shown(part.strip())}: only reserved takes a name (reserved=NAME)", hint=_HINT)
        capacity = Capacity(kind, reservation.strip() or None)
        if capacity not in found:
            found.append(capacity)
    return found

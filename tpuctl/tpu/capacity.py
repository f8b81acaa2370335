"""The capacity kinds a TPU slice can be had as, and `--capacity`'s spelling of them.

One vocabulary for `create`, `offers`, the price book, the stockout memory and a hunt: a stockout is
remembered per kind and a hunt tries kinds in the user's order, so every layer must name them alike.
The kinds are Cloud TPU's (https://cloud.google.com/tpu/docs/about-tpu-capacity): on-demand, spot
(`schedulingConfig.spot`), legacy preemptible, a reservation (`--reserved`, optionally one named
reservation) and flex-start (a queued resource with a maximum run duration, deleted when it ends).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.parse import shown

ON_DEMAND, SPOT, PREEMPTIBLE, RESERVED, FLEX_START = "on-demand", "spot", "preemptible", "reserved", "flex-start"
KINDS = (ON_DEMAND, SPOT, PREEMPTIBLE, RESERVED, FLEX_START)
_EXAMPLES = ("--capacity spot,on-demand", "--capacity reserved=my-reservation", "--capacity flex-start")
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
    examples = [example for example in _EXAMPLES if FLEX_START in allowed or FLEX_START not in example]  # none it refuses
    hint = f"e.g. {', '.join(examples[:-1])} or {examples[-1]}"
    for part in text.split(","):
        kind, named, reservation = part.strip().partition("=")
        kind = kind.strip().lower()
        if kind not in allowed:
            raise TpuctlError(f"--capacity: {shown(part.strip())} is not a capacity kind ({', '.join(allowed)})", hint=hint)
        if named and (kind != RESERVED or not reservation.strip() or len(reservation) > _RESERVATION or not reservation.isprintable()):
            raise TpuctlError(f"--capacity: {shown(part.strip())}: only reserved takes a name (reserved=NAME)", hint=hint)
        capacity = Capacity(kind, check_reservation(reservation.strip(), "--capacity reserved=") if named else None)
        if capacity not in found:
            found.append(capacity)
    return found


# Flex-start runs for at most 7 days (https://cloud.google.com/tpu/docs/request-using-flex-start, "Limitations");
# the queued resource carries it as runDuration.maxRunDuration (the v2alpha1 API's RunDuration).
MAX_RUN_S = 7 * 86400
_RUN_PART = re.compile(r"([0-9]{1,7})([dhms])")
_RUN_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# gcloud's spelling of a reservation (`queued-resources create --reservation`): a short name, or the full name.
_SHORT_RESERVATION = re.compile(r"[a-zA-Z0-9-]{1,63}\Z")
_FULL_RESERVATION = re.compile(r"projects/[a-z0-9.:-]{1,100}/locations/[a-z0-9-]{1,60}/reservations/[a-zA-Z0-9-]{1,63}\Z")


def run_duration_s(text: str) -> int:
    """`--max-run-duration` (2d, 36h, 1d12h, 90m) in seconds, within flex-start's limit of 7 days."""
    shown_text = shown(text.strip())
    compact = text.strip().lower()
    parts = _RUN_PART.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise TpuctlError(f"--max-run-duration {shown_text} is not a duration", hint="e.g. 2d, 36h or 1d12h")
    seconds = sum(int(number) * _RUN_UNIT_S[unit] for number, unit in parts)
    if seconds <= 0:
        raise TpuctlError(f"--max-run-duration {shown_text} is no time at all", hint="e.g. 2d, 36h or 1d12h")
    if seconds > MAX_RUN_S:
        raise TpuctlError(
            f"--max-run-duration {shown_text} is more than flex-start's limit of 7 days",
            hint="a flex-start slice runs at most 7d; save checkpoints and queue another for longer work",
        )
    return seconds


def reservation_zone(reservation: str | None) -> str | None:
    """The zone a full reservation name (projects/P/locations/ZONE/reservations/R) lies in; None for a short name:
    a reservation holds capacity in its own zone only, so a hunt asks for it there alone."""
    if reservation is None or not _FULL_RESERVATION.match(reservation):
        return None
    return reservation.split("/")[3]


def reservation_name(project: str, zone: str, reservation: str | None) -> str:
    """The queued resource's `reservationName`: as gcloud builds it, the full name of the named reservation
    (a short name is taken as one in the node's project and zone), or `.../reservations/-` for any of the project's."""
    if reservation is None:
        return f"projects/{project}/locations/{zone}/reservations/-"
    return check_reservation(reservation) if "/" in reservation else f"projects/{project}/locations/{zone}/reservations/{check_reservation(reservation)}"


def check_reservation(reservation: str, flag: str = "--reservation ") -> str:
    """A reservation's name as gcloud takes it, or one line saying it is none."""
    if _FULL_RESERVATION.match(reservation) or _SHORT_RESERVATION.match(reservation):
        return reservation
    raise TpuctlError(
        f"{flag}{shown(reservation)} is not a reservation's name",
        hint="a name (letters, digits, hyphens) or projects/P/locations/ZONE/reservations/NAME",
    )


TAKEN_BACK = (SPOT, PREEMPTIBLE)  # the kinds the service preempts (https://cloud.google.com/tpu/docs/spot)


class Recovery(str, enum.Enum):
    """Where a lost node is made again first (the recovery setting, babysit's and `launch --new-tpu`'s --recovery)."""

    SAME_ZONE_FIRST = "same-zone-first"
    ELSEWHERE_FIRST = "elsewhere-first"

    @classmethod
    def default_for(cls, kind: str) -> Recovery:
        """Elsewhere first for a node its zone takes back (spot, preemptible), its own zone first for any other."""
        return cls.ELSEWHERE_FIRST if kind in TAKEN_BACK else cls.SAME_ZONE_FIRST

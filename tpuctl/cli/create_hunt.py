"""`tpuctl create` across zones, capacity kinds and types: which create is a hunt, its candidates, its report.

The candidates are `gather()`'s offers in `rank()`'s order, the order `tpuctl offers` prints, so what offers shows
is what create tries (docs/capacity.md, How tpuctl chooses). A create that names one zone, one type and one kind
of today's flags (`--zone`, `--spot`, `--preemptible`) is no hunt: node_ops keeps that path as it always was.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from tpuctl.cli.cloud_options import resolve, tpu_api
from tpuctl.cli.display import StatusLine
from tpuctl.cloud.capacity.candidates import Plan, Skipped, all_short, offers
from tpuctl.cloud.capacity.candidates import candidates as find_candidates
from tpuctl.inputs.errors import TpuctlError
from tpuctl.tpu.capacity import FLEX_START, ON_DEMAND, PREEMPTIBLE, RESERVED, SPOT, Capacity

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.gather import Found
    from tpuctl.cloud.capacity.hunt import Candidate, Hunted, Tried
    from tpuctl.cloud.nodes.nodespec import NodeSpec

_CLOUD = ("project", "credentials", "access_token_file")


def plan(flags: dict[str, Any], zones: str | None, capacity: str | None, hunt_timeout: int | None) -> Plan | None:
    """The hunt this create asks for, or None for a plain create in one zone (`flags` then carry its kind)."""
    from tpuctl.cloud.capacity.candidates import parse_types
    from tpuctl.cloud.nodes import nodespec
    from tpuctl.settings.cloud import zones_of
    from tpuctl.tpu.capacity import parse_capacities

    if zones and flags["zone"]:
        raise TpuctlError("give --zone or --zones, not both", hint="--zone Z creates in Z alone; --zones hunts across zones")
    named = _named(flags)
    flex = flags["flex_start"] or any(part.strip().lower() == FLEX_START for part in (capacity or "").split(","))
    # A run duration without a kind flag may be for the capacity setting's flex-start: checked again once it is read.
    setting_may_flex = flags["max_run_duration"] is not None and not (capacity or named)
    kind_flags = (flags["spot"], flags["preemptible"], flags["reserved"], flags["reservation"])
    nodespec.check_kind(*kind_flags, flex or setting_may_flex, flags["max_run_duration"], flags["queued"], flags["valid_until"])
    if capacity and named:
        raise TpuctlError("give --capacity or --spot/--preemptible/--reserved/--flex-start, not both", hint="--spot is --capacity spot")
    resolved = resolve(**{key: flags[key] for key in (*_CLOUD, "zone")}, zones=zones, capacity=capacity)
    capacities = [named] if named else parse_capacities(resolved.get("capacity") or ON_DEMAND)
    if setting_may_flex or (not named and not capacity):
        flex = any(c.kind == FLEX_START for c in capacities)
        nodespec.check_kind(*kind_flags, flex, flags["max_run_duration"], flags["queued"], flags["valid_until"])
    by_type = bool(flags["config_type"] or flags["topology"])
    text = "" if by_type else flags["accelerator_type"] or resolved.require("accelerator-type")
    types = parse_types(text) if "," in text else [text.strip()] if text else []  # one type: from_flags checks it as always
    across = resolved.given("zones") and not flags["zone"]
    if not (across or len(types) > 1 or len(capacities) > 1 or hunt_timeout):
        if not named:  # the capacity setting's one kind, as create's kind flags would say it
            kind, reservation = capacities[0].kind, capacities[0].reservation
            flags.update(spot=kind == SPOT, preemptible=kind == PREEMPTIBLE, reserved=kind == RESERVED, flex_start=kind == FLEX_START)
            flags["reservation"] = flags["reservation"] or reservation
        return None
    if flags["reservation"] and not named:
        raise TpuctlError("--reservation needs --reserved", hint="in a hunt, name it in the kind: --capacity reserved=NAME")
    if by_type:
        raise TpuctlError("--type/--topology name one slice in one zone", hint="a hunt takes --accelerator-type T[,T2...]")
    where = zones_of(resolved.require("zones")) if across else [resolved.zone]
    return Plan(types, capacities, where, resolved, float(hunt_timeout) if hunt_timeout else None)


def _named(flags: dict[str, Any]) -> Capacity | None:
    """The one kind create's kind flags name (nodespec.from_flags refuses several, and their own flags without them)."""
    for flag, kind in (("spot", SPOT), ("preemptible", PREEMPTIBLE), ("reserved", RESERVED), ("flex_start", FLEX_START)):
        if flags[flag]:
            return Capacity(kind, flags["reservation"] if kind == RESERVED else None)
    return None


def run(name: str, hunt_plan: Plan, flags: dict[str, Any], no_wait: bool, as_json: bool, settle: Callable[[], None], jax: bool = False) -> None:
    """Gather the offers, hunt through them, and report where the node landed and what was tried (`settle` first:
    signals.as_interrupt); `jax`: each type's JAX image where no layer names a runtime version."""
    from tpuctl.cloud.capacity.hunt import Chosen, HuntStopped, HuntTerms, hunt, spec_for
    from tpuctl.cloud.nodes import nodespec
    from tpuctl.tpu.software import jax_image

    resolved = hunt_plan.resolved
    api = tpu_api(resolved)
    began = time.monotonic()
    with _listing_bound(hunt_plan.timeout_s):
        found = offers(api, hunt_plan, _note)
    candidates, skipped = find_candidates(found, hunt_plan)
    if not candidates and skipped:
        raise all_short(skipped)
    if not candidates:
        raise TpuctlError("no zone offers these types for these capacity kinds", hint="`tpuctl offers TYPE` lists what each zone offers")
    if flags["queued"] and len(candidates) > 1:
        click.echo(f"tpuctl: a queued resource waits in one zone: queuing in {candidates[0].zone}, the best of {len(candidates)} candidates", err=True)
        candidates = candidates[:1]
    cloud = {key: flags[key] for key in _CLOUD}
    rest = {key: flags[key] for key in ("runtime_version", "queued", "valid_until", "labels", "network", "subnetwork", "service_account", "startup_script")}
    flex = any(c.kind == FLEX_START for c in hunt_plan.capacities)  # its run duration is checked, and kept by its tries only
    base, own = nodespec.from_flags(name, accelerator_type=hunt_plan.types[0], config_type=None, topology=None, spot=False, preemptible=False,
                                    flex_start=flex, max_run_duration=flags["max_run_duration"], zone=candidates[0].zone, **rest, **cloud)  # fmt: skip
    # Kept in the saved spec: babysit, recreating the node, hunts where and as this create did.
    zones = "all" if hunt_plan.zones is None else ",".join(hunt_plan.zones)
    base = replace(base, hunt_zones=zones, hunt_capacity=",".join(str(c) for c in hunt_plan.capacities))
    given = own.given("runtime-version")
    listed: dict[str, object] = {}

    def price(event: object) -> None:
        from tpuctl.cli.created import list_price

        if isinstance(event, Chosen):  # the service accepted this candidate's create: its price line, before the wait
            listed["price"] = list_price(spec_for(base, event.candidate, given), found.book)

    def say(line: str) -> None:
        click.echo(f"tpuctl: {line}", err=True)

    try:
        with StatusLine(f"creating {name}") as progress:
            images = {} if given or not jax else {t: jax_image(t) for t in hunt_plan.types}
            terms = HuntTerms(given, float(resolved.require("create-deadline")), hunt_plan.timeout_s, time.monotonic() - began, wait=not no_wait, images=images)
            done = hunt(api, base, candidates, progress, terms, say=say, heard=price)
    except TpuctlError as stopped:
        if as_json:
            tried = _tries(stopped.tried) if isinstance(stopped, HuntStopped) else []
            click.echo(json.dumps({"name": name, "created": False, "error": stopped.message, "hunt": {"tries": tried, "skipped": _skips(skipped)}}, indent=2))
        raise
    settle()
    _report(done, found, listed.get("price"), no_wait, as_json, skipped)


def _listing_bound(timeout_s: float | None) -> AbstractContextManager[object]:
    """--hunt-timeout bounds the listing of the offers as well as the tries: every request of the listing ends by then.
    Not the tries' requests: a try cut short at the bound still deletes what it left (lifecycle.attempt)."""
    from tpuctl.cloud.plumbing import retry

    return nullcontext() if timeout_s is None else retry.limited(timeout_s, "--hunt-timeout", wall=True)


def _tries(tried: list[Tried], done: Hunted | None = None) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [
        {"zone": t.candidate.zone, "acceleratorType": t.candidate.accelerator_type, "capacity": str(t.candidate.capacity), "result": t.why,
         "seconds": round(t.seconds, 3)}
        for t in tried
    ]  # fmt: skip
    if done is not None:
        c = done.candidate
        result = "created" if done.ensured.created else "reused"
        rows.append({"zone": c.zone, "acceleratorType": c.accelerator_type, "capacity": str(c.capacity), "result": result, "seconds": None})
    return rows


def _skips(skipped: list[Skipped]) -> list[dict[str, object]]:
    return [
        {"zone": s.candidate.zone, "acceleratorType": s.candidate.accelerator_type, "capacity": str(s.candidate.capacity), "result": s.why}
        for s in skipped
    ]


def _report(done: Hunted, found: Found, price: object, no_wait: bool, as_json: bool, skipped: list[Skipped]) -> None:
    from tpuctl.cli.created import report
    from tpuctl.cloud.capacity.prices import price_text

    spec: NodeSpec = done.ensured.spec
    if as_json:
        body = {"name": spec.name, "zone": spec.zone, "acceleratorType": spec.accelerator(), "capacity": str(done.candidate.capacity)}
        hunted = {"tries": _tries(done.tried, done), "skipped": _skips(skipped), "changed": done.changed}
        click.echo(json.dumps({**body, "created": done.ensured.created, "state": done.ensured.node.state, "listPrice": price, "hunt": hunted}, indent=2))
        return
    report(done.ensured, no_wait)
    usd = done.candidate.usd_per_hour
    cost = f"{price_text(usd)}/h list price ({found.book.describe()})" if usd is not None else "no list price"
    click.echo(f"  {done.candidate.capacity} in {spec.zone}, {cost}; try {len(done.tried) + 1} of the hunt")
    for tried in done.tried:
        click.echo(f"  tried {tried.candidate}: {tried.why}")
    for skip in skipped:
        click.echo(f"  {skip.candidate}: {skip.why}")
    if done.changed:
        click.echo(f"  fallback to {spec.accelerator_type}: {', '.join(done.changed)}")


def ranked(hunt_plan: Plan) -> list[Candidate]:
    """The plan's candidates, best first (tpuctl/cloud/capacity/candidates.py), the API client made from its settings."""
    from tpuctl.cloud.capacity.candidates import ranked as ranked_with

    return ranked_with(tpu_api(hunt_plan.resolved), hunt_plan, _note)


def _note(line: str) -> None:
    click.echo(f"tpuctl: {line}", err=True)

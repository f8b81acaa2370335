"""`tpuctl babysit`: keep a (spot) TPU VM alive and a command running on it (tpuctl.cloud.nodes.babysit).

The loop is kept as a run (tpuctl.runs.recorded): `tpuctl runs` lists it, `tpuctl stop` stops
it; with --detach it goes on in a process of its own (tpuctl.runs.detach), as `launch --detach` does.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import click

from tpuctl.cli.cloud_options import project_options_each_call, resolve, tpu_api, zone_option
from tpuctl.cli.display import StatusLine
from tpuctl.cloud.capacity.recovery import DEFAULTS
from tpuctl.cloud.nodes.babysit import DEFAULT_MAX_RECREATES

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.candidates import Plan
    from tpuctl.cloud.capacity.recovery import Candidates
    from tpuctl.cloud.nodes.nodespec import NodeSpec
    from tpuctl.runs.recorded import Recorded
    from tpuctl.settings.cloud import Settings


def _note(message: str) -> None:
    click.echo(f"babysit: {message}", err=True)


@click.command("babysit")
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@project_options_each_call
@zone_option
@click.option(
    "--zones",
    metavar="all|Z1,Z2,...",
    help="When the node's own zone has no capacity, hunt across these zones (all: every zone), best first as `tpuctl offers` ranks [config: zones].",
)
@click.option(
    "--capacity",
    metavar="KIND[,KIND]",
    help="Capacity kinds the hunt may try after the node's own, in your order: on-demand, spot, preemptible, reserved[=NAME] [config: capacity].",
)
@click.option(
    "--recovery",
    metavar="POLICY",
    help="Where a lost node is made again first when it may go elsewhere: same-zone-first (its own zone, then the hunt) or "
    f"elsewhere-first (the hunt, its own zone last) [config: recovery; default: {DEFAULTS}].",
)
@click.option("--interval", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds between checks of the node.")
@click.option(
    "--max-recreates",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_RECREATES,
    show_default=True,
    help="Give up after this many recreations (the one limit: each lost node spends one).",
)
@click.option("--detach", is_flag=True, help="Babysit in a process of its own that outlives this terminal; print its run id and return.")
def babysit(
    name: str,
    command: tuple[str, ...],
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    zones: str | None,
    capacity: str | None,
    recovery: str | None,
    interval: float,
    max_recreates: int,
    detach: bool,
) -> None:
    """Watch TPU VM NAME; when it is PREEMPTED, TERMINATED or gone, recreate it and rerun COMMAND.

    Put COMMAND after `--`. It runs on this machine, first once the node is
    READY, then again after every recreation. Babysitting ends with the
    command's exit status when it ends on a healthy node, or with 130 on Ctrl-C,
    SIGTERM or SIGHUP. Without a command, it watches until then. However it ends,
    the command and everything it started are stopped.

    A lost node comes back from its saved spec (same type, same kind). Where
    --zones/--capacity (or the zones/capacity settings) are given, or the node's
    create hunted (its saved spec keeps where and how), it may come back
    elsewhere, hunted as `tpuctl create --zones` hunts: --recovery
    same-zone-first tries its own zone first, elsewhere-first the others first
    and its own zone last (the default for spot and preemptible nodes). A node
    recreated in another zone is found there by name alone, and COMMAND is rerun
    against it (docs/capacity.md).

    Babysitting is a run of its own: `tpuctl runs` lists it, `tpuctl stop RUN`
    stops it. With --detach it survives the terminal: its console goes to the
    run's folder (`tpuctl attach RUN` follows it).
    """
    from tpuctl.cloud.capacity import recovery as policies
    from tpuctl.cloud.nodes import babysit as sitter
    from tpuctl.cloud.nodes import nodespec
    from tpuctl.cloud.nodes.node_lookup import landed_zone
    from tpuctl.launch.secret_values import shown_args
    from tpuctl.runs.recorded import Recorded
    from tpuctl.runs.records import BABYSIT

    nodespec.check_name(name)
    given = {"zones": zones, "capacity": capacity, "recovery": recovery}
    resolved = resolve(project=project, zone=zone, **given, credentials=credentials, access_token_file=access_token_file)
    asked = _asked(resolved, capacity)
    spec = nodespec.load_saved(resolved.project, landed_zone(resolved, name), name, "babysit")
    hunting = _hunting(asked or _saved_hunt(spec, resolved), spec)
    api = tpu_api(resolved)
    deadline = float(resolved.require("create-deadline"))
    watch = sitter.BabysitTerms(command, interval, max_recreates, note=_note, status=StatusLine, create_deadline_s=deadline, candidates=hunting,
                             recovery=policies.asked(resolved))  # fmt: skip
    kept = Recorded.new(BABYSIT, f"babysit-{name}", shlex.join(shown_args(command)), job=name)
    if detach:
        _detach(kept, lambda: sitter.babysit(api, spec, watch))
        return
    raise SystemExit(kept.run(lambda: sitter.babysit(api, spec, watch), _note))


def _asked(resolved: Settings, flag: str | None) -> Plan | None:
    """The hunt --zones/--capacity (or the zones/capacity settings) ask for, checked before anything is read: the
    node's type and own kind are filled in from its spec (_hunting). No zones: the node's own zone (zones == [])."""
    from tpuctl.cloud.capacity.candidates import Plan
    from tpuctl.settings.cloud import zones_of
    from tpuctl.tpu.capacity import FLEX_START, KINDS, parse_capacities

    if not (resolved.given("zones") or resolved.given("capacity")):
        return None
    where = zones_of(resolved.require("zones")) if resolved.given("zones") else []
    # flex-start is no kind to fall back to: it needs a run duration the lost node's spec does not have. Refused in
    # --capacity (the user asks babysit for it); dropped, with a note, from the capacity setting create shares.
    allowed = tuple(kind for kind in KINDS if kind != FLEX_START) if flag is not None else KINDS
    asked = parse_capacities(resolved.require("capacity"), allowed) if resolved.given("capacity") else []
    if any(c.kind == FLEX_START for c in asked):
        _note("the capacity setting's flex-start is left out: babysit has no run duration to queue one with")
        asked = [c for c in asked if c.kind != FLEX_START]
    return Plan([], asked, where, resolved, None)


def _saved_hunt(spec: NodeSpec, resolved: Settings) -> Plan | None:
    """The hunt the node's create made (its saved zones and kinds), when babysit is given none of its own."""
    from tpuctl.cloud.capacity.candidates import Plan
    from tpuctl.settings.cloud import zones_of
    from tpuctl.tpu.capacity import FLEX_START, parse_capacities

    if spec.hunt_zones is None and spec.hunt_capacity is None:
        return None
    kinds = [c for c in parse_capacities(spec.hunt_capacity or spec.capacity()) if c.kind != FLEX_START]  # no run duration: _asked
    where = zones_of(spec.hunt_zones) if spec.hunt_zones is not None else []
    said = f"zones {spec.hunt_zones or spec.zone}, capacity {spec.hunt_capacity or spec.capacity()}"
    _note(f"{spec.name} was created by a hunt: to bring it back elsewhere, babysit hunts the same way ({said})")
    return Plan([], kinds, where, resolved, None)


def _hunting(asked: Plan | None, spec: NodeSpec) -> Candidates | None:
    """Where a lost node may go once its own zone stocked out, or None (its zone only), gathered only then (offers
    read every zone). Its own type; its own kind first, then the others asked for, so a spot node is hunted as spot
    before anything dearer. A --type/--topology node has no accelerator type to hunt with (recovery.py)."""
    from tpuctl.cli.create_hunt import ranked
    from tpuctl.cloud.capacity.recovery import own_capacity

    if asked is None or spec.accelerator_type is None:
        return None
    kinds = list(dict.fromkeys([own_capacity(spec), *asked.capacities]))
    hunt_plan = replace(asked, types=[spec.accelerator_type], capacities=kinds, zones=[spec.zone] if asked.zones == [] else asked.zones)
    return lambda: ranked(hunt_plan)


def _detach(kept: Recorded, sit: Callable[[], int]) -> None:
    """The loop goes on in a process of its own, whose console is the run's console file; say where, and how to reach it."""
    from tpuctl.runs import detach

    pid = detach.start(lambda ready: kept.run(sit, _note, started=ready))
    run = kept.run_id
    click.echo(run)
    _note(f"{run} runs detached (pid {pid}); its console: {kept.folder.console_log}")
    _note(f"follow it: tpuctl attach {run}; stop it: tpuctl stop {run}")

"""`tpuctl create | recreate | delete | stop-vm | start`: change a TPU node, safely re-runnable."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tpuctl.cli.cloud_options import framework_option, project_options, resolve, tpu_api, zone_option
from tpuctl.cli.created import list_price, report
from tpuctl.cli.display import StatusLine
from tpuctl.endings import INTERRUPTED
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.prices import PriceBook
    from tpuctl.cloud.nodes.tpu import TpuApi
    from tpuctl.settings.cloud import Settings


@click.command("create")
@click.argument("name")
@project_options
@zone_option
@click.option("--accelerator-type", metavar="TYPE[,TYPE2]", help="e.g. v4-8, v5litepod-16; several: tried in your order (a hunt) [config: accelerator-type].")
@click.option("--type", "config_type", metavar="GEN", help="TPU generation with --topology, e.g. v5litepod.")
@click.option("--topology", metavar="AxB[xC]", help="Chip topology with --type, e.g. 2x4.")
@click.option("--runtime-version", metavar="VERSION", help="TPU VM software version [config: runtime-version; default: TensorFlow's image for the type].")
@framework_option("takes each type's JAX image (v2-alpha-tpuv6e, ...) where no runtime version is named")
@click.option("--zones", metavar="all|Z1,Z2,...", help="Hunt across zones (all or auto: every zone), best first as `tpuctl offers` ranks [config: zones].")
@click.option(
    "--capacity",
    metavar="KIND[,KIND]",
    help="Capacity kinds to try, in your order: on-demand, spot, preemptible, reserved[=NAME], flex-start [config: capacity; default: on-demand].",
)
@click.option("--hunt-timeout", type=click.IntRange(min=1), metavar="SECONDS", help="Give up the whole hunt after SECONDS (each try: create-deadline at most).")
@click.option("--spot", is_flag=True, help="Spot capacity: cheaper, may be preempted at any time (--capacity spot).")
@click.option("--preemptible", is_flag=True, help="Legacy preemptible capacity (24 h limit; --capacity preemptible).")
@click.option("--reserved", is_flag=True, help="Take the slice from the project's reservations (billed by the reservation).")
@click.option("--reservation", metavar="NAME", help="With --reserved: this reservation only (NAME or projects/P/locations/Z/reservations/NAME); queues.")
@click.option("--flex-start", is_flag=True, help="Flex-start: queued until capacity comes, then DELETED after --max-run-duration.")
@click.option("--max-run-duration", metavar="D", help="With --flex-start: how long the slice runs, at most 7d (e.g. 2d, 36h).")
@click.option("--queued", is_flag=True, help="Queue the request until capacity is available (queued resource).")
@click.option("--valid-until", metavar="WHEN", help="With --queued: give up after a duration (6h, 2d) or at an RFC 3339 time.")
@click.option("--labels", multiple=True, metavar="K=V[,K=V]", help="Labels for the node (repeatable).")
@click.option("--network", metavar="NETWORK", help="VPC network.")
@click.option("--subnetwork", metavar="SUBNET", help="VPC subnetwork.")
@click.option("--service-account", metavar="EMAIL", help="Service account the TPU VMs run as.")
@click.option("--startup-script", type=click.Path(dir_okay=False, path_type=Path), help="Script each TPU VM runs at boot.")
@click.option("--async", "no_wait", is_flag=True, help="Return once the request is accepted; do not wait for READY.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: name, zone, acceleratorType, capacity, created, state, listPrice (a hunt: its tries).")
def create(name: str, no_wait: bool, as_json: bool, zones: str | None, capacity: str | None, hunt_timeout: int | None, framework: str, **flags: Any) -> None:
    """Create the TPU VM NAME and wait until it is READY and HEALTHY.

    Re-running with the same spec reuses the node; a different spec is an
    error that lists the differences. The spec is saved for `tpuctl recreate`.
    Before it waits it says the slice's hourly list price (no discounts).
    With --zones, several types or several capacity kinds it hunts: one try after
    another, best first, until one holds (docs/capacity.md, How tpuctl chooses).
    --framework jax makes it for Keras 3 on JAX: the JAX image of each type
    (docs/cloud.md, The default runtime version), JAX itself from pip.
    """
    from tpuctl.cli import create_hunt
    from tpuctl.cloud.nodes import nodespec
    from tpuctl.safety import signals

    nodespec.check_name(name)
    hunting = create_hunt.plan(flags, zones, capacity, hunt_timeout)
    with signals.as_interrupt() as settle:
        if hunting is not None:
            create_hunt.run(name, hunting, flags, no_wait, as_json, settle, jax=framework == "jax")
        else:
            _create_one(name, no_wait, as_json, settle, flags, jax=framework == "jax")


def _create_one(name: str, no_wait: bool, as_json: bool, settle: Callable[[], None], flags: dict[str, Any], jax: bool) -> None:
    """A create in one zone as one kind (no hunt); `settle` once the node is there, before its report. `jax`: the
    type's JAX image where no layer names a runtime version (a default, as TensorFlow's is: an existing node's own
    image is still accepted)."""
    from tpuctl.cloud.nodes import lifecycle, nodespec
    from tpuctl.cloud.nodes.creating import Accepted, Naming, Terms
    from tpuctl.inputs.errors import CapacityError
    from tpuctl.tpu import stockouts

    spec, resolved = nodespec.from_flags(name, **flags)
    if jax and not resolved.given("runtime-version"):
        from tpuctl.tpu.accelerators import shape_from_config
        from tpuctl.tpu.software import jax_image

        accelerator = spec.accelerator_type or shape_from_config(spec.config_type or "", spec.topology or "").accelerator_type
        spec = replace(spec, runtime_version=jax_image(accelerator))
    api = tpu_api(resolved)
    deadline = float(resolved.require("create-deadline"))
    listed: list[dict[str, object] | None] = [None]  # what the price line said, once a node is to be created
    book = _price_book(resolved, api)  # read before the create: between its acceptance and the wait it would hide CREATING

    def price(event: Naming | Accepted) -> None:
        if isinstance(event, Accepted):  # the service accepted the create: its price line, before the wait
            listed[0] = list_price(spec, book)

    try:
        with StatusLine(f"creating {name}") as progress:
            terms = Terms(wait=not no_wait, runtime_given=resolved.given("runtime-version"), deadline_s=deadline)
            result = lifecycle.attempt(api, spec, progress, terms, price)
    except CapacityError as stockout:
        stockouts.remember(spec.project, spec.zone, spec.accelerator(), spec.capacity(), stockout.kind.name.lower())
        raise
    settle()
    if as_json:
        body = {"name": name, "zone": spec.zone, "acceleratorType": spec.accelerator(), "capacity": spec.capacity(), "created": result.created}
        click.echo(json.dumps({**body, "state": result.node.state, "listPrice": listed[0]}, indent=2))
        return
    report(result, no_wait)


def _price_book(resolved: Settings, api: TpuApi) -> PriceBook | str:
    """The price book `tpuctl list` uses (tpuctl/cloud/capacity/prices.py): the catalogue, else the dated table, marked; or why
    prices could not be had at all, which never stops a create."""
    from tpuctl.cloud.capacity.prices import price_book

    try:  # every create reads it, a reused node's too: bounded (prices.DEADLINE_S), and a slow read says so
        return price_book(resolved, api.bearer_token, waiting=lambda line: click.echo(f"tpuctl: {line}", err=True))
    except (TpuctlError, OSError) as err:
        return one_line(str(err))


@click.command("recreate")
@click.argument("name")
@project_options
@zone_option
def recreate(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None) -> None:
    """Create NAME again from the spec saved when tpuctl created it.

    A preempted or terminated node is deleted first; a node that is gone
    (as the service does after preemption) is simply created; a live node
    with the same spec is left alone.
    """
    from tpuctl.cloud.nodes import lifecycle, nodespec
    from tpuctl.cloud.nodes.creating import Terms

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    from tpuctl.cloud.nodes.node_lookup import landed_zone

    spec = nodespec.load_saved(resolved.project, landed_zone(resolved, name), name, "recreate")
    api = tpu_api(resolved)
    with StatusLine(f"recreating {name}") as progress:
        result = lifecycle.recreate(api, spec, progress, Terms(deadline_s=float(resolved.require("create-deadline"))))
    report(result, no_wait=False)


@click.command("delete")
@click.argument("name")
@project_options
@zone_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, yes: bool) -> None:
    """Delete the TPU VM NAME, and the queued resource that made it, and wait until they are gone (a gone node is not an
    error). A queued resource that outlived its node (SUSPENDED, still counted against quota) is deleted the same way."""
    from tpuctl.cloud.nodes import lifecycle, nodespec
    from tpuctl.cloud.nodes.node_lookup import landed_zone
    from tpuctl.safety import signals

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    where = landed_zone(resolved, name)
    api = tpu_api(resolved)
    with signals.as_interrupt() as settle:
        try:
            node, queued, _ = lifecycle.find(api, where, name)
            if node is None and queued is None:
                nodespec.forget_named(api.project, where, name)
                click.echo(f"{name} does not exist in {where}; nothing to delete")
                return
            if not yes:
                queued_too = f" and its queued resource {queued.resource_id}" if queued is not None else ""
                what = f"queued resource {name}, whose node is gone," if node is None else f"TPU node {name}{queued_too}"
                confirm(f"delete {what} in project {resolved.project}, zone {where}?")
            with StatusLine(f"deleting {name}") as progress:
                removed = lifecycle.remove(api, where, name, progress)
        except KeyboardInterrupt:
            raise TpuctlError(f"interrupted; {name} in {where} may still be there, being deleted or not: `tpuctl delete {name} --zone {where}` deletes it",
                              exit_code=INTERRUPTED) from None  # fmt: skip
        settle()
    click.echo(removed.line())


def confirm(question: str) -> None:
    """Ask before a destructive step at a terminal; elsewhere, `--yes` must say so (nothing is asked of a pipe)."""
    import sys

    if not sys.stdin.isatty():
        raise TpuctlError(f"would {question.rstrip('?')}; pass --yes to confirm when not at a terminal")
    if not click.confirm(question, default=False, err=True):
        raise TpuctlError("not confirmed; nothing changed", exit_code=FAILED)


def _power(name: str, stop: bool, **flags: str | None) -> None:
    from tpuctl.cloud.nodes import lifecycle, nodespec

    nodespec.check_name(name)
    resolved = resolve(**flags)
    api = tpu_api(resolved)
    verb = "stopping" if stop else "starting"
    with StatusLine(f"{verb} {name}") as progress:
        changed = lifecycle.change_power(api, resolved.zone, name, stop, progress)
    target = "STOPPED" if stop else "READY"
    click.echo(f"{name} is {target}" if changed else f"{name} is already {target}; nothing to do")


@click.command("stop-vm")
@click.argument("name")
@project_options
@zone_option
def stop_vm(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None) -> None:
    """Stop the TPU VM NAME (single-host nodes); a stopped node is left as it is. `tpuctl start NAME` starts it again.

    gcloud's `compute tpus tpu-vm stop`; `tpuctl stop` is for runs (docs/cloud.md says why the two verbs)."""
    _power(name, True, project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)


def stop_vm_by_old_name(name: str, **flags: str | None) -> bool:
    """`tpuctl stop NAME` where NAME is no run: the TPU VM NAME stopped, as before `stop-vm`, with a notice; False
    where NAME is not a node the API shows. Without cloud flags a failed look-up (no project, no credentials) is
    False too: the name was most likely a mistyped run; with them, the user meant a TPU VM and its error stands."""
    from tpuctl.cloud.nodes import nodespec

    try:
        nodespec.check_name(name)
        resolved = resolve(**flags)
        found = tpu_api(resolved).get_node(resolved.zone, name)
    except TpuctlError:
        if any(value is not None for value in flags.values()):
            raise
        return False
    if found is None:
        return False
    click.echo(f"tpuctl: `tpuctl stop NAME` for a TPU VM is deprecated; use `tpuctl stop-vm {name}`", err=True)
    _power(name, True, **flags)
    return True


@click.command("start")
@click.argument("name")
@project_options
@zone_option
def start(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None) -> None:
    """Start the stopped TPU VM NAME; a running node is left as it is."""
    _power(name, False, project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)

"""`tpuctl create | recreate | delete | stop-vm | start`: change a TPU node, safely re-runnable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import StatusLine
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line

if TYPE_CHECKING:
    from tpuctl.cloud.lifecycle import Ensured
    from tpuctl.cloud.node import Node
    from tpuctl.cloud.nodespec import NodeSpec
    from tpuctl.cloud.prices import PriceBook
    from tpuctl.cloud.tpu import TpuApi
    from tpuctl.settings.cloud import Settings


def _hosts(node: Node) -> str:
    count = node.host_count
    ips = ", ".join(host.internal_ip for host in node.endpoints if host.internal_ip) or "no hosts yet"
    return f"{count} host{'s' if count != 1 else ''}: {ips}"


@click.command("create")
@click.argument("name")
@project_options
@zone_option
@click.option("--accelerator-type", metavar="TYPE", help="e.g. v4-8, v5litepod-16 [config: accelerator-type].")
@click.option("--type", "config_type", metavar="GEN", help="TPU generation with --topology, e.g. v5litepod.")
@click.option("--topology", metavar="AxB[xC]", help="Chip topology with --type, e.g. 2x4.")
@click.option("--runtime-version", metavar="VERSION", help="TPU VM software version [config: runtime-version; default: TensorFlow's image for the type].")
@click.option("--spot", is_flag=True, help="Spot capacity: cheaper, may be preempted at any time.")
@click.option("--preemptible", is_flag=True, help="Legacy preemptible capacity (24 h limit).")
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
@click.option("--json", "as_json", is_flag=True, help="One JSON object: name, zone, acceleratorType, capacity, created, state, listPrice.")
def create(name: str, no_wait: bool, as_json: bool, **flags: Any) -> None:
    """Create the TPU VM NAME and wait until it is READY and HEALTHY.

    Re-running with the same spec reuses the node; a different spec is an
    error that lists the differences. The spec is saved for `tpuctl recreate`.
    Before it waits it says the slice's hourly list price (no discounts).
    """
    from tpuctl.cloud import lifecycle, nodespec
    from tpuctl.inputs.errors import CapacityError
    from tpuctl.tpu import stockouts

    spec, resolved = nodespec.from_flags(name, **flags)
    api = tpu_api(resolved)
    deadline = float(resolved.require("create-deadline"))
    listed: list[dict[str, object] | None] = [None]  # what the price line said, once a node is to be created
    book = _price_book(resolved, api)  # read before the create: between its acceptance and the wait it would hide CREATING

    def price() -> None:
        listed[0] = _list_price(spec, book)

    try:
        with StatusLine(f"creating {name}") as progress:
            given = resolved.given("runtime-version")
            result = lifecycle.ensure(api, spec, progress, wait=not no_wait, runtime_given=given, deadline_s=deadline, before_create=price)
    except CapacityError as stockout:
        stockouts.remember(spec.project, spec.zone, spec.accelerator(), spec.capacity(), stockout.kind.name.lower())
        raise
    if as_json:
        body = {"name": name, "zone": spec.zone, "acceleratorType": spec.accelerator(), "capacity": spec.capacity(), "created": result.created}
        click.echo(json.dumps({**body, "state": result.node.state, "listPrice": listed[0]}, indent=2))
        return
    _report(result, no_wait)


def _price_book(resolved: Settings, api: TpuApi) -> PriceBook | str:
    """The price book `tpuctl list` uses (tpuctl/cloud/prices.py): the catalogue, else the dated table, marked; or why
    prices could not be had at all, which never stops a create."""
    from tpuctl.cloud.prices import ACTING_DEADLINE_S, price_book

    try:  # every create reads it, a reused node's too: bounded, so an unreachable catalogue costs seconds, not a minute
        return price_book(resolved, api.bearer_token, deadline_s=ACTING_DEADLINE_S)
    except (TpuctlError, OSError) as err:
        return one_line(str(err))


def _list_price(spec: NodeSpec, book: PriceBook | str) -> dict[str, object] | None:
    """Say on stderr, before the wait, what an hour of the slice costs at list price; where no SKU prices it, say so."""
    from tpuctl.cli.node_info import price_json, price_text
    from tpuctl.tpu.accelerators import shape_from_config

    if isinstance(book, str):
        click.echo(f"tpuctl: {spec.accelerator()} in {spec.zone}, {spec.capacity()}: no list price (prices could not be read: {book})", err=True)
        return None
    # --type/--topology names the slice by its shape; the SKUs price it by chips, which its type name carries too.
    try:
        named = spec.accelerator_type or shape_from_config(str(spec.config_type), str(spec.topology)).accelerator_type
    except TpuctlError:
        named = spec.accelerator()  # a shape tpuctl's table does not know: no list price, never a guess
    usd = book.slice_price(named, spec.zone, spec.capacity())
    price = "no list price" if usd is None else f"{price_text(usd)}/h list price"
    click.echo(f"tpuctl: {named} in {spec.zone}, {spec.capacity()}: {price} ({book.describe()})", err=True)
    return price_json(book, usd)


def _report(result: Ensured, no_wait: bool) -> None:
    spec = result.spec
    name, zone = spec.name, spec.zone
    what = f"{spec.accelerator()}, {spec.runtime_version}"
    if no_wait:
        verb = "creating" if result.created else "exists:"
        click.echo(f"{verb} {name} ({what}) in {zone}; `tpuctl describe {name}` shows its state")
        return
    verb = "created" if result.created else "reused existing"
    click.echo(f"{verb} {name} ({what}) in {zone}: READY, {_hosts(result.node)}")


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
    from tpuctl.cloud import lifecycle, nodespec

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    from tpuctl.cloud.node_lookup import landed_zone

    spec = nodespec.load_saved(resolved.project, landed_zone(resolved, name), name, "recreate")
    api = tpu_api(resolved)
    with StatusLine(f"recreating {name}") as progress:
        result = lifecycle.recreate(api, spec, progress, deadline_s=float(resolved.require("create-deadline")))
    _report(result, no_wait=False)


@click.command("delete")
@click.argument("name")
@project_options
@zone_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, yes: bool) -> None:
    """Delete the TPU VM NAME and wait until it is gone (a gone node is not an error)."""
    from tpuctl.cloud import lifecycle, nodespec
    from tpuctl.cloud.node_lookup import landed_zone

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    where = landed_zone(resolved, name)
    api = tpu_api(resolved)
    if api.get_node(where, name) is None:
        click.echo(f"{name} does not exist in {where}; nothing to delete")
        return
    if not yes:
        _confirm(f"delete TPU node {name} in project {resolved.project}, zone {where}?")
    with StatusLine(f"deleting {name}") as progress:
        deleted = lifecycle.delete(api, where, name, progress)
    click.echo(f"deleted {name} in {where}" if deleted else f"{name} was already gone")


def _confirm(question: str) -> None:
    import sys

    if not sys.stdin.isatty():
        raise TpuctlError(f"would {question.rstrip('?')}; pass --yes to confirm when not at a terminal")
    if not click.confirm(question, default=False, err=True):
        raise TpuctlError("not confirmed; nothing changed", exit_code=FAILED)


def _power(name: str, stop: bool, **flags: str | None) -> None:
    from tpuctl.cloud import lifecycle, nodespec

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
    from tpuctl.cloud import nodespec

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

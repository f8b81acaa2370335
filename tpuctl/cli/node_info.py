"""`tpuctl list | describe | runtimes`: read-only views of TPU nodes and zones."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import age, print_table
from tpuctl.cloud.capacity.prices import price_text
from tpuctl.inputs.errors import TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.prices import PriceBook
    from tpuctl.cloud.nodes.node import Node


def node_age(node: Node) -> str:
    created = node.created
    return "" if created is None else age(max(0.0, time.time() - created.timestamp()))


@click.command("list")
@project_options
@zone_option
@click.option("--all-zones", is_flag=True, help="Every zone the project can use, queried concurrently (the same as --zones all).")
@click.option("--zones", metavar="all|Z1,Z2,...", help="These zones, or `all` (or `auto`): every zone the TPU API lists, as in `tpuctl offers`.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of nodes with the v2 API's field names plus zone and listPrice.")
def list_nodes(
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    all_zones: bool,
    zones: str | None,
    as_json: bool,
) -> None:
    """List TPU VMs in a zone (or all zones), and any queued resource that outlived its node (it still counts against quota)."""
    from tpuctl.cloud.nodes.node_lookup import QUEUED_ON_THE_WAY, list_zones, with_kinds
    from tpuctl.settings.cloud import zones_of

    if sum(bool(given) for given in (all_zones, zone, zones)) > 1:
        raise TpuctlError("give one of --zone, --zones and --all-zones")
    named = zones_of(zones) if zones else None
    every = all_zones or (zones is not None and named is None)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    if not every and not named:
        resolved.require("zone")
    api = tpu_api(resolved)
    listed = list_zones(api, api.zones() if every else list(dict.fromkeys(named or [resolved.zone])))
    found = with_kinds(api, listed.nodes)
    for note in listed.notes:
        click.echo(f"tpuctl: {note}", err=True)
    for zone, queued in listed.lone_queued:
        if queued.state not in QUEUED_ON_THE_WAY:
            click.echo(f"tpuctl: queued resource {queued.resource_id} in {zone} is {queued.state} with no node; it still counts against TPU quota:"
                       f" `tpuctl delete {queued.node_ids[0]} --zone {zone}` deletes it", err=True)  # fmt: skip
    if not found and not listed.lone_queued and not as_json:
        click.echo(f"no TPU nodes in {'any zone' if every else ', '.join(named or [resolved.zone])} of project {api.project}", err=True)
        return
    from tpuctl.cloud.capacity.prices import price_book

    book = price_book(resolved, api.bearer_token, waiting=lambda line: click.echo(f"tpuctl: {line}", err=True)) if found else None
    hourly = [book.slice_price(n.accelerator, n.zone, n.capacity) if book else None for n in found]
    if as_json:
        click.echo(json.dumps([{**n.to_json(), "listPrice": price_json(book, usd)} for n, usd in zip(found, hourly, strict=True)], indent=2))
        return
    rows = [
        [n.name, n.zone, n.accelerator, n.state, n.health or "-", n.runtime_version, n.capacity, node_age(n), "reserved" if n.reserved else price_text(usd)]
        for n, usd in zip(found, hourly, strict=True)
    ]
    rows += [[q.resource_id, z, q.accelerator_type or "-", f"queued: {q.state}, no node", "-", "-", "-", "", "-"] for z, q in listed.lone_queued]
    print_table(["NAME", "ZONE", "ACCELERATOR", "STATE", "HEALTH", "RUNTIME", "CAPACITY", "AGE", "PRICE/H"], rows)
    if book is not None:
        click.echo(total_line(hourly, book))


def ends_text(node: Node) -> str:
    """When the service deletes a flex-start node, and how long is left, as v2alpha1's terminationTimestamp says."""
    from datetime import datetime, timezone

    ends = node.terminates
    if ends is None:
        return "not said by the API (a flex-start node is deleted when its max run duration ends)"
    left = max(0, int((ends - datetime.now(timezone.utc)).total_seconds()))
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    span = f"{days}d {hours}h" if days else f"{hours}h {rest // 60}m" if hours else f"{rest // 60}m {rest % 60}s"
    return f"{ends.isoformat().replace('+00:00', 'Z')} (in {span}); the service deletes the node then"


def price_json(book: PriceBook | None, usd: float | None) -> dict[str, object] | None:
    """A node's price in `list --json`: USD per hour (null where no SKU prices it) and where it came from."""
    if book is None:
        return None
    return {"usdPerHour": None if usd is None else round(usd, 6), "source": book.source, "date": book.date, "note": book.describe()}


def total_line(hourly: list[float | None], book: PriceBook) -> str:
    priced = [usd for usd in hourly if usd is not None]
    unpriced = len(hourly) - len(priced)
    left_out = f", {unpriced} node{'s' if unpriced != 1 else ''} without a list price (or reserved) left out" if unpriced else ""
    return f"total {price_text(sum(priced))} per hour{left_out} ({book.describe()})"


@click.command("describe")
@click.argument("name")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="The node as the v2 API returns it, plus zone.")
def describe(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """Show one TPU VM: state, health, accelerator, hosts and their IPs, runtime, capacity, age."""
    from tpuctl.cloud.nodes.node_lookup import find_node

    node = find_node(name, "`tpuctl list --all-zones` shows every node", project, zone, credentials, access_token_file, kinds=not as_json)
    if as_json:
        click.echo(json.dumps(node.to_json(), indent=2))
        return
    health = (node.health or "-") + (f" ({node.health_description})" if node.health_description else "")
    rows = [
        ("name", name),
        ("zone", node.zone),
        ("state", node.state),
        ("health", health),
        ("accelerator", node.accelerator),
        ("topology", f"{node.config_type} {node.topology}" if node.topology else "-"),
        ("runtime", node.runtime_version),
        ("capacity", node.capacity),
        *([("ends", ends_text(node))] if node.flex_start else []),
        ("age", node_age(node) or "-"),
        ("hosts", str(node.host_count)),
    ]
    for index, host in enumerate(node.endpoints):
        rows.append((f"  worker {index}", host.internal_ip + (f" (external {host.external_ip})" if host.external_ip else "")))
    if node.labels:
        rows.append(("labels", ",".join(f"{k}={v}" for k, v in sorted(node.labels.items()))))
    if node.queued_resource:
        rows.append(("queued resource", node.queued_resource))
    if node.service_account:
        rows.append(("service account", node.service_account))
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        click.echo(f"{key.ljust(width)}  {value}")


@click.command("runtimes")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of version names.")
def runtimes(project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """The TPU VM runtime (software) versions a zone offers."""
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    versions = tpu_api(resolved).runtime_versions(resolved.zone)
    if as_json:
        click.echo(json.dumps(versions))
        return
    for version in versions:
        click.echo(version)

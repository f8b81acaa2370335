"""`tpuctl list | describe | accelerators | runtimes`: read-only views of TPU nodes and zones."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_reader, zone_option
from tpuctl.cli.display import age, print_table
from tpuctl.errors import FAILED, TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.tpu_reader import JSON, TpuReader

MAX_ZONE_THREADS = 16
_FRACTION = re.compile(r"(\.\d{6})\d+")


def node_dict(node: JSON, zone: str) -> JSON:
    """The v2 API's JSON for a node, as it came, plus its zone (and schedulingConfig always present)."""
    return {**node, "schedulingConfig": node.get("schedulingConfig", {}), "zone": zone}


def short_name(node: JSON) -> str:
    return str(node.get("name", "")).rsplit("/", 1)[-1]


def accelerator(node: JSON) -> str:
    config = node.get("acceleratorConfig", {})
    if node.get("acceleratorType"):
        return str(node["acceleratorType"])
    return f"{str(config.get('type', '')).lower()} {config['topology']}" if config.get("topology") else "?"


def capacity(node: JSON) -> str:
    scheduling = node.get("schedulingConfig", {})
    return "spot" if scheduling.get("spot") else "preemptible" if scheduling.get("preemptible") else "on-demand"


def node_age(node: JSON) -> str:
    """Age from createTime (RFC 3339, up to nanoseconds, which Python 3.10 cannot parse as such)."""
    stamp = str(node.get("createTime", ""))
    if not stamp:
        return ""
    try:
        created = datetime.fromisoformat(_FRACTION.sub(r"\1", stamp.replace("Z", "+00:00")))
    except ValueError:
        return ""
    return age(max(0.0, time.time() - created.timestamp()))


def _health(node: JSON) -> str:
    return str(node.get("health") or "-")


@click.command("list")
@project_options
@zone_option
@click.option("--all-zones", is_flag=True, help="Every zone the project can use, queried concurrently.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of nodes with the v2 API's field names plus zone.")
def list_nodes(
    project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, all_zones: bool, as_json: bool
) -> None:
    """List TPU VMs in a zone (or all zones)."""
    if all_zones and zone:
        raise TpuctlError("give --zone or --all-zones, not both")
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    if not all_zones:
        resolved.require("zone")
    reader = tpu_reader(resolved)
    zones = reader.zones() if all_zones else [resolved.zone]
    found = _list_zones(reader, zones)
    if as_json:
        click.echo(json.dumps([node_dict(node, z) for z, node in found], indent=2))
        return
    if not found:
        click.echo(f"no TPU nodes in {'any zone' if all_zones else zones[0]} of project {reader.project}", err=True)
        return
    rows = [
        [short_name(n), z, accelerator(n), str(n.get("state", "")), _health(n), str(n.get("runtimeVersion", "")), capacity(n), node_age(n)]
        for z, n in found
    ]
    print_table(["NAME", "ZONE", "ACCELERATOR", "STATE", "HEALTH", "RUNTIME", "CAPACITY", "AGE"], rows)


def _list_zones(reader: TpuReader, zones: list[str]) -> list[tuple[str, JSON]]:
    """One request per zone, all at once: ten zones cost about as much as one."""
    if len(zones) == 1:
        return [(zones[0], node) for node in sorted(reader.nodes(zones[0]), key=short_name)]
    with ThreadPoolExecutor(max_workers=min(MAX_ZONE_THREADS, len(zones))) as pool:
        per_zone = list(pool.map(reader.nodes, zones))
    return [(z, node) for z, nodes in zip(zones, per_zone) for node in sorted(nodes, key=short_name)]


def find_node(name: str, hint: str, project: str | None, zone: str | None, credentials: str | None, access_token_file: str | None) -> tuple[JSON, str]:
    """A node's JSON and its zone, or one line saying where it was looked for."""
    from tpuctl.cloud import nodespec

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    reader = tpu_reader(resolved)
    node = reader.node(resolved.zone, name)
    if node is None:
        raise TpuctlError(f"no TPU VM {name} in project {reader.project}, zone {resolved.zone}", hint=hint, exit_code=FAILED)
    return node, resolved.zone


@click.command("describe")
@click.argument("name")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="The node as the v2 API returns it, plus zone.")
def describe(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """Show one TPU VM: state, health, accelerator, hosts and their IPs, runtime, capacity, age."""
    node, zone = find_node(name, "`tpuctl list --all-zones` shows every node", project, zone, credentials, access_token_file)
    if as_json:
        click.echo(json.dumps(node_dict(node, zone), indent=2))
        return
    config = node.get("acceleratorConfig", {})
    health = _health(node) + (f" ({node['healthDescription']})" if node.get("healthDescription") else "")
    endpoints = node.get("networkEndpoints", [])
    rows = [
        ("name", name),
        ("zone", zone),
        ("state", str(node.get("state", ""))),
        ("health", health),
        ("accelerator", accelerator(node)),
        ("topology", f"{config.get('type', '')} {config['topology']}" if config.get("topology") else "-"),
        ("runtime", str(node.get("runtimeVersion", ""))),
        ("capacity", capacity(node)),
        ("age", node_age(node) or "-"),
        ("hosts", str(len(endpoints))),
    ]
    for index, endpoint in enumerate(endpoints):
        external = endpoint.get("accessConfig", {}).get("externalIp", "")
        rows.append((f"  worker {index}", str(endpoint.get("ipAddress", "")) + (f" (external {external})" if external else "")))
    if node.get("labels"):
        rows.append(("labels", ",".join(f"{k}={v}" for k, v in sorted(node["labels"].items()))))
    if node.get("queuedResource"):
        rows.append(("queued resource", str(node["queuedResource"])))
    if node.get("serviceAccount", {}).get("email"):
        rows.append(("service account", str(node["serviceAccount"]["email"])))
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        click.echo(f"{key.ljust(width)}  {value}")


@click.command("accelerators")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of accelerator types as the v2 API returns them.")
def accelerators(project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """The TPU accelerator types a zone offers."""
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    found = tpu_reader(resolved).accelerator_types(resolved.zone)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    rows = [[str(a.get("type", "")), ", ".join(f"{c.get('type', '')} {c.get('topology', '')}" for c in a.get("acceleratorConfigs", []))] for a in found]
    print_table(["TYPE", "CONFIGURATIONS"], rows)


@click.command("runtimes")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of version names.")
def runtimes(project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """The TPU VM runtime (software) versions a zone offers."""
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    versions = tpu_reader(resolved).runtime_versions(resolved.zone)
    if as_json:
        click.echo(json.dumps(versions))
        return
    for version in versions:
        click.echo(version)

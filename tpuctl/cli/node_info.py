"""`tpuctl list | describe | accelerators | runtimes`: read-only views of TPU nodes and zones."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import print_table, since
from tpuctl.errors import FAILED, TpuctlError

if TYPE_CHECKING:
    from google.cloud import tpu_v2

    from tpuctl.cloud.tpu import TpuApi

MAX_ZONE_THREADS = 16


def node_dict(node: tpu_v2.Node, zone: str) -> dict[str, Any]:
    """The v2 API's JSON for a node (camelCase field names, enum names) plus its zone."""
    from google.cloud import tpu_v2

    data: dict[str, Any] = tpu_v2.Node.to_dict(node, use_integers_for_enums=False, preserving_proto_field_name=False)
    data.setdefault("schedulingConfig", {"preemptible": False, "spot": False, "reserved": False})
    if node.create_time:
        data["createTime"] = node.create_time.isoformat().replace("+00:00", "Z")
    data["zone"] = zone
    return data


def short_name(node: tpu_v2.Node) -> str:
    return node.name.rsplit("/", 1)[-1]


def accelerator(node: tpu_v2.Node) -> str:
    config = node.accelerator_config
    if node.accelerator_type:
        return node.accelerator_type
    return f"{config.type_.name.lower()} {config.topology}" if config.topology else "?"


def capacity(node: tpu_v2.Node) -> str:
    scheduling = node.scheduling_config
    return "spot" if scheduling.spot else "preemptible" if scheduling.preemptible else "on-demand"


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
    api = tpu_api(resolved)
    zones = api.zones() if all_zones else [resolved.zone]
    found = _list_zones(api, zones)
    if as_json:
        click.echo(json.dumps([node_dict(node, z) for z, node in found], indent=2))
        return
    if not found:
        click.echo(f"no TPU nodes in {'any zone' if all_zones else zones[0]} of project {api.project}", err=True)
        return
    rows = [
        [short_name(n), z, accelerator(n), n.state.name, _health(n), n.runtime_version, capacity(n), since(n.create_time)]
        for z, n in found
    ]
    print_table(["NAME", "ZONE", "ACCELERATOR", "STATE", "HEALTH", "RUNTIME", "CAPACITY", "AGE"], rows)


def _list_zones(api: TpuApi, zones: list[str]) -> list[tuple[str, tpu_v2.Node]]:
    """One request per zone, all at once: ten zones cost about as much as one."""
    if len(zones) == 1:
        return [(zones[0], node) for node in api.list_nodes(zones[0])]
    with ThreadPoolExecutor(max_workers=min(MAX_ZONE_THREADS, len(zones))) as pool:
        per_zone = list(pool.map(api.list_nodes, zones))
    return [(z, node) for z, nodes in zip(zones, per_zone) for node in sorted(nodes, key=short_name)]


def _health(node: tpu_v2.Node) -> str:
    return node.health.name if node.health else "-"


@click.command("describe")
@click.argument("name")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="The node as the v2 API returns it, plus zone.")
def describe(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """Show one TPU VM: state, health, accelerator, hosts and their IPs, runtime, capacity, age."""
    from tpuctl.cloud import nodespec

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    api = tpu_api(resolved)
    node = api.get_node(resolved.zone, name)
    if node is None:
        raise TpuctlError(
            f"no node {name} in project {api.project}, zone {resolved.zone}", hint="`tpuctl list --all-zones` shows every node", exit_code=FAILED
        )
    if as_json:
        click.echo(json.dumps(node_dict(node, resolved.zone), indent=2))
        return
    config = node.accelerator_config
    rows = [
        ("name", name),
        ("zone", resolved.zone),
        ("state", node.state.name),
        ("health", _health(node) + (f" ({node.health_description})" if node.health_description else "")),
        ("accelerator", accelerator(node)),
        ("topology", f"{config.type_.name} {config.topology}" if config.topology else "-"),
        ("runtime", node.runtime_version),
        ("capacity", capacity(node)),
        ("age", since(node.create_time) or "-"),
        ("hosts", str(len(node.network_endpoints))),
    ]
    for index, endpoint in enumerate(node.network_endpoints):
        external = endpoint.access_config.external_ip if endpoint.access_config else ""
        rows.append((f"  worker {index}", endpoint.ip_address + (f" (external {external})" if external else "")))
    if node.labels:
        rows.append(("labels", ",".join(f"{k}={v}" for k, v in sorted(node.labels.items()))))
    if node.queued_resource:
        rows.append(("queued resource", node.queued_resource))
    if node.service_account.email:
        rows.append(("service account", node.service_account.email))
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        click.echo(f"{key.ljust(width)}  {value}")


@click.command("accelerators")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of {type, acceleratorConfigs}.")
def accelerators(project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """The TPU accelerator types a zone offers."""
    from google.cloud import tpu_v2

    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    found = tpu_api(resolved).accelerator_types(resolved.zone)
    if as_json:
        data = [tpu_v2.AcceleratorType.to_dict(a, use_integers_for_enums=False, preserving_proto_field_name=False) for a in found]
        click.echo(json.dumps(data, indent=2))
        return
    rows = [[a.type_, ", ".join(f"{c.type_.name} {c.topology}" for c in a.accelerator_configs)] for a in found]
    print_table(["TYPE", "CONFIGURATIONS"], rows)


@click.command("runtimes")
@project_options
@zone_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of version names.")
def runtimes(project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None, as_json: bool) -> None:
    """The TPU VM runtime (software) versions a zone offers."""
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    versions = [r.version for r in tpu_api(resolved).runtime_versions(resolved.zone)]
    if as_json:
        click.echo(json.dumps(versions))
        return
    for version in versions:
        click.echo(version)

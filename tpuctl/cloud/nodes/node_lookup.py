"""Looking things up in the TPU API: a node by name, every node of a zone or of all zones, and `init`'s checks.

It lives in the core, not in a command, so that core code (a devices listing, an
ssh fan-out, a launch on a slice) can find a node without importing the CLI.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tpuctl.cloud.nodes.node import Node, last_part
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.settings import cloud as settings

if TYPE_CHECKING:
    from tpuctl.cloud.nodes.tpu import Queued, TpuApi

MAX_ZONE_THREADS = 16


def find_node(
    name: str, hint: str, project: str | None, zone: str | None, credentials: str | None, access_token_file: str | None, *, kinds: bool = False
) -> Node:
    """The node, or one line saying where it was looked for (exit 1, with `hint`).

    The flags (None where not given) sit over every other settings layer. A
    look-up is a read, so it costs no google-cloud-tpu import (tpuctl.cloud.nodes.tpu).
    `kinds`: a flex-start node is marked so and read as v2alpha1 shows it, with its termination time.
    """
    from tpuctl.cloud.nodes import nodespec
    from tpuctl.cloud.nodes.tpu import TpuApi

    nodespec.check_name(name)
    resolved = settings.resolve({"project": project, "zone": zone, "credentials": credentials, "access_token_file": access_token_file})
    api = TpuApi.connect(resolved)
    where = landed_zone(resolved, name)
    node = api.get_node(where, name)
    if node is None:
        raise TpuctlError(f"no TPU VM {name} in project {api.project}, zone {where}", hint=hint, exit_code=FAILED)
    if kinds and with_kinds(api, [node])[0].flex_start:
        try:  # v2alpha1's view adds when the service deletes it; without it the node is still a flex-start one
            alpha = api.alpha_node(where, name)
        except TpuctlError:
            alpha = None
        return replace(alpha or node, flex_start=True)
    return node


def with_kinds(api: TpuApi, nodes: list[Node]) -> list[Node]:
    """The nodes, those a flex-start queued resource made marked so: only v2alpha1 shows a queued resource's
    provisioningModel, so one v2alpha1 list per zone that has nodes from queued resources. Where v2alpha1 cannot be
    read the nodes stay as v2 shows them (their kind is then the v2 one, never a guess)."""
    zones = sorted({node.zone for node in nodes if node.queued_resource})
    flex: set[tuple[str, str]] = set()
    for zone in zones:
        try:
            flex |= {(zone, last_part(name)) for name in api.flex_start_queued(zone)}
        except TpuctlError:
            continue
    return [replace(node, flex_start=True) if (node.zone, last_part(node.queued_resource)) in flex else node for node in nodes]


def landed_zone(resolved: settings.Settings, name: str) -> str:
    """The zone to look for node `name` in: the one --zone names, else the one its saved spec says `tpuctl create`
    made it in (where a hunt may have landed it), else the zone setting (environment, config files, gcloud's).

    The saved spec outranks the zone setting: most users have gcloud's compute/zone set, and a node tpuctl put
    elsewhere must still be found by name alone."""
    from tpuctl.cloud.nodes import nodespec

    if resolved.source("zone") == "--zone":
        return resolved.zone
    zones = nodespec.saved_zones(resolved.project, name)
    if len(zones) > 1:
        raise TpuctlError(f"tpuctl created a node {name} in several zones of {resolved.project}: {', '.join(zones)}", hint="name one with --zone")
    return zones[0] if zones else resolved.zone


# A queued resource in one of these states is still waiting for or making its node: no leftover.
QUEUED_ON_THE_WAY = ("CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "DELETING")


@dataclass(frozen=True)
class Listed:
    """A listing of zones: their nodes, the queued resources none of whose nodes exist (a SUSPENDED one still counts
    against quota, and no node listing shows it: Cloud TPU docs, queued-resources), and why a zone's could not be read."""

    nodes: list[Node]
    lone_queued: list[tuple[str, Queued]]
    notes: list[str]


def list_zones(api: TpuApi, zones: list[str]) -> Listed:
    """Nodes and queued resources of each zone, all requests at once: ten zones cost about as much as one. A zone whose
    queued resources cannot be read (no tpu.queuedresources.list) still lists its nodes, with a note."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_ZONE_THREADS, 2 * len(zones)))) as pool:
        nodes = [pool.submit(api.list_nodes, zone) for zone in zones]
        queued = [pool.submit(api.list_queued, zone) for zone in zones]
        found = [node for future in nodes for node in future.result()]
        names = {(node.zone, node.name) for node in found}
        lone: list[tuple[str, Queued]] = []
        notes: list[str] = []
        for zone, future in zip(zones, queued, strict=True):
            try:
                lone += [(zone, q) for q in future.result() if not any((zone, n) in names for n in q.node_ids) and q.node_ids]
            except TpuctlError as err:
                notes.append(f"note: queued resources of {zone} not listed: {err.message}")
    return Listed(found, lone, notes)


def short_list(items: list[str], limit: int = 12) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def check_defaults(api: TpuApi, answers: settings.Settings) -> None:
    """The zone exists, offers the accelerator type, and knows the runtime version — else list the choices."""
    zone = answers.zone
    zones = api.zones()
    if zone not in zones:
        raise TpuctlError(f"zone {zone} has no Cloud TPUs for project {api.project}", hint=f"choose one of: {short_list(zones)}")
    wanted = answers.require("accelerator-type")
    offered = [str(a.get("type", "")) for a in api.accelerator_types(zone)]
    if wanted not in offered:
        raise TpuctlError(f"accelerator type {wanted} is not offered in {zone}", hint=f"choose one of: {short_list(offered)}")
    version = answers.require("runtime-version")
    versions = api.runtime_versions(zone)
    if version not in versions:
        raise TpuctlError(f"runtime version {version} does not exist in {zone}", hint=f"choose one of: {short_list(versions)}")

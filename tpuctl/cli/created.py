"""What a create says: the slice's list price before the wait, and where the node landed once it is up.

Shared by the plain create (node_ops) and a hunt (create_hunt), which must say both the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tpuctl.inputs.errors import TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.prices import PriceBook
    from tpuctl.cloud.nodes.lifecycle import Ensured
    from tpuctl.cloud.nodes.node import Node
    from tpuctl.cloud.nodes.nodespec import NodeSpec


def _hosts(node: Node) -> str:
    count = node.host_count
    ips = ", ".join(host.internal_ip for host in node.endpoints if host.internal_ip) or "no hosts yet"
    return f"{count} host{'s' if count != 1 else ''}: {ips}"


def list_price(spec: NodeSpec, book: PriceBook | str) -> dict[str, object] | None:
    """Say on stderr, before the wait, what an hour of the slice costs at list price; where no SKU prices it, say so."""
    from tpuctl.cli.node_info import price_json
    from tpuctl.cloud.capacity.prices import price_text
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


def report(result: Ensured, no_wait: bool) -> None:
    spec = result.spec
    name, zone = spec.name, spec.zone
    what = f"{spec.accelerator()}, {spec.runtime_version}"
    if no_wait:
        verb = "creating" if result.created else "exists:"
        click.echo(f"{verb} {name} ({what}) in {zone}; `tpuctl describe {name}` shows its state")
        return
    verb = "created" if result.created else "reused existing"
    click.echo(f"{verb} {name} ({what}) in {zone}: READY, {_hosts(result.node)}")

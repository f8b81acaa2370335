"""`tpuctl offers TYPE[,TYPE2]`: which zones and capacity kinds offer a TPU type, ranked; `accelerators` is its old name.

Without TYPE it is what `tpuctl accelerators` always was: the types one zone offers.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import age, print_table
from tpuctl.inputs.errors import TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.capacity.gather import Found
    from tpuctl.cloud.nodes.tpu import TpuApi
    from tpuctl.tpu.offers import Offer



def _options(fn: click.decorators.FC) -> click.decorators.FC:
    fn = click.option("--json", "as_json", is_flag=True, help="Offers as a JSON array, best first (no TYPE: the zone's types as the v2 API returns them).")(fn)
    fn = click.option("--model-dir", metavar="gs://BUCKET/PATH", help="Rank zones by their distance to this bucket's location.")(fn)
    fn = click.option("--capacity", default="on-demand,spot", show_default=True, metavar="KIND[,KIND]", help="Capacity kinds, in your order.")(fn)
    fn = click.option("--zones", metavar="all|Z1,Z2,...", help="Zones to look at; `all` (or `auto`): every zone the TPU API lists (the default with TYPE).")(fn)
    fn = zone_option(fn)
    fn = project_options(fn)
    return click.argument("types", required=False, metavar="[TYPE[,TYPE2...]]")(fn)


@click.command("offers")
@_options
def offers(
    types: str | None, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None,
    zones: str | None, capacity: str, model_dir: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Where a TPU type can be had: zone, capacity kind, price per hour, quota left, distance to your bucket, recent stockouts; best first."""
    from tpuctl.settings.cloud import zones_of

    if zone and zones:
        raise TpuctlError("give --zone or --zones, not both")
    wanted = zones_of(zones) if zones else [zone] if zone else None
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    if not types:
        return _zone_types(tpu_api(resolved), wanted or [resolved.require("zone")], as_json)
    from tpuctl.cloud.capacity.candidates import parse_types

    names, kinds = parse_types(types), _kinds(capacity)
    bucket = _bucket(model_dir)
    from tpuctl.cloud.capacity.gather import gather

    found = gather(tpu_api(resolved), resolved, names, kinds, wanted, bucket, lambda line: click.echo(f"tpuctl: {line}", err=True))
    if as_json:
        click.echo(json.dumps([_json(o, found) for o in found.offers], indent=2))
        return
    _table(found)


@click.command("accelerators")
@_options
@click.pass_context
def accelerators(ctx: click.Context, /, **given: Any) -> None:
    """The old name of `tpuctl offers` (without TYPE: the types a zone offers)."""
    ctx.invoke(offers, **given)
    # After the answer: a refusal stays the one error line, as every command's does.
    click.echo("note: `tpuctl accelerators` is now `tpuctl offers`; the same options work there", err=True)


def _kinds(text: str) -> list[str]:
    from tpuctl.tpu.capacity import parse_capacities
    from tpuctl.tpu.offers import KINDS

    return [capacity.kind for capacity in parse_capacities(text, allowed=KINDS)]


def _bucket(model_dir: str | None) -> str | None:
    if not model_dir:
        return None
    from tpuctl.cloud.auth.iam import bucket_of

    return bucket_of(model_dir)


def _zone_types(api: TpuApi, zones: list[str] | None, as_json: bool) -> None:
    """The accelerator types of each zone: `tpuctl accelerators` as it always was, for one or more zones."""
    from tpuctl.cloud.capacity.gather import chosen_zones

    where = chosen_zones(api, zones) if zones is None or len(zones) > 1 else zones
    found = {z: api.accelerator_types(z) for z in where}
    if as_json:
        click.echo(json.dumps(found[where[0]] if len(where) == 1 else found, indent=2))
        return
    if len(where) == 1:
        print_table(["TYPE", "CONFIGURATIONS"], [[str(a.get("type", "")), configs(a)] for a in found[where[0]]])
        return
    print_table(["ZONE", "TYPE", "CONFIGURATIONS"], [[z, str(a.get("type", "")), configs(a)] for z in where for a in found[z]])


def configs(accelerator: dict[str, Any]) -> str:
    return ", ".join(f"{c.get('type', '')} {c.get('topology', '')}" for c in accelerator.get("acceleratorConfigs", []))


def _quota(offer: Offer) -> str:
    from tpuctl.cloud.capacity.quotas import UNLIMITED

    if offer.headroom is None:
        return "unknown"
    if offer.headroom >= UNLIMITED:
        return "unlimited"
    return f"{offer.headroom} chips" + (" (too few: a hunt skips it)" if offer.quota_fits is False else "")


def _stockout(offer: Offer, project: str) -> str:
    from tpuctl.tpu import stockouts

    when = offer.stocked_out_at
    if when is None:
        return "-"
    last = stockouts.latest(project, offer.zone, offer.accelerator_type, offer.kind)
    what = "too slow for a hunt's time" if last is not None and last[1] == stockouts.SLOW else "stocked out"
    return f"{what} {age(max(0.0, time.time() - when))} ago"


def _table(found: Found) -> None:
    from tpuctl.cloud.capacity.prices import price_text
    from tpuctl.tpu.offers import SORT_LINE

    if not found.offers:
        raise TpuctlError("no zone offers these types for these capacity kinds")
    rows = [
        [o.accelerator_type, o.zone, o.region, o.kind, price_text(o.usd_per_hour), _quota(o), o.distance or "-", _stockout(o, found.project)]
        for o in found.offers
    ]
    print_table(["TYPE", "ZONE", "REGION", "CAPACITY", "PRICE/H", "QUOTA LEFT", "BUCKET", "STOCKOUT"], rows)
    click.echo(SORT_LINE)
    click.echo(found.book.describe())
    if found.quota_note:
        click.echo(f"quota unknown: {found.quota_note}")
    for line in found.notes:  # zones left out (an empty type list twice)
        click.echo(f"note: {line}")
    if found.bucket_location is not None:
        click.echo(f"the model dir's bucket is in {found.bucket_location or 'a location it does not name'}")


def _json(offer: Offer, found: Found) -> dict[str, object]:
    from tpuctl.cli.node_info import price_json

    return {
        "acceleratorType": offer.accelerator_type,
        "zone": offer.zone,
        "region": offer.region,
        "capacity": offer.kind,
        "chips": offer.chips,
        "listPrice": price_json(found.book, offer.usd_per_hour),
        "quotaHeadroomChips": offer.headroom,
        "quotaNote": found.quota_note or None,
        "bucketDistance": offer.distance,
        "stockedOutAt": offer.stocked_out_at,
    }

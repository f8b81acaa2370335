"""TPU quota limits per zone and region, from the Cloud Quotas API (cloudquotas.googleapis.com v1).

`GET v1/projects/P/locations/global/services/tpu.googleapis.com/quotaInfos` (paged by pageToken /
nextPageToken, https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos/list)
returns QuotaInfos, each with its `quotaId` and `dimensionsInfos`. A DimensionsInfo
(https://cloud.google.com/docs/quotas/reference/rest/v1/DimensionsInfo) holds `dimensions` ({"zone": Z} or
{"region": R}), `details.value` (an int64, a string in JSON; -1 is unlimited) and `applicableLocations`. The one
without dimensions is the quota's default: it "applies to all the dimension values except for those that have
another DimensionsInfo", in the locations its applicableLocations lists (['global'] or none: everywhere).
`details` present without `value` is 0: proto3's JSON leaves a zero int64 out. Which ids a slice draws on, and
their unit, is tpuctl/tpu/quota_ids.py's table. A quota tpuctl cannot find or read is unknown, never 0: a
wrong "no quota" would hide the zone that works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote

from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings.cloud import Settings

UNLIMITED = 2**31  # details.value -1: no limit; shown as "unlimited"
MAX_PAGES = 20  # tpu.googleapis.com has a few dozen quotas; more pages is a reply gone wrong
_SCOPES = ("zone", "region")


@dataclass(frozen=True)
class Limits:
    """One quota's limits as its QuotaInfo gives them, in the quota's own unit."""

    own: dict[str, int]  # a zone or region -> its own limit
    default: int | None = None  # the DimensionsInfo without dimensions
    default_at: frozenset[str] | None = None  # where the default applies; None: every location without its own

    def at(self, location: str) -> int | None:
        if location in self.own:
            return self.own[location]
        if self.default is not None and (self.default_at is None or location in self.default_at):
            return self.default
        return None


def read_limits(infos: list[Any]) -> dict[str, Limits]:
    """Each quota's limits by its id; a DimensionsInfo tpuctl cannot read is left out (its location reads unknown)."""
    own: dict[str, dict[str, int]] = {}
    defaults: dict[str, tuple[int, frozenset[str] | None]] = {}
    for info in (_map(i) for i in infos):
        quota_id, entries = info.get("quotaId"), info.get("dimensionsInfos")
        if not isinstance(quota_id, str):
            continue
        mine = own.setdefault(quota_id, {})
        for entry in (_map(e) for e in (entries if isinstance(entries, list) else [])):
            value, dimensions = _value(entry.get("details")), _map(entry.get("dimensions"))
            where = next((str(dimensions[s]) for s in _SCOPES if isinstance(dimensions.get(s), str)), None)
            if value is None or (dimensions and where is None):  # unreadable, or a dimension TPU quotas do not have
                continue
            if where is None:
                defaults[quota_id] = (value, _locations(entry.get("applicableLocations")))
            else:
                mine[where] = value
    return {quota_id: Limits(limits, *defaults.get(quota_id, (None, None))) for quota_id, limits in own.items()}


def limit(limits: Mapping[str, Limits], quota_id: str | None, location: str) -> int | None:
    """The quota's limit in a zone or region (UNLIMITED for none); None when tpuctl knows no such id or the reply
    has no entry for the location."""
    read = limits.get(quota_id) if quota_id else None
    return None if read is None else read.at(location)


def read(settings: Settings, project: str) -> list[Any] | str:
    """The project's TPU QuotaInfos, or the one line saying why they could not be read."""
    from tpuctl.cloud.auth import credentials
    from tpuctl.cloud.plumbing import retry
    from tpuctl.cloud.plumbing.api_errors import Where, explained
    from tpuctl.cloud.plumbing.rest import RestApi

    endpoint = settings.require("quotas-endpoint")
    where = Where("read TPU quotas", project, None, "cloudquotas.quotas.get", "cloudquotas.googleapis.com", "roles/cloudquotas.viewer")
    path = f"v1/projects/{project}/locations/global/services/tpu.googleapis.com/quotaInfos"
    try:
        api = RestApi(credentials.load(settings), endpoint)
        infos: list[Any] = []
        page_of = lambda token: explained(partial(api.call, "GET", path + (f"?pageToken={quote(token)}" if token else "")), where)  # noqa: E731
        for reply in retry.pages(page_of, f"the Cloud Quotas API at {endpoint}", MAX_PAGES):
            page = reply.get("quotaInfos")
            infos += page if isinstance(page, list) else []
        return infos
    except (TpuctlError, retry.Endless) as err:
        return str(err)
    except ValueError:
        return f"the Cloud Quotas API at {endpoint} did not answer with JSON"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _value(details: object) -> int | None:
    """QuotaDetails.value: -1 unlimited, absent 0 (proto3 JSON), anything else unreadable (None)."""
    if not isinstance(details, Mapping):
        return None
    if "value" not in details:
        return 0
    try:
        number = int(str(details["value"]))
    except ValueError:
        return None
    if number == -1:
        return UNLIMITED
    return number if 0 <= number < UNLIMITED else None


def _locations(value: object) -> frozenset[str] | None:
    if not isinstance(value, list) or not value or "global" in value:
        return None
    return frozenset(str(v) for v in value)

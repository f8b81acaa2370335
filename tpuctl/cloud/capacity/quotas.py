"""TPU quota per zone and capacity kind, from the Cloud Quotas API (cloudquotas.googleapis.com v1).

`GET v1/projects/P/locations/global/services/tpu.googleapis.com/quotaInfos` (paged by pageToken /
nextPageToken, https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos/list)
returns QuotaInfos; each DimensionsInfo holds `dimensions` ({"zone": Z} for per-zone quotas) and
`details.value` (an int64, a string in JSON; -1 is unlimited). Cloud TPU keeps one quota per generation
and kind (on-demand, preemptible, reserved: https://cloud.google.com/tpu/docs/quota); their ids have
the form the API's own quota errors print, e.g. TPUV2sPodPerProjectPerZoneForTPUAPI. A quota tpuctl
cannot find or read is unknown, never guessed: a wrong "no quota" would hide the zone that works.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any
from urllib.parse import quote

from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings.cloud import Settings
from tpuctl.tpu.accelerators import Shape
from tpuctl.tpu.capacity import SPOT

UNLIMITED = 2**31  # details.value -1: no limit; shown as "unlimited"
MAX_PAGES = 20  # tpu.googleapis.com has a few dozen quotas; more pages is a reply gone wrong
# tpuctl's generation -> the word its quota ids start with. v2 and v3 slices of more than one host
# have their own Pod quotas (TPUV2sPod...), single devices the plain ones.
_QUOTA_WORD = {"v2": "TPUV2s", "v3": "TPUV3s", "v4": "TPUV4", "v5litepod": "TPUV5sLitepod", "v5p": "TPUV5p", "v6e": "TPUV6e"}
# v2 and v3 quotas count TensorCores ("v3-8 and v2-8: 16 TensorCores", tpu/docs/quota); the others chips.
_COUNTS_CORES = frozenset({"v2", "v3"})

Limits = dict[tuple[str, str], int]  # (zone, kind) -> chips of quota


def quota_id(shape: Shape, kind: str) -> str | None:
    word = _QUOTA_WORD.get(shape.generation)
    if word is None:
        return None
    pod = "Pod" if shape.generation in _COUNTS_CORES and shape.hosts > 1 else ""
    return f"{word}{pod}{'Preemptible' if kind == SPOT else ''}PerProjectPerZoneForTPUAPI"


def limits(infos: list[Any], shape: Shape, kinds: tuple[str, ...]) -> Limits:
    """Per-zone limits in chips of `shape`'s quota for each kind; zones absent from the reply are absent here."""
    per_chip = 2 if shape.generation in _COUNTS_CORES else 1
    found: Limits = {}
    for kind in kinds:
        wanted = quota_id(shape, kind)
        for info in infos:
            if not isinstance(info, Mapping) or info.get("quotaId") != wanted:
                continue
            for dims in info.get("dimensionsInfos") or []:
                zone = _map(_map(dims).get("dimensions")).get("zone")
                value = _int(_map(_map(dims).get("details")).get("value"))
                if isinstance(zone, str) and value is not None:
                    found[(zone, kind)] = UNLIMITED if value == -1 else value // per_chip
    return found


def read(settings: Settings, project: str) -> list[Any] | str:
    """The project's TPU QuotaInfos, or the one line saying why they could not be read."""
    from tpuctl.cloud import credentials
    from tpuctl.cloud.api_errors import Where, explained
    from tpuctl.cloud.rest import RestApi

    endpoint = settings.require("quotas-endpoint")
    where = Where("read TPU quotas", project, None, "cloudquotas.quotas.get", "cloudquotas.googleapis.com", "roles/cloudquotas.viewer")
    path = f"v1/projects/{project}/locations/global/services/tpu.googleapis.com/quotaInfos"
    try:
        api = RestApi(credentials.load(settings), endpoint)
        infos: list[Any] = []
        token = ""
        for _ in range(MAX_PAGES):
            reply = explained(partial(api.call, "GET", path + (f"?pageToken={quote(token)}" if token else "")), where)
            page = reply.get("quotaInfos")
            infos += page if isinstance(page, list) else []
            token = str(reply.get("nextPageToken") or "")
            if not token:
                return infos
        return f"the Cloud Quotas API at {endpoint} was still paging after {MAX_PAGES} pages"
    except TpuctlError as err:
        return str(err)
    except ValueError:
        return f"the Cloud Quotas API at {endpoint} did not answer with JSON"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: object) -> int | None:
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if -1 <= number < UNLIMITED else None

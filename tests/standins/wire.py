"""Google's JSON wire conventions for the stand-in: error replies, body checking, enums.

Google's JSON APIs answer every failure as
``{"error": {"code": HTTP, "message": ..., "status": CANONICAL, "details": [...]}}``;
google-api-core picks the exception class from the HTTP status and reads
ErrorInfo from ``details``. Building every error here keeps those shapes
identical across the TPU, Resource Manager, ml and serviceusage surfaces.

Enums travel as names by default, but google-cloud-tpu's REST transport sends
them as numbers in request bodies and asks for numbers back with
``$alt=json;enum-encoding=int``; both directions are handled here.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

JSON = dict[str, Any]

# Canonical status name for each HTTP status the stand-in sends.
STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# google.rpc.Code numbers, for errors carried inside a finished Operation.
RPC_CODES: dict[str, int] = {
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
}

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


class ApiError(Exception):
    """An error reply: raised anywhere inside a handler, rendered once by the server."""

    def __init__(self, code: int, message: str, status: str | None = None, details: list[JSON] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS_NAMES.get(code, "UNKNOWN")
        self.details = details or []

    def body(self) -> JSON:
        error: JSON = {"code": self.code, "message": self.message, "status": self.status}
        if self.details:
            error["details"] = self.details
        return {"error": error}


def not_found(resource: str) -> ApiError:
    return ApiError(
        404,
        f"Resource '{resource}' was not found",
        details=[{"@type": "type.googleapis.com/google.rpc.ResourceInfo", "resourceName": resource}],
    )


def already_exists(resource: str) -> ApiError:
    return ApiError(409, f"Resource '{resource}' already exists", "ALREADY_EXISTS")


def invalid(message: str, field: str | None = None) -> ApiError:
    details = [{"@type": BAD_REQUEST, "fieldViolations": [{"field": field, "description": message}]}] if field else []
    return ApiError(400, message, "INVALID_ARGUMENT", details)


def failed_precondition(message: str) -> ApiError:
    return ApiError(400, message, "FAILED_PRECONDITION")


def permission_denied(permission: str, resource: str, domain: str) -> ApiError:
    return ApiError(
        403,
        f"Permission '{permission}' denied on resource '{resource}' (or it may not exist).",
        details=[
            {
                "@type": ERROR_INFO,
                "reason": "IAM_PERMISSION_DENIED",
                "domain": "iam.googleapis.com",
                "metadata": {"permission": permission, "resource": resource, "service": domain},
            }
        ],
    )


def unknown_project(project: str, service: str) -> ApiError:
    return ApiError(
        403,
        f"Permission denied on resource project {project}.",
        details=[
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [{"description": "Google developers console", "url": "https://console.developers.google.com"}],
            },
            {
                "@type": ERROR_INFO,
                "reason": "CONSUMER_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": service, "consumer": f"projects/{project}"},
            },
        ],
    )


def service_disabled(service: str, title: str, project_number: int) -> ApiError:
    url = f"https://console.developers.google.com/apis/api/{service}/overview?project={project_number}"
    message = (
        f"{title} has not been used in project {project_number} before or it is disabled. Enable it by visiting {url} "
        "then retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry."
    )
    return ApiError(
        403,
        message,
        details=[
            {
                "@type": ERROR_INFO,
                "reason": "SERVICE_DISABLED",
                "domain": "googleapis.com",
                "metadata": {
                    "service": service,
                    "consumer": f"projects/{project_number}",
                    "serviceTitle": title,
                    "activationUrl": url,
                    "containerInfo": str(project_number),
                },
            },
            {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": message},
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [{"description": "Google developers console API activation", "url": url}],
            },
        ],
    )


def unauthenticated() -> ApiError:
    return ApiError(
        401,
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid "
        "authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        details=[{"@type": ERROR_INFO, "reason": "ACCESS_TOKEN_TYPE_UNSUPPORTED", "domain": "googleapis.com", "metadata": {}}],
    )


def transient(status: int, service: str, project_number: int) -> ApiError:
    """The three transient failures Google fronts return, by HTTP status."""
    if status == 429:
        return ApiError(
            429,
            f"Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service '{service}' "
            f"for consumer 'project_number:{project_number}'.",
            details=[
                {
                    "@type": ERROR_INFO,
                    "reason": "RATE_LIMIT_EXCEEDED",
                    "domain": "googleapis.com",
                    "metadata": {
                        "service": service,
                        "consumer": f"projects/{project_number}",
                        "quota_metric": f"{service}/requests",
                        "quota_limit": "RequestsPerMinutePerProject",
                    },
                }
            ],
        )
    if status == 500:
        return ApiError(500, "Internal error encountered.")
    if status == 504:
        return ApiError(504, "The request timed out. Please try again.")
    return ApiError(status, "The service is currently unavailable.", STATUS_NAMES.get(status, "UNAVAILABLE"))


def rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def page(items: list[JSON], key: str, query: dict[str, str]) -> JSON:
    """One page of a list reply; empty lists are omitted entirely, as proto3 JSON does."""
    try:
        size = int(query.get("pageSize", "0") or 0)
        start = int(base64.urlsafe_b64decode(query["pageToken"]).decode()) if query.get("pageToken") else 0
    except ValueError:
        raise invalid("Invalid page token or page size.", "page_token") from None
    chunk = items[start:] if size <= 0 else items[start : start + size]
    reply: JSON = {key: chunk} if chunk else {}
    if size > 0 and start + size < len(items):
        reply["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
    return reply


# --- request and reply bodies ------------------------------------------------------------------
#
# A field kind is "str", "bool", "int", "map" (string->string), "strs" (list of strings),
# "any" (accepted unchecked), an Enum, or a nested schema dict / a one-element list of one.

Schema = dict[str, Any]


class Enum:
    """A proto enum: the JSON name <-> number table of one field."""

    def __init__(self, proto: str, values: dict[str, int]) -> None:
        self.proto = proto
        self.values = values
        self.names = {v: k for k, v in values.items()}


NODE_STATE = Enum(
    "google.cloud.tpu.v2.Node.State",
    {"STATE_UNSPECIFIED": 0, "CREATING": 1, "READY": 2, "RESTARTING": 3, "REIMAGING": 4, "DELETING": 5, "REPAIRING": 6,
     "STOPPED": 8, "STOPPING": 9, "STARTING": 10, "PREEMPTED": 11, "TERMINATED": 12, "HIDING": 13, "HIDDEN": 14,
     "UNHIDING": 15, "UNKNOWN": 16},
)  # fmt: skip
NODE_HEALTH = Enum(
    "google.cloud.tpu.v2.Node.Health",
    {"HEALTH_UNSPECIFIED": 0, "HEALTHY": 1, "TIMEOUT": 3, "UNHEALTHY_TENSORFLOW": 4, "UNHEALTHY_MAINTENANCE": 5},
)
API_VERSION = Enum("google.cloud.tpu.v2.Node.ApiVersion", {"API_VERSION_UNSPECIFIED": 0, "V1_ALPHA1": 1, "V1": 2, "V2_ALPHA1": 3, "V2": 4})
ACCELERATOR_TYPE = Enum(
    "google.cloud.tpu.v2.AcceleratorConfig.Type",
    {"TYPE_UNSPECIFIED": 0, "V2": 2, "V3": 4, "V4": 7, "V5LITE_POD": 9, "V5P": 10, "V6E": 11},
)
DISK_MODE = Enum("google.cloud.tpu.v2.AttachedDisk.DiskMode", {"DISK_MODE_UNSPECIFIED": 0, "READ_WRITE": 1, "READ_ONLY": 2})
QUEUED_STATE = Enum(
    "google.cloud.tpu.v2.QueuedResourceState.State",
    {"STATE_UNSPECIFIED": 0, "CREATING": 1, "ACCEPTED": 2, "PROVISIONING": 3, "FAILED": 4, "DELETING": 5, "ACTIVE": 6,
     "SUSPENDING": 7, "SUSPENDED": 8, "WAITING_FOR_RESOURCES": 9},
)  # fmt: skip
STATE_INITIATOR = Enum(
    "google.cloud.tpu.v2.QueuedResourceState.StateInitiator", {"STATE_INITIATOR_UNSPECIFIED": 0, "USER": 1, "SERVICE": 2}
)

ACCELERATOR_CONFIG: Schema = {"type": ACCELERATOR_TYPE, "topology": "str"}
ACCESS_CONFIG: Schema = {"externalIp": "str"}
NETWORK_ENDPOINT: Schema = {"ipAddress": "str", "port": "int", "accessConfig": ACCESS_CONFIG}
NETWORK_CONFIG: Schema = {"network": "str", "subnetwork": "str", "enableExternalIps": "bool", "canIpForward": "bool", "queueCount": "int"}
NODE: Schema = {
    "name": "str",
    "description": "str",
    "acceleratorType": "str",
    "state": NODE_STATE,
    "healthDescription": "str",
    "runtimeVersion": "str",
    "networkConfig": NETWORK_CONFIG,
    "networkConfigs": [NETWORK_CONFIG],
    "cidrBlock": "str",
    "serviceAccount": {"email": "str", "scope": "strs"},
    "createTime": "str",
    "schedulingConfig": {"preemptible": "bool", "reserved": "bool", "spot": "bool"},
    "networkEndpoints": [NETWORK_ENDPOINT],
    "health": NODE_HEALTH,
    "labels": "map",
    "metadata": "map",
    "tags": "strs",
    "id": "any",
    "dataDisks": [{"sourceDisk": "str", "mode": DISK_MODE}],
    "apiVersion": API_VERSION,
    "symptoms": "any",
    "shieldedInstanceConfig": {"enableSecureBoot": "bool"},
    "acceleratorConfig": ACCELERATOR_CONFIG,
    "queuedResource": "str",
    "multisliceNode": "bool",
    "upcomingMaintenance": "any",
}
QUEUED_RESOURCE: Schema = {
    "name": "str",
    "createTime": "str",
    "tpu": {
        "nodeSpec": [{"parent": "str", "nodeId": "str", "multisliceParams": {"nodeCount": "int", "nodeIdPrefix": "str"}, "node": NODE}]
    },
    "spot": {},
    "guaranteed": {"minDuration": "str"},
    "queueingPolicy": {
        "validUntilDuration": "str",
        "validUntilTime": "str",
        "validAfterDuration": "str",
        "validAfterTime": "str",
        "validInterval": {"startTime": "str", "endTime": "str"},
    },
    "state": {
        "state": QUEUED_STATE,
        "stateInitiator": STATE_INITIATOR,
        **{
            k: "any"
            for k in (
                "creatingData",
                "acceptedData",
                "provisioningData",
                "failedData",
                "deletingData",
                "activeData",
                "suspendingData",
                "suspendedData",
            )
        },
    },
    "reservationName": "str",
}
ACCELERATOR_TYPE_REPLY: Schema = {"name": "str", "type": "str", "acceleratorConfigs": [ACCELERATOR_CONFIG]}
POLICY: Schema = {
    "version": "int",
    "etag": "str",
    "bindings": [
        {"role": "str", "members": "strs", "condition": {"expression": "str", "title": "str", "description": "str", "location": "str"}}
    ],
    "auditConfigs": "any",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def normalize(value: Any, schema: Schema, where: str) -> JSON:
    """Check a JSON object against a schema and return it with camelCase keys.

    Google's JSON parser accepts both lowerCamel and the proto's snake_case
    names and rejects anything else with the exact wording used here, so a
    client that misspells a field fails here the way it would in production.
    """
    if not isinstance(value, dict):
        raise invalid(f"Invalid JSON payload received. Expected an object at '{where}'.", where)
    out: JSON = {}
    for key, item in value.items():
        name = _camel(key) if "_" in key else key
        if name not in schema:
            message = f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
            raise invalid(message, where)
        out[name] = _check(item, schema[name], f"{where}.{_snake(name)}")
    return out


def _check(value: Any, kind: Any, where: str) -> Any:
    if isinstance(kind, Enum):
        if isinstance(value, str) and value in kind.values:
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value in kind.names:
            return kind.names[value]
        raise invalid(f"Invalid value at '{where}' (type.googleapis.com/{kind.proto}), {json.dumps(value)}", where)
    if isinstance(kind, dict):
        return normalize(value, kind, where)
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise invalid(f"Invalid value at '{where}': expected a list.", where)
        return [_check(item, kind[0], f"{where}[{i}]") for i, item in enumerate(value)]
    checks: dict[str, Callable[[Any], bool]] = {
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v.lstrip("-").isdigit()),
        "map": lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "strs": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "any": lambda v: True,
    }
    ok = checks[kind](value)
    if not ok:
        raise invalid(f"Invalid value at '{where}' ({kind}), {value!r}", where)
    return int(value) if kind == "int" else value


# Reply shapes whose enums are re-encoded as numbers on request.
REPLY_SCHEMAS: dict[str, Schema] = {
    "nodes": NODE,
    "queuedResources": QUEUED_RESOURCE,
    "acceleratorTypes": ACCELERATOR_TYPE_REPLY,
}
ANY_SCHEMAS: dict[str, Schema] = {
    "type.googleapis.com/google.cloud.tpu.v2.Node": NODE,
    "type.googleapis.com/google.cloud.tpu.v2.QueuedResource": QUEUED_RESOURCE,
}


def enums_as_numbers(value: Any, schema: Schema | None) -> Any:
    """A copy of a reply with enum names replaced by numbers (``$alt=json;enum-encoding=int``).

    Without a schema the shape is guessed from the reply: a list reply, an
    Operation (whose ``response`` names its type), or a Node / QueuedResource /
    AcceleratorType itself.
    """
    if schema is None:
        if not isinstance(value, dict):
            return value
        if isinstance(value.get("operations"), list):
            return {**value, "operations": [enums_as_numbers(op, None) for op in value["operations"]]}
        if "done" in value:
            response = value.get("response")
            if isinstance(response, dict) and response.get("@type") in ANY_SCHEMAS:
                return {**value, "response": enums_as_numbers(response, ANY_SCHEMAS[response["@type"]])}
            return value
        for key, item_schema in REPLY_SCHEMAS.items():
            if isinstance(value.get(key), list):
                return {**value, key: [enums_as_numbers(v, item_schema) for v in value[key]]}
        if "acceleratorConfigs" in value:
            return enums_as_numbers(value, ACCELERATOR_TYPE_REPLY)
        if "tpu" in value and "state" in value:
            return enums_as_numbers(value, QUEUED_RESOURCE)
        if "acceleratorType" in value or "runtimeVersion" in value:
            return enums_as_numbers(value, NODE)
        return value
    out: JSON = {}
    for key, item in value.items():
        kind = schema.get(key)
        if isinstance(kind, Enum) and isinstance(item, str):
            out[key] = kind.values.get(item, item)
        elif isinstance(kind, dict) and isinstance(item, dict):
            out[key] = enums_as_numbers(item, kind)
        elif isinstance(kind, list) and isinstance(kind[0], dict) and isinstance(item, list):
            out[key] = [enums_as_numbers(v, kind[0]) if isinstance(v, dict) else v for v in item]
        else:
            out[key] = item
    return out

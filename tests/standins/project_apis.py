"""Cloud Resource Manager v1, ml v1, Service Usage, and the IAM policies of buckets
(Cloud Storage JSON API) and service accounts (IAM v1) as the stand-in serves them.

Each of these APIs is a handful of project-level calls for tpuctl (project
number, IAM read-modify-write, service agents); they share the project's
identity and policy, so they live together, apart from the TPU API.

Buckets and service accounts exist only once a test adds them (`add_bucket`,
`add_service_account`); Vertex AI's service agents exist only once
generateServiceIdentity was asked for aiplatform.googleapis.com, and a policy
naming one before that is refused, as Google refuses a principal that does not exist.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tests.standins.wire import JSON, POLICY, ApiError, invalid, normalize

if TYPE_CHECKING:
    from tests.standins.google_apis import GoogleStandin

# service name -> title used in SERVICE_DISABLED messages
SERVICE_TITLES: dict[str, str] = {
    "tpu.googleapis.com": "Cloud TPU API",
    "cloudresourcemanager.googleapis.com": "Cloud Resource Manager API",
    "ml.googleapis.com": "AI Platform Training & Prediction API",
    "serviceusage.googleapis.com": "Service Usage API",
    "compute.googleapis.com": "Compute Engine API",
    "iam.googleapis.com": "Identity and Access Management (IAM) API",
    "aiplatform.googleapis.com": "Vertex AI API",
    "storage.googleapis.com": "Cloud Storage API",
    "logging.googleapis.com": "Cloud Logging API",
    "cloudquotas.googleapis.com": "Cloud Quotas API",
}
_AGENT = re.compile(r"serviceAccount:service-[0-9]+@gcp-sa-aiplatform(-cc)?\.iam\.gserviceaccount\.com\Z")
_MEMBER = re.compile(
    r"(user|serviceAccount|group|domain|deleted:(user|serviceAccount|group)|projectOwner|projectEditor|projectViewer):\S+\Z|principal(Set)?://\S+\Z"
)


class ProjectApis:
    """Project-level state (the IAM policy) and the handlers of the non-TPU routes."""

    def __init__(self, host: GoogleStandin) -> None:
        self.host = host
        self._etag_count = 0
        self.policy: JSON = {
            "version": 1,
            "bindings": [
                {
                    "role": "roles/editor",
                    "members": [
                        f"serviceAccount:{self.host.project_number}-compute@developer.gserviceaccount.com",
                        f"serviceAccount:{self.host.project_number}@cloudservices.gserviceaccount.com",
                    ],
                },
                {"role": "roles/owner", "members": ["user:dev@example.com"]},
            ],
        }
        self.policy["etag"] = self._next_etag()
        self.buckets: dict[str, JSON] = {}  # bucket name -> its IAM policy
        self.bucket_locations: dict[str, str] = {}  # bucket name -> its location, as Cloud Storage spells it (US-CENTRAL1, EU, NAM4)
        # Cloud Quotas: quotaId -> {zone or region: limit} of service tpu.googleapis.com (value -1: unlimited); a
        # ...PerProjectPerRegion... id's keys are regions. tpu_quota_defaults: quotaId -> the default DimensionsInfo's value.
        self.tpu_quotas: dict[str, dict[str, int]] = {}
        self.tpu_quota_defaults: dict[str, int] = {}
        self.quota_page_size = 2  # small, so that every client has to follow nextPageToken
        self.service_accounts: dict[str, JSON] = {}  # email -> its IAM policy
        self.agents: set[str] = set()  # service agents created by generateServiceIdentity

    def replace_policy(self, policy: Mapping[str, Any]) -> None:
        self.policy = {
            "version": int(policy.get("version", 1)),
            "bindings": copy.deepcopy(list(policy.get("bindings", []))),
            "etag": self._next_etag(),
        }

    def _next_etag(self) -> str:
        self._etag_count += 1
        return base64.b64encode(b"\x07\x06" + (self.host.seed % 65536).to_bytes(2, "big") + self._etag_count.to_bytes(4, "big")).decode()

    def crm_get_project(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return {
            "projectNumber": str(self.host.project_number),
            "projectId": self.host.project,
            "lifecycleState": "ACTIVE",
            "name": self.host.project,
            "createTime": "2024-01-15T10:00:00.000Z",
        }

    def _render_policy(self, requested: int) -> JSON:
        """The stored policy as getIamPolicy returns it for a requested version.

        Conditional bindings are only shown as such at version 3; below that
        Google rewrites the role to ROLE_withcond_HASH and drops the condition.
        """
        policy = copy.deepcopy(self.policy)
        conditional = any("condition" in b for b in policy["bindings"])
        if conditional and requested < 3:
            for binding in policy["bindings"]:
                condition = binding.pop("condition", None)
                if condition is not None:
                    digest = hashlib.sha256(json.dumps(condition, sort_keys=True).encode()).hexdigest()[:20]
                    binding["role"] = f"{binding['role']}_withcond_{digest}"
            policy["version"] = 1
        else:
            policy["version"] = 3 if conditional else 1
        if not policy["bindings"]:
            del policy["bindings"]
        return policy

    def crm_get_policy(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        options = body.get("options") or {}
        requested = int(options.get("requestedPolicyVersion", 0) or 0) if isinstance(options, dict) else 0
        if requested not in (0, 1, 3):
            raise invalid(f"Invalid requested policy version {requested}; valid versions are 1 and 3.", "options.requested_policy_version")
        return self._render_policy(requested)

    def crm_test_permissions(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        """The requested permissions the caller holds: all but the denied ones (an empty answer is `{}`)."""
        asked = body.get("permissions") or []
        held = [p for p in asked if isinstance(p, str) and p not in self.host.faults.denied_permissions]
        return {"permissions": held} if held else {}

    def _check_agents(self, policy: JSON) -> None:
        for binding in policy.get("bindings") or []:
            for member in binding.get("members") or []:
                if _AGENT.match(member) and member.partition(":")[2] not in self.agents:
                    raise invalid(f"Service account {member.partition(':')[2]} does not exist.", "policy.bindings.members")

    def crm_set_policy(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        request = normalize(body, {"policy": POLICY, "updateMask": "str"}, "request")
        self._check_agents(request.get("policy") or {})
        if "policy" not in request:
            raise invalid("The request must contain a policy.", "policy")
        policy = request["policy"]
        etag = policy.get("etag")
        if etag and etag != self.policy["etag"]:
            raise ApiError(
                409, "There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff.", "ABORTED"
            )
        version = int(policy.get("version", 1) or 1)
        if version not in (1, 3):
            raise invalid(f"Invalid policy version {version}; valid versions are 1 and 3.", "policy.version")
        merged: dict[tuple[str, str], JSON] = {}
        for binding in policy.get("bindings", []):
            role, members, condition = binding.get("role", ""), binding.get("members", []), binding.get("condition")
            if not re.fullmatch(r"(roles|projects/[^/]+/roles|organizations/[0-9]+/roles)/[A-Za-z0-9_.]+", role):
                raise invalid(f"Role ({role}) does not exist in the resource's hierarchy.", "policy.bindings.role")
            if condition is not None and version < 3:
                raise invalid("Policies with conditional role bindings must set version 3.", "policy.version")
            if condition is not None and not condition.get("expression"):
                raise invalid("A condition needs an expression.", "policy.bindings.condition.expression")
            for member in members:
                if member in ("allUsers", "allAuthenticatedUsers"):
                    raise invalid(f"Principal {member} is not allowed on a project policy.", "policy.bindings.members")
                if not _MEMBER.match(member):
                    raise invalid(
                        f"Invalid principal '{member}': it needs a type prefix such as user:, serviceAccount: or group:.",
                        "policy.bindings.members",
                    )
            if not members:
                continue  # Google drops bindings without members
            key = (role, json.dumps(condition, sort_keys=True) if condition else "")
            entry = merged.setdefault(key, {"role": role, "members": [], **({"condition": condition} if condition else {})})
            entry["members"] = sorted(set(entry["members"]) | set(members))
        fields = {f.strip() for f in request.get("updateMask", "bindings,etag").split(",")}
        stored: JSON = {"version": 3 if any("condition" in b for b in merged.values()) else 1, "bindings": self.policy["bindings"]}
        if "bindings" in fields:
            stored["bindings"] = sorted(merged.values(), key=lambda b: (b["role"], json.dumps(b.get("condition", {}), sort_keys=True)))
        audit = policy.get("auditConfigs") if "auditConfigs" in fields else self.policy.get("auditConfigs")
        if audit:
            stored["auditConfigs"] = audit
        stored["etag"] = self._next_etag()
        self.policy = stored
        return self._render_policy(3)

    def ml_get_config(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        n = self.host.project_number
        return {
            "serviceAccount": f"service-{n}@cloud-ml.google.com.iam.gserviceaccount.com",
            "serviceAccountProject": str(n),
            "config": {"tpuServiceAccount": f"service-{n}@cloud-tpu.iam.gserviceaccount.com"},
        }

    def service_agent(self, service: str) -> str:
        """The Google-managed service agent email of `service` in this project."""
        n = self.host.project_number
        known = {
            "tpu.googleapis.com": f"service-{n}@cloud-tpu.iam.gserviceaccount.com",
            "ml.googleapis.com": f"service-{n}@cloud-ml.google.com.iam.gserviceaccount.com",
            "compute.googleapis.com": f"service-{n}@compute-system.iam.gserviceaccount.com",
        }
        return known.get(service, f"service-{n}@gcp-sa-{service.split('.')[0]}.iam.gserviceaccount.com")

    def su_generate_identity(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        service = params["s"]
        if service == "aiplatform.googleapis.com":  # every project-level agent of the service; the primary one is named
            n = self.host.project_number
            self.agents |= {f"service-{n}@gcp-sa-aiplatform.iam.gserviceaccount.com", f"service-{n}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"}
        unique = str(int(hashlib.sha256(f"{service}/{self.host.project_number}".encode()).hexdigest(), 16) % 10**21).rjust(21, "1")
        return {
            "name": "operations/finished.DONE_OPERATION",
            "done": True,
            "response": {
                "@type": "type.googleapis.com/google.api.serviceusage.v1beta1.ServiceIdentity",
                "email": self.service_agent(service),
                "uniqueId": unique,
            },
        }

    def su_get_service(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        service = params["s"]
        return {
            "name": f"projects/{self.host.project_number}/services/{service}",
            "config": {"name": service, "title": SERVICE_TITLES.get(service, service)},
            "state": "DISABLED" if service in self.host.faults.disabled_apis else "ENABLED",
            "parent": f"projects/{self.host.project_number}",
        }

    def su_enable(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        self.host.faults.disabled_apis.discard(params["s"])
        return {
            "name": "operations/noop.DONE_OPERATION",
            "done": True,
            "response": {
                "@type": "type.googleapis.com/google.api.serviceusage.v1.EnableServiceResponse",
                "service": self.su_get_service(params, query, body),
            },
        }

    # --- Cloud Storage JSON API: bucket IAM (storage/v1/b/B/iam) ------------------------------------

    def add_bucket(self, name: str, location: str = "US") -> None:
        """A bucket of the project with the policy a new bucket has: the legacy project-role bindings."""
        p = self.host.project
        self.bucket_locations[name] = location
        self.buckets[name] = {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{name}",
            "version": 1,
            "bindings": [
                {"role": "roles/storage.legacyBucketOwner", "members": [f"projectEditor:{p}", f"projectOwner:{p}"]},
                {"role": "roles/storage.legacyBucketReader", "members": [f"projectViewer:{p}"]},
            ],
            "etag": "CAE=",
        }

    def _bucket(self, name: str) -> JSON:
        if name not in self.buckets:
            raise ApiError(404, "The specified bucket does not exist.", "NOT_FOUND")
        return self.buckets[name]

    def storage_get_bucket(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        """buckets.get: the Bucket resource's fields a reader of its location sees (storage/docs/json_api/v1/buckets).

        Here rather than in gcp-storage-emulator: its buckets.insert ignores the requested location (every
        bucket is "US", multi-region), and offers' distance needs regions and dual-regions."""
        name = params["b"]
        self._bucket(name)
        location = self.bucket_locations[name]
        kind = "region" if "-" in location else "dual-region" if location[-1].isdigit() else "multi-region"
        return {"kind": "storage#bucket", "id": name, "name": name, "location": location, "locationType": kind, "storageClass": "STANDARD"}

    # --- Cloud Quotas v1: quotaInfos of a service ----------------------------------------------------

    def quota_infos(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        """quotaInfos.list, paged by pageToken (an index here, opaque to clients), as Cloud Quotas v1 serves them
        (docs/quotas/reference/rest/v1/DimensionsInfo): one DimensionsInfo per zone or region with a value of its own,
        and the default one without `dimensions`, which applies to every location without its own, listed in its
        applicableLocations. A zero value is left out of `details` ({}), as proto3's JSON leaves out a zero int64."""
        if params["s"] != "tpu.googleapis.com":
            return {}
        number = self.host.project_number
        infos = []
        for quota_id in sorted(set(self.tpu_quotas) | set(self.tpu_quota_defaults)):
            scope = "region" if "PerProjectPerRegion" in quota_id else "zone"
            own = self.tpu_quotas.get(quota_id, {})
            entries: list[JSON] = [
                {"dimensions": {scope: where}, "details": _details(value), "applicableLocations": [where]} for where, value in sorted(own.items())
            ]
            if quota_id in self.tpu_quota_defaults:
                zones = sorted(self.host.tpu.zones)
                locations = sorted({z.rsplit("-", 1)[0] for z in zones}) if scope == "region" else zones
                entries.append({"details": _details(self.tpu_quota_defaults[quota_id]), "applicableLocations": locations})
            stem = quota_id.removesuffix("PerProjectPerRegionForTPUAPI").removesuffix("PerProjectPerZoneForTPUAPI")
            infos.append({
                "name": f"projects/{number}/locations/global/services/tpu.googleapis.com/quotaInfos/{quota_id}",
                "quotaId": quota_id,
                "metric": f"tpu.googleapis.com/{stem.lower()}",
                "service": "tpu.googleapis.com",
                "isPrecise": True,
                "containerType": "PROJECT",
                "dimensions": [scope],
                "dimensionsInfos": entries,
            })  # fmt: skip
        start = int(query.get("pageToken") or 0)
        end = start + self.quota_page_size
        return {"quotaInfos": infos[start:end], **({"nextPageToken": str(end)} if end < len(infos) else {})}

    def storage_get_policy(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        policy = copy.deepcopy(self._bucket(params["b"]))
        conditional = any("condition" in b for b in policy["bindings"])
        if conditional and int(query.get("optionsRequestedPolicyVersion", "1") or 1) < 3:
            raise invalid("Policy contains conditions; request version 3 (optionsRequestedPolicyVersion=3).")
        return policy

    def storage_set_policy(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        stored = self._bucket(params["b"])
        if body.get("etag") and body["etag"] != stored["etag"]:
            raise ApiError(412, "At least one of the pre-conditions you specified did not hold.", "FAILED_PRECONDITION")
        self._check_agents(body)
        bindings = [b for b in body.get("bindings") or [] if b.get("members")]
        for binding in bindings:
            if not re.fullmatch(r"(roles|projects/[^/]+/roles|organizations/[0-9]+/roles)/[A-Za-z0-9_.]+", str(binding.get("role", ""))):
                raise invalid(f"Role {binding.get('role')} is not valid.")
        count = int(base64.b64decode(stored["etag"])[-1]) + 1
        self.buckets[params["b"]] = {
            **stored,
            "version": 3 if any("condition" in b for b in bindings) else 1,
            "bindings": copy.deepcopy(bindings),
            "etag": base64.b64encode(b"\x08" + bytes([count % 256])).decode(),
        }
        return copy.deepcopy(self.buckets[params["b"]])

    # --- IAM v1: a service account's own policy ------------------------------------------------------

    def add_service_account(self, email: str) -> None:
        self.service_accounts[email.lower()] = {"version": 1, "etag": "ACAB"}

    def _service_account(self, email: str) -> JSON:
        found = self.service_accounts.get(email.lower())
        if found is None:
            raise ApiError(404, f"Service account projects/-/serviceAccounts/{email} does not exist.", "NOT_FOUND")
        return found

    def iam_sa_get_policy(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return copy.deepcopy(self._service_account(params["e"]))

    def iam_sa_set_policy(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        stored = self._service_account(params["e"])
        policy = body.get("policy") or {}
        if policy.get("etag") and policy["etag"] != stored["etag"]:
            raise ApiError(409, "There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff.", "ABORTED")
        for binding in policy.get("bindings") or []:
            for member in binding.get("members") or []:
                if not _MEMBER.match(member):
                    raise invalid(f"Invalid principal '{member}'.", "policy.bindings.members")
        self._etag_count += 1
        fresh = {"version": 1, "bindings": [b for b in policy.get("bindings") or [] if b.get("members")], "etag": self._next_etag()}
        if not fresh["bindings"]:
            del fresh["bindings"]
        self.service_accounts[params["e"].lower()] = fresh
        return copy.deepcopy(fresh)

    def iam_sa_test_permissions(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        """actAs is held unless denied, or once the account's own policy grants roles/iam.serviceAccountUser."""
        policy = self._service_account(params["e"])
        granted = any(b.get("role") == "roles/iam.serviceAccountUser" for b in policy.get("bindings") or [])
        asked = body.get("permissions") or []
        held = [p for p in asked if p not in self.host.faults.denied_permissions or (granted and p == "iam.serviceAccounts.actAs")]
        return {"permissions": held} if held else {}


def _details(value: int) -> JSON:
    """QuotaDetails in JSON: `value` an int64 as a string, left out when 0 (proto3 JSON omits default values)."""
    return {"value": str(value)} if value else {}

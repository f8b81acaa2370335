"""The service identity a TPU job runs as: the current TPU v2 flow and the legacy AI Platform one.

Current: `POST tpu.googleapis.com/v2/projects/P/locations/Z:generateServiceIdentity`
returns (and creates, the first time) the Cloud TPU service agent.

Legacy (AI Platform Training, shut down on 2025-01-31): `GET ml.googleapis.com/v1/
projects/P:getConfig` names `config.tpuServiceAccount`; `POST serviceusage.googleapis.com/
v1beta1/projects/P/services/tpu.googleapis.com:generateServiceIdentity` makes sure the
TPU service agent exists (a long-running operation whose response holds its email).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from tpuctl.cloud.auth.credentials import Identity
from tpuctl.cloud.plumbing.api_errors import Where, explained, operation_failed
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.settings.cloud import Settings

TPU_SERVICE = "tpu.googleapis.com"
LEGACY_WARNING = (
    "AI Platform Training was shut down on 2025-01-31; this flow only helps old stacks that still call ml.googleapis.com"
)
OPERATION_POLLS = 30
POLL_S = 1.0


def gcloud_identity_command(project: str, service: str = TPU_SERVICE) -> str:
    return f"gcloud beta services identity create --service={service} --project={project}"


def tpu_service_identity(identity: Identity, settings: Settings, zone: str) -> str:
    """The Cloud TPU service agent's email (TPU v2 generateServiceIdentity)."""
    from tpuctl.cloud.nodes.tpu import TpuApi

    email = TpuApi(settings, identity).service_identity(zone)
    if not email:
        raise TpuctlError(
            f"the TPU API returned no service identity for project {settings.project}, zone {zone}", exit_code=FAILED
        )
    return email


@dataclass(frozen=True)
class LegacyIdentity:
    tpu_service_account: str  # ml getConfig's config.tpuServiceAccount: the account to grant roles to
    service_agent: str | None  # serviceusage's answer for tpu.googleapis.com


def legacy_identity(
    identity: Identity, settings: Settings, project: str, *, sleep: Callable[[float], None] = time.sleep
) -> LegacyIdentity:
    from tpuctl.cloud.plumbing.rest import RestApi

    ml = RestApi(identity, settings.get("ml-endpoint") or "https://ml.googleapis.com")
    where = Where("read the AI Platform config", project, None, "ml.projects.getConfig", "ml.googleapis.com")
    config = explained(lambda: ml.call("GET", f"v1/projects/{project}:getConfig"), where)
    account = (config.get("config") or {}).get("tpuServiceAccount") if isinstance(config.get("config"), dict) else None
    if not isinstance(account, str) or not account:
        raise TpuctlError(
            f"ml.googleapis.com named no TPU service account for project {project}",
            hint="AI Platform Training is shut down; drop --legacy-ai-platform to use the TPU v2 service identity",
            exit_code=FAILED,
        )

    agent = generate_service_identity(identity, settings, project, TPU_SERVICE, sleep=sleep)
    return LegacyIdentity(account, agent)


def generate_service_identity(
    identity: Identity, settings: Settings, project: str, service: str, *, sleep: Callable[[float], None] = time.sleep
) -> str | None:
    """Service Usage v1beta1 generateServiceIdentity: creates every project-level service agent of
    `service` (the first time) and returns the primary one's email (None when the reply names none).

    A long-running operation; agents created this way get no roles by themselves.
    """
    from tpuctl.cloud.plumbing.rest import RestApi

    usage = RestApi(identity, settings.get("serviceusage-endpoint") or "https://serviceusage.googleapis.com")
    where = Where(f"generate the service identity of {service}", project, None, "serviceusage.services.use", "serviceusage.googleapis.com")
    operation = explained(
        lambda: usage.call("POST", f"v1beta1/projects/{project}/services/{service}:generateServiceIdentity", {}), where
    )
    polls = 0
    while not operation.get("done") and operation.get("name") and polls < OPERATION_POLLS:
        sleep(POLL_S)
        polls += 1
        operation = explained(partial(usage.call, "GET", f"v1beta1/{operation['name']}"), where)
    if not operation.get("done"):
        raise TpuctlError(
            f"generating the service identity of {service} in project {project} did not finish", hint="re-run later", exit_code=FAILED
        )
    if operation.get("error"):
        error = operation["error"] if isinstance(operation["error"], dict) else {}
        raise operation_failed(int(error.get("code", 2) or 2), str(error.get("message", "")), where)
    return _email(operation.get("response"))


def disabled_services(identity: Identity, settings: Settings, project: str, services: tuple[str, ...]) -> list[str]:
    """Which of `services` are not ENABLED in the project (Service Usage v1 services.get)."""
    from tpuctl.cloud.plumbing.rest import RestApi

    usage = RestApi(identity, settings.get("serviceusage-endpoint") or "https://serviceusage.googleapis.com")
    off = []
    for service in services:
        where = Where(f"check whether {service} is enabled", project, None, "serviceusage.services.get", "serviceusage.googleapis.com")
        reply = explained(partial(usage.call, "GET", f"v1/projects/{project}/services/{service}"), where)
        if reply.get("state") != "ENABLED":
            off.append(service)
    return off


def _email(response: Any) -> str | None:
    """ServiceIdentity {email, uniqueId}; some versions wrap it as {identity: {...}}."""
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("email"), str) and response["email"]:
        return str(response["email"])
    inner = response.get("identity")
    if isinstance(inner, dict) and isinstance(inner.get("email"), str) and inner["email"]:
        return str(inner["email"])
    return None

"""Offline validation of TFJob / JobSet manifests, as strict as an API server with fieldValidation=Strict.

Two checks, both offline:
- the CRD's own openAPIV3Schema (tests/data/kubernetes/, copies of the released CRDs), with
  unknown fields refused wherever the schema lists properties and does not preserve unknown
  fields (what `kubectl apply --validate=strict` gets from a real API server);
- kubernetes-validate (the core API's JSON schemas, strict mode) for every pod template, so the
  Pod/Job parts are checked against Kubernetes itself, not only the CRD's copy of them.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes"
CRD_FILES = {
    ("kubeflow.org/v1", "TFJob"): "kubeflow.org_tfjobs.v1.9.0.yaml",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_jobsets.v0.9.1.yaml",
}
KUBERNETES_VERSION = "1.32"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _strict(schema: Any) -> Any:
    """Refuse unknown fields where the schema names its properties (structural-schema pruning, made an error)."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def crd(api_version: str, kind: str) -> dict[str, Any]:
    path = DATA / CRD_FILES[(api_version, kind)]
    loaded: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    return loaded


@cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    definition = crd(api_version, kind)
    version = api_version.split("/")[1]
    (served,) = [v for v in definition["spec"]["versions"] if v["name"] == version]
    schema = _strict(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema)


def crd_errors(obj: dict[str, Any]) -> list[str]:
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in CRD_FILES:
        return [f"no CRD for {key}"]
    errors = sorted(_validator(*key).iter_errors(obj), key=lambda e: list(e.absolute_path))  # type: ignore[arg-type]
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors]


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The core objects inside a TFJob or JobSet: PodTemplates, and for a JobSet its Jobs too."""
    found: list[dict[str, Any]] = []
    if obj.get("kind") == "TFJob":
        for name, replica in (obj.get("spec", {}).get("tfReplicaSpecs") or {}).items():
            found.append({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name.lower()}, "template": replica.get("template")})
    elif obj.get("kind") == "JobSet":
        for replicated in obj.get("spec", {}).get("replicatedJobs") or []:
            template = replicated.get("template") or {}
            found.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": replicated.get("name"), **(template.get("metadata") or {})}, "spec": template.get("spec")})
            found.append({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": replicated.get("name")}, "template": (template.get("spec") or {}).get("template")})
    return found


def core_errors(obj: dict[str, Any]) -> list[str]:
    import kubernetes_validate

    errors = []
    for inner in pod_templates(obj):
        try:
            kubernetes_validate.validate(inner, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            errors.append(f"{inner['kind']} {inner['metadata']['name']}: {'/'.join(map(str, err.path))}: {err.message}")
    return errors


def errors(obj: dict[str, Any]) -> list[str]:
    return crd_errors(obj) + core_errors(obj)

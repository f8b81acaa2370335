"""A stand-in Kubernetes API server that the real kubectl talks to, plus a toy operator behind it.

Enough of the REST API for what tpuctl asks kubectl to do:
- discovery, legacy style: /version, /api, /apis, /api/v1, /apis/GROUP/VERSION (kubectl asks for
  aggregated discovery first and falls back when the answer is a plain APIGroupList);
- OpenAPI v3 (/openapi/v3 and one document per group-version) whose PATCH operations list the
  `fieldValidation` query parameter: that is how kubectl decides the server validates, so
  `kubectl apply` sends ?fieldValidation=Strict instead of downloading OpenAPI v2 (protobuf);
- TFJobs (kubeflow.org/v1) and JobSets (jobset.x-k8s.io/v1alpha2): get, list (labelSelector),
  create (client-side apply: GET, 404, POST), delete; a Strict create is checked against the
  released CRD schema (tests/data/kubernetes/) and refused with 422 like a real server;
- pods: get, list (labelSelector), and logs, streamed with ?follow=true until the container ends.

The "operator": a created job gets its pods at once (TFJob: NAME-<type>-<index> with the
training.kubeflow.org labels; JobSet: NAME-slice-0-<index>-xxxxx with the completion-index
annotation), and each pod plays a `PodScript` the test chose for its worker name (`worker:1`):
Pending, then Running while its lines appear, then terminated with an exit code. Job status
follows the operators' rules closely enough: a failed pod fails the job (its running pods are
then removed, as with cleanPodPolicy Running), success needs every worker (AllWorkers) or the
chief; a JobSet completes when every pod succeeds.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

JSON = dict[str, Any]

GROUPS = {
    "kubeflow.org": ("v1", {"tfjobs": "TFJob"}),
    "jobset.x-k8s.io": ("v1alpha2", {"jobsets": "JobSet"}),
}
KINDS = {"TFJob": ("kubeflow.org", "v1", "tfjobs"), "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets")}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class PodScript:
    """What one pod does: wait, print lines (one every `gap` seconds), exit. exit_code None: run until deleted."""

    lines: list[str] = field(default_factory=list)
    exit_code: int | None = 0
    start_after: float = 0.05
    gap: float = 0.02
    reason: str = ""
    waiting: str = ""  # a waiting reason shown before the start, e.g. ImagePullBackOff


@dataclass
class Pod:
    obj: JSON
    worker: str
    log: list[bytes] = field(default_factory=list)
    done: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)


class KubeStandin:
    def __init__(self, scripts: dict[str, PodScript] | None = None) -> None:
        self.scripts: dict[str, PodScript] = dict(scripts or {})
        self.default_script: Callable[[str], PodScript] = lambda worker: PodScript(lines=[f"hello from {worker}"])
        self.jobs: dict[tuple[str, str, str], JSON] = {}  # (kind, namespace, name) -> object
        self.created: list[JSON] = []  # every object as it arrived in a create
        self.deleted: list[tuple[str, str, str]] = []
        self.requests: list[tuple[str, str]] = []
        self.pods: dict[tuple[str, str], Pod] = {}
        # An admission webhook (Gatekeeper, say): a reason to deny a create, which the server relays as it words it.
        self.admission: Callable[[JSON], str | None] | None = None
        self.lock = threading.RLock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> KubeStandin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            for pod in self.pods.values():
                self._end_log(pod)
        self.server.shutdown()
        self.server.server_close()

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": {"token": "standin-token"}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin", "namespace": namespace}}],
            "current-context": "standin",
        }
        path.write_text(json.dumps(config), encoding="utf-8")
        return path

    # -- the operator -------------------------------------------------------------------------

    def _create_job(self, kind: str, namespace: str, obj: JSON) -> JSON:
        meta = obj.setdefault("metadata", {})
        name = meta["name"]
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now(), resourceVersion="1", generation=1)
        obj["status"] = {"conditions": [{"type": "Created", "status": "True", "reason": f"{kind}Created", "lastTransitionTime": now()}]}
        self.jobs[(kind, namespace, name)] = obj
        for worker, pod_name, labels, notes, template in self._pods_of(kind, obj):
            pod_meta = template.get("metadata") or {}
            pod_obj = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now(),
                    "labels": {**(pod_meta.get("labels") or {}), **labels},
                    "annotations": {**(pod_meta.get("annotations") or {}), **notes},
                },
                "spec": template.get("spec") or {},
                "status": {"phase": "Pending", "containerStatuses": [self._container_status({"waiting": {"reason": "ContainerCreating"}})]},
            }
            pod = Pod(pod_obj, worker)
            self.pods[(namespace, pod_name)] = pod
            script = self.scripts.get(worker) or self.default_script(worker)
            threading.Thread(target=self._play, args=(kind, namespace, name, pod, script), daemon=True).start()
        return obj

    @staticmethod
    def _pods_of(kind: str, obj: JSON) -> Iterator[tuple[str, str, JSON, JSON, JSON]]:
        name = obj["metadata"]["name"]
        if kind == "TFJob":
            for replica_type, spec in obj["spec"]["tfReplicaSpecs"].items():
                role = replica_type.lower()
                for index in range(int(spec.get("replicas", 1))):
                    labels = {
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/operator-name": "tfjob-controller",
                        "training.kubeflow.org/replica-type": role,
                        "training.kubeflow.org/replica-index": str(index),
                    }
                    yield f"{role}:{index}", f"{name}-{role}-{index}", labels, {}, spec["template"]
        else:
            for replicated in obj["spec"]["replicatedJobs"]:
                job_spec = replicated["template"]["spec"]
                for job_index in range(int(replicated.get("replicas", 1))):
                    for index in range(int(job_spec.get("completions", 1))):
                        labels = {
                            "jobset.sigs.k8s.io/jobset-name": name,
                            "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
                            "jobset.sigs.k8s.io/job-index": str(job_index),
                            "batch.kubernetes.io/job-completion-index": str(index),
                        }
                        annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
                        pod_name = f"{name}-{replicated['name']}-{job_index}-{index}-{uuid.uuid4().hex[:5]}"
                        yield f"worker:{index}", pod_name, labels, annotations, job_spec["template"]

    @staticmethod
    def _container_status(state: JSON, restarts: int = 0) -> JSON:
        return {"name": "tensorflow", "ready": "running" in state, "restartCount": restarts, "image": "standin", "imageID": "", "state": state}

    def _play(self, kind: str, namespace: str, job_name: str, pod: Pod, script: PodScript) -> None:
        if script.waiting:
            with self.lock:
                pod.obj["status"]["containerStatuses"] = [self._container_status({"waiting": {"reason": script.waiting, "message": f"standin: {script.waiting}"}})]
        time.sleep(script.start_after)
        with self.lock:
            if pod.done:
                return
            pod.obj["status"] = {"phase": "Running", "startTime": now(), "containerStatuses": [self._container_status({"running": {"startedAt": now()}})]}
        for line in script.lines:
            with pod.changed:
                if pod.done:
                    return
                pod.log.append(line.encode("utf-8") + b"\n")
                pod.changed.notify_all()
            time.sleep(script.gap)
        if script.exit_code is None:
            return  # a server: runs until its job ends
        with self.lock:
            if pod.done:
                return
            reason = script.reason or ("Completed" if script.exit_code == 0 else "Error")
            pod.obj["status"] = {
                "phase": "Succeeded" if script.exit_code == 0 else "Failed",
                "containerStatuses": [self._container_status({"terminated": {"exitCode": script.exit_code, "reason": reason, "finishedAt": now()}})],
            }
            self._end_log(pod)
            self._settle(kind, namespace, job_name)

    def _end_log(self, pod: Pod) -> None:
        with pod.changed:
            pod.done = True
            pod.changed.notify_all()

    def _job_pods(self, namespace: str, job_name: str, kind: str) -> list[Pod]:
        label = "training.kubeflow.org/job-name" if kind == "TFJob" else "jobset.sigs.k8s.io/jobset-name"
        return [p for (ns, _), p in self.pods.items() if ns == namespace and p.obj["metadata"]["labels"].get(label) == job_name]

    def _settle(self, kind: str, namespace: str, job_name: str) -> None:
        """The operator's verdict once a pod has finished."""
        job = self.jobs.get((kind, namespace, job_name))
        if job is None or self._result(job):
            return
        pods = self._job_pods(namespace, job_name, kind)
        phases = {p.worker: p.obj["status"]["phase"] for p in pods}
        failed = [w for w, phase in phases.items() if phase == "Failed"]
        if kind == "TFJob":
            if job["spec"].get("successPolicy") == "AllWorkers":
                needed = [w for w in phases if w.startswith(("chief:", "worker:"))]
            else:  # the default rule: the chief, or worker 0 when there is none
                needed = ["chief:0"] if "chief:0" in phases else ["worker:0"]
            succeeded = all(phases[w] == "Succeeded" for w in needed)
            verdict = "Failed" if failed else "Succeeded" if succeeded else None
            message = f"TFJob {namespace}/{job_name} has failed because {len(failed)} replica(s) failed." if failed else f"TFJob {namespace}/{job_name} successfully completed."
        else:
            verdict = "Failed" if failed else "Completed" if all(p == "Succeeded" for p in phases.values()) else None
            message = "jobset failed" if failed else "jobset completed successfully"
        if verdict is None:
            return
        status = job["status"]
        status["conditions"].append({"type": verdict, "status": "True", "reason": f"{kind}{verdict}", "message": message, "lastTransitionTime": now()})
        if kind == "JobSet":
            status["terminalState"] = verdict
        # cleanPodPolicy Running (TFJob) / a finished JobSet: pods still running are removed.
        for pod in pods:
            if pod.obj["status"]["phase"] in ("Pending", "Running"):
                self._end_log(pod)
                del self.pods[(namespace, pod.obj["metadata"]["name"])]

    @staticmethod
    def _result(job: JSON) -> str | None:
        for condition in job["status"]["conditions"]:
            if condition["type"] in ("Succeeded", "Failed", "Completed") and condition["status"] == "True":
                return str(condition["type"])
        return None

    def delete_job(self, kind: str, namespace: str, name: str) -> JSON | None:
        with self.lock:
            job = self.jobs.pop((kind, namespace, name), None)
            if job is None:
                return None
            self.deleted.append((kind, namespace, name))
            for pod in self._job_pods(namespace, name, kind):
                self._end_log(pod)
                del self.pods[(namespace, pod.obj["metadata"]["name"])]
            return job


def _selected(obj: JSON, selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip().lstrip("="):
            return False
    return True


def _openapi_gv(group: str, version: str, resources: dict[str, str]) -> JSON:
    paths = {}
    for plural, kind in resources.items():
        gvk = {"group": group, "version": version, "kind": kind}
        params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}, {"name": "dryRun", "in": "query", "schema": {"type": "string"}}]
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        paths[f"{prefix}/namespaces/{{namespace}}/{plural}/{{name}}"] = {
            "patch": {"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"200": {"description": "OK"}}}
        }
        paths[f"{prefix}/namespaces/{{namespace}}/{plural}"] = {
            "post": {"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"201": {"description": "Created"}}}
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths, "components": {"schemas": {}}}


def _status(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def _handler(standin: KubeStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: JSON) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> JSON:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw else {}

        def _route(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = [p for p in url.path.split("/") if p]
            standin.requests.append((self.command, self.path))
            try:
                self._dispatch(parts, query)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _route

        def _dispatch(self, parts: list[str], query: dict[str, str]) -> None:
            method = self.command
            if parts == ["version"]:
                return self._send(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "platform": "linux/amd64"})
            if parts == ["api"]:
                return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
            if parts == ["apis"]:
                groups = [
                    {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}], "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
                    for g, (v, _) in GROUPS.items()
                ]
                return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            if parts == ["api", "v1"]:
                resources = [
                    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list", "delete"], "shortNames": ["po"]},
                    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
                    {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": ["get", "list"]},
                ]
                return self._send(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources})
            if len(parts) == 3 and parts[0] == "apis" and parts[1] in GROUPS and parts[2] == GROUPS[parts[1]][0]:
                group, (version, plurals) = parts[1], GROUPS[parts[1]]
                resources = [
                    {"name": p, "singularName": k.lower(), "namespaced": True, "kind": k, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                    for p, k in plurals.items()
                ]
                return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}", "resources": resources})
            if parts == ["openapi", "v3"]:
                paths = {f"apis/{g}/{v}": {"serverRelativeURL": f"/openapi/v3/apis/{g}/{v}?hash=0"} for g, (v, _) in GROUPS.items()}
                paths["api/v1"] = {"serverRelativeURL": "/openapi/v3/api/v1?hash=0"}
                return self._send(200, {"paths": paths})
            if parts[:2] == ["openapi", "v3"]:
                if parts[2:] == ["api", "v1"]:
                    return self._send(200, _openapi_gv("", "v1", {"pods": "Pod"}))
                if len(parts) == 5 and parts[3] in GROUPS:
                    version, plurals = GROUPS[parts[3]]
                    return self._send(200, _openapi_gv(parts[3], version, plurals))
            # /api/v1/namespaces/NS/pods[/NAME[/log]]
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
                return self._pods(method, parts[3], parts[5:], query)
            # /apis/GROUP/VERSION/namespaces/NS/PLURAL[/NAME]
            if parts[:1] == ["apis"] and len(parts) >= 6 and parts[3] == "namespaces" and parts[1] in GROUPS:
                plurals = GROUPS[parts[1]][1]
                if parts[5] in plurals:
                    return self._jobs(method, plurals[parts[5]], parts[4], parts[6:], query)
            return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))

        def _jobs(self, method: str, kind: str, namespace: str, rest: list[str], query: dict[str, str]) -> None:
            group, version, plural = KINDS[kind]
            with standin.lock:
                if method == "GET" and not rest:
                    items = [j for (k, ns, _), j in standin.jobs.items() if k == kind and ns == namespace and _selected(j, query.get("labelSelector"))]
                    return self._send(200, {"apiVersion": f"{group}/{version}", "kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": items})
                if method == "GET":
                    job = standin.jobs.get((kind, namespace, rest[0]))
                    if job is None:
                        return self._send(404, _status(404, "NotFound", f'{plural}.{group} "{rest[0]}" not found', {"name": rest[0], "group": group, "kind": plural}))
                    return self._send(200, job)
                if method == "POST" and not rest:
                    obj = self._body()
                    name = obj.get("metadata", {}).get("name", "")
                    if (kind, namespace, name) in standin.jobs:
                        return self._send(409, _status(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists'))
                    denied = standin.admission(obj) if standin.admission else None
                    if denied:
                        return self._send(403, _status(403, "Forbidden", f'admission webhook "validation.gatekeeper.sh" denied the request: {denied}'))
                    if query.get("fieldValidation") == "Strict":
                        from tests.standins.kube_schemas import crd_errors

                        problems = crd_errors(obj)
                        if problems:
                            return self._send(422, _status(422, "Invalid", f'{kind}.{group} "{name}" is invalid: {"; ".join(problems)}'))
                    standin.created.append(json.loads(json.dumps(obj)))
                    return self._send(201, standin._create_job(kind, namespace, obj))
                if method == "DELETE" and rest:
                    job = standin.delete_job(kind, namespace, rest[0])
                    if job is None:
                        return self._send(404, _status(404, "NotFound", f'{plural}.{group} "{rest[0]}" not found'))
                    return self._send(200, job)
            return self._send(405, _status(405, "MethodNotAllowed", f"{method} is not supported here"))

        def _pods(self, method: str, namespace: str, rest: list[str], query: dict[str, str]) -> None:
            with standin.lock:
                if method == "GET" and not rest:
                    items = [p.obj for (ns, _), p in standin.pods.items() if ns == namespace and _selected(p.obj, query.get("labelSelector"))]
                    return self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items})
                pod = standin.pods.get((namespace, rest[0])) if rest else None
                if pod is None:
                    return self._send(404, _status(404, "NotFound", f'pods "{rest[0] if rest else ""}" not found', {"name": rest[0] if rest else "", "kind": "pods"}))
                if method == "GET" and len(rest) == 1:
                    return self._send(200, pod.obj)
            if method == "GET" and rest[1:] == ["log"]:
                return self._log(pod, query.get("follow") == "true")
            return self._send(405, _status(405, "MethodNotAllowed", f"{method} is not supported here"))

        def _log(self, pod: Pod, follow: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            sent = 0
            while True:
                with pod.changed:
                    while follow and sent == len(pod.log) and not pod.done:
                        pod.changed.wait(timeout=1)
                    chunk = pod.log[sent:]
                    sent += len(chunk)
                    finished = pod.done or not follow
                if chunk:
                    self.wfile.write(b"".join(chunk))
                    self.wfile.flush()
                if finished and sent == len(pod.log):
                    return

    return Handler

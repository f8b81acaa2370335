"""A launch as a Kubernetes manifest: a TFJob for CPU/GPU workers, a JobSet for a GKE TPU slice or a JAX run.

Pure: a Job and the Kubernetes options in, YAML text out. The text comes from
the Jinja2 manifests in tpuctl/backends/kubernetes/manifests/, and every value in it
goes through `yaml_values.flow`, so user input is data, never YAML structure.

The environment is the Plan's (tpuctl.launch.process.plan.build_plan), less what
Kubernetes provides per pod: TF_CONFIG (the TFJob operator writes it; a TPU
slice and a JAX run need none), TPUCTL_WORKER_INDEX and a JAX run's
KERAS_DISTRIBUTION_PROCESS_ID (read from the pod's own labels or annotations
through the downward API, since one template serves every replica of a type)
and TPUCTL_ATTEMPT (restarts belong to the operator, which does not number them).

A JAX run (Keras 3 on JAX, or plain JAX) is a JobSet on every kind of node:
- on a GKE TPU slice GKE gives every pod TPU_WORKER_ID and TPU_WORKER_HOSTNAMES
  (https://cloud.google.com/kubernetes-engine/docs/how-to/tpus, multi-host slices run as an Indexed Job),
  which JAX's own GkeTpuCluster reads (jax/_src/clusters/cloud_tpu_cluster.py), so tpuctl writes no cluster
  variables there;
- on CPU or GPU pods every pod gets the cluster in the variables Keras and JAX read
  (tpuctl/cluster/jax_cluster.py): every pod's stable name under the JobSet's headless Service
  (`<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`, JobSet's `network.enableDNSHostnames`; the
  subdomain is the JobSet's name), process 0's as the coordinator on JAX_PORT, and the process id from the
  pod's completion index (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode: the
  annotation batch.kubernetes.io/job-completion-index). The id is a `fieldRef`, not `$(JOB_COMPLETION_INDEX)`:
  Kubernetes expands `$(VAR)` only from variables defined earlier in the same env list
  (https://kubernetes.io/docs/tasks/inject-data-application/define-interdependent-environment-variables/), and
  the Job controller appends JOB_COMPLETION_INDEX after the template's own variables.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuctl.backends.kubernetes import yaml_values
from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import Job
from tpuctl.launch.process.plan import Plan, WorkerSpec, build_plan
from tpuctl.tpu.accelerators import GkeSlice, gke_slice, is_type_name

if TYPE_CHECKING:
    import jinja2

TFJOB_PORT = 2222
# A JAX run's coordinator (process 0) on CPU/GPU pods: the port JAX's own detection of a GKE TPU slice puts it on
# (jax/_src/clusters/cloud_tpu_cluster.py `coordinator_port`), so both kinds of pods expose the same one.
JAX_PORT = 8482
CONTAINER = "tensorflow"  # the TFJob operator writes TF_CONFIG into the container of this name only
MAX_NAME = 40  # TFJob Services are NAME-worker-N, JobSet pods NAME-slice-0-N-xxxxx (NAME-worker-0-N-...): all must stay <= 63
SLICE_JOB = "slice"  # the replicated job of a TPU slice's JobSet
WORKER_JOB = "worker"  # ... and of a JAX run's CPU/GPU pods
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Where each pod finds its index (downward API): the operators put it there.
TFJOB_INDEX_LABEL = "training.kubeflow.org/replica-index"
TFJOB_TYPE_LABEL = "training.kubeflow.org/replica-type"
JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
GKE_TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
GKE_GPU_ACCELERATOR = "cloud.google.com/gke-accelerator"

# TFJob replica type (the key in tfReplicaSpecs) for each of tpuctl's task types.
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS"}

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


@dataclass(frozen=True)
class KubeOptions:
    """What only the kubernetes backend reads."""

    image: str
    namespace: str = "default"
    name: str | None = None
    accelerator: str | None = None  # a TPU type or tpu-... label (a JobSet), or nvidia-... (GPU node selector on a TFJob)
    topology: str | None = None
    chips_per_host: int | None = None
    gpus_per_worker: int = 0


@dataclass(frozen=True)
class Manifest:
    kind: str  # "TFJob" or "JobSet"
    resource: str  # what kubectl calls it, fully qualified
    name: str
    namespace: str
    text: str
    workers: tuple[str, ...]  # task names (`worker:0`, ...) in display order
    selector: str  # label selector matching the job and its pods
    tpu: GkeSlice | None = None
    framework: str = contract.TENSORFLOW  # whose start-up log lines the follower folds

    @property
    def delete_command(self) -> str:
        return f"kubectl delete {self.resource} {self.name} -n {self.namespace}"


def default_name(script: str) -> str:
    """`<script stem>-<4 hex>`, lower-case DNS label; `tpuctl-` first when the stem does not start with a letter."""
    stem = re.sub(r"[^a-z0-9]+", "-", Path(script).stem.lower()).strip("-")[:24].rstrip("-")
    if not stem or not stem[0].isalpha():
        stem = f"tpuctl-{stem}".rstrip("-")
    return f"{stem}-{os.urandom(2).hex()}"


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not _DNS_LABEL.match(name):
        raise TpuctlError(
            f"--job-name {name!r} is not a usable Kubernetes name",
            hint=f"lower-case letters, digits and '-', starting with a letter, at most {MAX_NAME} characters",
        )
    return name


def check_namespace(namespace: str) -> str:
    if len(namespace) > 63 or not _NAMESPACE.match(namespace):
        raise TpuctlError(f"--namespace {namespace!r} is not a Kubernetes namespace name", hint="lower-case letters, digits and '-'")
    return namespace


def check_image(image: str) -> str:
    if not image or any(ch.isspace() or not ch.isprintable() for ch in image):
        raise TpuctlError(f"--image {image!r} is not a container image reference", hint="e.g. us-docker.pkg.dev/PROJECT/REPO/train:1")
    return image


def is_tpu(accelerator: str) -> bool:
    """A TPU type name as `tpuctl create` takes it (v4-8) or a GKE TPU node label (tpu-...)."""
    return accelerator.startswith("tpu-") or is_type_name(accelerator)


def tfjob_service(name: str, namespace: str, role: str, index: int) -> str:
    """The address the TFJob operator gives a replica in TF_CONFIG (one headless Service per pod)."""
    return f"{name}-{role}-{index}.{namespace}.svc:{TFJOB_PORT}"


def tfjob_tf_config(name: str, namespace: str, counts: dict[str, int], role: str, index: int) -> str:
    """TF_CONFIG exactly as training-operator v1 writes it: Go's json.Marshal of
    {cluster (map, keys sorted), task {type, index}, environment "cloud"}, no spaces."""
    cluster = {r: [tfjob_service(name, namespace, r, i) for i in range(n)] for r, n in sorted(counts.items()) if n}
    config = {"cluster": cluster, "task": {"type": role, "index": index}, "environment": "cloud"}
    return json.dumps(config, separators=(",", ":"))


@lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tpuctl", "backends/kubernetes/manifests"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["yaml"] = yaml_values.flow
    env.filters["comment"] = lambda value: yaml_values.comment(str(value))
    return env


def _render(template: str, **context: object) -> str:
    from tpuctl import __version__

    try:
        return _templates().get_template(template).render(version=__version__, **context)
    except yaml_values.UnsafeValue as err:
        raise TpuctlError(f"cannot write the manifest: {err}", hint="arguments and --env values must be UTF-8 text") from None


def _env(spec: WorkerSpec, index_from: dict[str, object]) -> list[dict[str, object]]:
    """The plan's variables for one worker, as a container's env list: those that differ per pod read its index."""
    per_pod = [name for name in (contract.WORKER_INDEX, jax_cluster.PROCESS_ID) if name in spec.env]
    dropped = {"TF_CONFIG", contract.ATTEMPT, *per_pod}
    env: list[dict[str, object]] = [{"name": k, "value": v} for k, v in spec.env.items() if k not in dropped]
    env.extend({"name": name, "valueFrom": index_from} for name in per_pod)
    return env


def _pod_env(plan: Plan, index_from: dict[str, object]) -> list[dict[str, object]]:
    """The one env list every pod of a JobSet's template shares (JobSet pods are all workers, indexed alike)."""
    envs = [_env(spec, index_from) for spec in plan.workers]
    assert all(env == envs[0] for env in envs), "one pod template needs one env"
    return envs[0]


def jobset_address(name: str, job: str, index: int, port: int) -> str:
    """Pod `index`'s stable name under the JobSet's headless Service (its subdomain is the JobSet's name)."""
    return f"{name}-{job}-0-{index}.{name}:{port}"


def _field(path: str) -> dict[str, object]:
    return {"fieldRef": {"fieldPath": path}}


def render(job: Job, options: KubeOptions) -> Manifest:
    """The manifest for `job`: a JobSet when --accelerator names a TPU, else a TFJob."""
    check_image(options.image)
    namespace = check_namespace(options.namespace)
    name = check_name(options.name) if options.name else default_name(job.script)
    if options.accelerator and is_tpu(options.accelerator):
        return _render_jobset(job, options, name, namespace)
    if options.topology or options.chips_per_host:
        raise TpuctlError("--topology and --tpu-chips-per-host are for TPU slices", hint="give --accelerator v5litepod-8, v4-32, ... or tpu-...")
    if job.framework == contract.JAX:
        return _render_jax_jobset(job, options, name, namespace)
    return _render_tfjob(job, options, name, namespace)


def _labels(name: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: "tpuctl", LABEL_INSTANCE: name}


def _gpu_nodes(options: KubeOptions) -> tuple[dict[str, str], int]:
    """The node selector and GPUs per worker: --accelerator nvidia-... means at least one GPU each."""
    if not options.accelerator:
        return {}, options.gpus_per_worker
    if not options.accelerator.startswith("nvidia-"):
        raise TpuctlError(
            f"--accelerator {options.accelerator!r}: expected a TPU or GPU (nvidia-...) type",
            hint="a TPU type such as v4-8 or v5litepod-16, or a GKE node label such as tpu-v5-lite-podslice or nvidia-l4",
        )
    return {GKE_GPU_ACCELERATOR: options.accelerator}, options.gpus_per_worker or 1


def _render_tfjob(job: Job, options: KubeOptions, name: str, namespace: str) -> Manifest:
    if job.strategy == "tpu":
        raise TpuctlError("--strategy tpu on Kubernetes runs a TPU slice", hint="give --accelerator v5litepod-8, v4-32, ... (or tpu-... and --topology)")
    node_selector, gpus = _gpu_nodes(options)
    counts = {"chief": 1 if job.parameter_server else 0, "worker": job.workers, "ps": job.ps}
    addresses = [tfjob_service(name, namespace, role, i) for role in ("chief", "worker", "ps") for i in range(counts[role])]
    plan = build_plan(job, addresses, run_id=name, attempt=1, host="kubernetes")
    replicas = []
    for role in ("chief", "worker", "ps"):
        specs = [w for w in plan.workers if w.task.type == role]
        if not specs:
            continue
        envs = [_env(spec, _field(f"metadata.labels['{TFJOB_INDEX_LABEL}']")) for spec in specs]
        assert all(env == envs[0] for env in envs), "one pod template per replica type needs one env"
        resources = {"limits": {GPU_RESOURCE: str(gpus)}} if gpus and role != "ps" else None
        replicas.append(
            {
                "type": REPLICA_TYPES[role],
                "role": role,
                "count": len(specs),
                "first_index": 0,
                "env": envs[0],
                "resources": resources,
                "tf_config": tfjob_tf_config(name, namespace, counts, role, 0),
            }
        )
    return _manifest(
        "TFJob",
        "tfjobs.kubeflow.org",
        plan,
        options,
        name,
        namespace,
        # Kubeflow's own namespaces inject an Istio sidecar that keeps pods from ever finishing.
        annotations={"sidecar.istio.io/inject": "false"},
        replicas=replicas,
        restart_policy="OnFailure" if job.max_restarts else "Never",
        backoff_limit=job.max_restarts or None,
        # Without a chief, the operator calls the job done when worker 0 is; wait for all of them.
        success_policy=None if job.parameter_server else "AllWorkers",
        node_selector=node_selector,
        port=TFJOB_PORT,
    )


def _render_jobset(job: Job, options: KubeOptions, name: str, namespace: str) -> Manifest:
    assert options.accelerator is not None
    # A type name (v4-8) or a node label with --topology: the numbers GKE's node pools have.
    tpu = gke_slice(options.accelerator, options.topology, options.chips_per_host)
    jax = job.framework == contract.JAX
    if not jax and job.strategy not in ("auto", "tpu"):
        raise TpuctlError(f"--strategy {job.strategy}: a TPU slice runs TPUStrategy", hint="leave --strategy at auto, or tpu")
    if job.workers not in (1, tpu.hosts):
        raise TpuctlError(
            f"--workers {job.workers}: a {options.accelerator} {tpu.topology} slice has {tpu.hosts} host(s), one worker each",
            hint="leave --workers out; tpuctl runs one pod per TPU host",
        )
    if options.gpus_per_worker:
        raise TpuctlError("--gpus-per-worker is for GPU workers, not TPU slices")
    job = replace(job, workers=tpu.hosts) if jax else replace(job, strategy="tpu", workers=tpu.hosts)
    # Addresses only shape the plan; TF_CONFIG is dropped below (a TPU slice is not a TF cluster), and a JAX run's
    # processes find the slice in what GKE gives each pod (jax_finds_hosts: no KERAS_DISTRIBUTION_* written).
    addresses = [jobset_address(name, SLICE_JOB, i, TFJOB_PORT) for i in range(tpu.hosts)]
    plan = build_plan(job, addresses, run_id=name, attempt=1, host="kubernetes", jax_finds_hosts=True)
    chips = str(tpu.chips_per_host)  # quantities as strings: an int is not a Quantity for typed clients
    return _jobset(
        plan,
        options,
        name,
        namespace,
        SLICE_JOB,
        tpu=tpu,
        jax=jax,
        cluster_vars=False,
        chips=tpu.chips,
        chips_per_host=tpu.chips_per_host,
        accelerator=tpu.accelerator,
        topology=tpu.topology,
        node_selector={GKE_TPU_ACCELERATOR: tpu.accelerator, GKE_TPU_TOPOLOGY: tpu.topology},
        resources={"requests": {TPU_RESOURCE: chips}, "limits": {TPU_RESOURCE: chips}},
        ports=[{"containerPort": 8471, "name": "tpu-runtime"}],
    )


def _render_jax_jobset(job: Job, options: KubeOptions, name: str, namespace: str) -> Manifest:
    """A JAX run on CPU or GPU pods: a JobSet whose pods are told their cluster (no TFJob: its operator writes TF_CONFIG)."""
    node_selector, gpus = _gpu_nodes(options)
    addresses = [jobset_address(name, WORKER_JOB, i, JAX_PORT) for i in range(job.workers)]
    plan = build_plan(job, addresses, run_id=name, attempt=1, host="kubernetes")
    return _jobset(
        plan,
        options,
        name,
        namespace,
        WORKER_JOB,
        jax=True,
        cluster_vars=True,
        coordinator=addresses[0],
        node_selector=node_selector,
        resources={"limits": {GPU_RESOURCE: str(gpus)}} if gpus else None,
        ports=[{"containerPort": JAX_PORT, "name": "jax-coordinator"}],
    )


def _jobset(plan: Plan, options: KubeOptions, name: str, namespace: str, replicated_job: str, **context: Any) -> Manifest:
    """A JobSet of one Indexed replicated job, a pod per worker of `plan`, each reading its index from its annotation."""
    return _manifest(
        "JobSet",
        "jobsets.jobset.x-k8s.io",
        plan,
        options,
        name,
        namespace,
        replicated_job=replicated_job,
        env=_pod_env(plan, _field(f"metadata.annotations['{JOB_INDEX_ANNOTATION}']")),
        hosts=len(plan.workers),
        max_restarts=plan.job.max_restarts,
        **context,
    )


def _manifest(
    kind: str, resource: str, plan: Plan, options: KubeOptions, name: str, namespace: str, *, tpu: GkeSlice | None = None, **context: object
) -> Manifest:
    """The job of `kind` rendered from its template (kind.lower().yaml.j2) with what every job has, its name, labels,
    image and the plan's command, and `context`; its pods carry the labels the Manifest's selector matches."""
    text = _render(
        f"{kind.lower()}.yaml.j2",
        name=name,
        namespace=namespace,
        labels=_labels(name),
        image=options.image,
        command=list(plan.workers[0].argv),
        tpu=tpu is not None,
        **context,
    )
    workers = tuple(w.name for w in plan.workers)
    selector = ",".join(f"{label}={value}" for label, value in _labels(name).items())
    framework = plan.job.framework
    return Manifest(kind, resource, name, namespace, text, workers, selector, tpu=tpu, framework=framework)

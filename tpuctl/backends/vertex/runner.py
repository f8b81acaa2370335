"""The Vertex AI backend: the launch as a managed CustomJob (today's form of AI Platform Training's TPU jobs).

A dry run is the CustomJob body, built without credentials or requests
(tpuctl/backends/vertex/job_body.py); a run stages the script's folder when
--staging-bucket is given (tpuctl/backends/vertex/staging.py), submits the body and
follows the job (tpuctl/backends/vertex/follow.py). --accelerator takes the TPU
types `tpuctl create` does, mapped through the accelerator table, or a Vertex
GPU name.

A JAX run (Keras 3 on JAX, or plain JAX) is the same CustomJob without TensorFlow: no strategy, its cluster
read from CLUSTER_SPEC inside the job (tpuctl/runtime/vertex_jax.py), and TPU v6e open to it. Vertex's
"Training with TPU accelerators" (https://cloud.google.com/vertex-ai/docs/training/training-with-tpu-vm):
"TPU v6e supports Python 3.10+, JAX 0.4.37+, and PyTorch 2.1+" (no TensorFlow, which is why the accelerator
table refuses v6e for a TensorFlow run).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.launch import shared_options
from tpuctl.launch.option_fields import option
from tpuctl.launch.runner import BackendOptions, JobRunner, Unsupported
from tpuctl.tpu import accelerators

if TYPE_CHECKING:
    from tpuctl.backends.vertex.job_body import VertexSpec
    from tpuctl.inputs.requirements import Requirements
    from tpuctl.launch.job import Job
    from tpuctl.launch.outcome import Outcome
    from tpuctl.launch.runner import RunContext

IMAGE_PYTHON = "python"
DEFAULT_REGION = "us-central1"
# GCS object names are at most 1024 bytes; the run's own path (about 80) comes on top.
_STAGING = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/[^\x00-\x1f\x7f]{0,800})?\Z")
_SERVICE_ACCOUNT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.-]{1,200}\.iam\.gserviceaccount\.com\Z")
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+\Z")
_MACHINE = re.compile(r"[a-z][a-z0-9-]{1,62}\Z")
_REQUIREMENTS_HINT = "build an image FROM --image that holds them (`RUN pip install -r requirements.txt`)"
_IMAGE_HINT = (
    "an image with TensorFlow (and libtpu for TPUs) and Python 3.10+: Vertex's prebuilt TensorFlow training images "
    "reached end of availability (TF 2.17 CPU/GPU 2026-07-11, TF 2.15 TPU 2025-10-23); see docs/vertex.md#images"
)
# Local-and-ssh options a managed job has no equivalent for, each with the reason.
_IN_THE_IMAGE = "put it in the image's build (a RUN line of a Dockerfile FROM --image)"
_NOT_ON_VERTEX = "{flag} is not available with --backend {backend}"
# TPU generations Vertex trains JAX on but not TensorFlow (training-with-tpu-vm, above). Their machineSpec is the
# hosts' machine type with tpuTopology and no acceleratorType: Vertex's v1 MachineSpec.AcceleratorType has no TPU_V6E
# (TPU_V2, TPU_V3, TPU_V4_POD, TPU_V5_LITEPOD only: gcloud's generated aiplatform v1 messages), and tpuTopology
# "corresponds to the TPU topologies available from GKE" (MachineSpec reference). That shape is the one
# tests/standins/vertex_api.py accepts for ct6e machines; no real Vertex job has checked it from here.
JAX_ONLY_GENERATIONS = ("v6e",)
JAX_NOTE = (
    "a JAX run: no TensorFlow strategy and no TF_CONFIG read; each replica's runtime turns Vertex's CLUSTER_SPEC into "
    "KERAS_DISTRIBUTION_* (process 0 is workerpool0's replica, then workerpool1's in order; coordinator on its port 2222)"
)


@dataclass(frozen=True)
class Options(BackendOptions):

    region: str | None = option("--region", metavar="REGION", help="Vertex AI region of the job [env TPUCTL_REGION; gcloud ai/region].  [default: us-central1]")
    staging_bucket: str | None = option(
        "--staging-bucket",
        metavar="gs://BUCKET/PATH",
        help="Upload SCRIPT's folder (less .tpuctlignore, else .gitignore) there and run it on --image (vertex).",
    )
    service_account: str | None = option("--service-account", metavar="EMAIL", help="Service account the Vertex job runs as.  [default: Vertex's own]")
    machine_type: str | None = option(
        "--machine-type", metavar="TYPE", help="Vertex machine type for CPU or GPU replicas.  [default: from --accelerator, else n1-standard-4]"
    )
    project: str | None = shared_options.project()
    image: str | None = shared_options.image()
    job_name: str | None = shared_options.job_name()
    accelerator: str | None = shared_options.accelerator()
    gpus_per_worker: int = shared_options.gpus_per_worker()


@dataclass(frozen=True)
class BodyRequest:
    """What a run POSTs to .../customJobs, exactly: the body, where it goes, and the folder it stages first.

    Built once by `VertexRunner.request`: the dry run prints it, the run stages and submits this very value."""

    body: dict[str, Any]
    endpoint: str
    project: str | None  # None: not set; a dry run shows PROJECT, a run refuses in one line
    region: str
    staged_script: str | None  # --staging-bucket: the script whose folder is bundled to the body's package URI
    requirements: Requirements | None = None  # --requirements: installed with the bundle (its install_requires)
    notes: tuple[str, ...] = ()  # what the launch leaves alone (a [launch] setup), said by the dry run and the run
    framework: str = contract.TENSORFLOW  # whose start-up log lines the follower folds

    @property
    def where(self) -> str:
        return f"{self.endpoint}/v1/projects/{self.project or 'PROJECT'}/locations/{self.region}/customJobs"

    @property
    def package_uri(self) -> str | None:
        pools = self.body["jobSpec"]["workerPoolSpecs"]
        return str(pools[0]["pythonPackageSpec"]["packageUris"][0]) if self.staged_script is not None else None

    def to_json(self) -> dict[str, Any]:
        return self.body

    def render(self) -> str:
        pools = self.body["jobSpec"]["workerPoolSpecs"]
        lines = [f"CustomJob {self.body['displayName']}: POST {self.where}"]
        if self.staged_script is not None:
            lines.append(f"stages {Path(os.path.abspath(self.staged_script)).parent} to {self.package_uri}")
        if self.requirements is not None:
            said = ", ".join(line.text for line in self.requirements.lines) or "none"
            lines.append(f"installs with the bundle, before the script, {self.requirements.source}'s requirements (its install_requires): {said}")
        lines.extend(self.notes)
        for index, pool in enumerate(pools):
            machine = pool["machineSpec"]
            extra = ", ".join(f"{k} {v}" for k, v in machine.items() if k != "machineType")
            lines.append(f"workerpool{index}: {pool['replicaCount']} x {machine['machineType']}" + (f" ({extra})" if extra else ""))
        lines.append(json.dumps(self.body, indent=2))
        lines.append("(dry run: nothing staged or submitted)")
        return "\n".join(lines)


class VertexRunner(JobRunner[BodyRequest]):
    name = "vertex"
    unsupported: ClassVar[Mapping[str, Unsupported]] = {
        "start_timeout": Unsupported("on Vertex AI, Vertex queues and provisions as long as it takes"),
        "hang_timeout": Unsupported("on Vertex AI, a Vertex job's replicas cannot be reached for their stacks"),
        "quiet_notice": Unsupported("on Vertex AI, a Vertex job's replicas cannot be reached for their stacks"),
        "max_preemptions": Unsupported("on Vertex AI, Vertex restarts preempted replicas itself"),
        "max_restarts": Unsupported("on Vertex AI, a failed Vertex job ends; launch it again to retry"),
        "tail_view": Unsupported("on Vertex AI, run `tpuctl tail gs://...` on the model dir beside it"),
        "simulate_devices": Unsupported("on Vertex AI, Vertex replicas are real machines"),
        "devices": Unsupported("on Vertex AI, each replica uses all of its machine's devices"),
        "setup": Unsupported(_IN_THE_IMAGE, line=_NOT_ON_VERTEX),
        "index_url": Unsupported("the job's pip uses the image's configuration: set PIP_INDEX_URL in its build", line=_NOT_ON_VERTEX),
    }

    def __init__(self, options: Options) -> None:
        self.options = options
        self.requirements: Requirements | None = None  # --requirements, read and checked at prepare()
        self.notes: list[str] = []

    # -- checks ----------------------------------------------------------------------------------

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        o = self.options
        if not self.options.image:
            raise TpuctlError("--backend vertex needs --image IMAGE", hint=_IMAGE_HINT)
        if o.staging_bucket is not None and not _STAGING.match(o.staging_bucket):
            raise TpuctlError(f"--staging-bucket {one_line(o.staging_bucket, 60)!r} is not gs://BUCKET[/PATH]")
        if o.service_account is not None and not _SERVICE_ACCOUNT.match(o.service_account):
            raise TpuctlError(
                f"--service-account {one_line(o.service_account, 80)!r} is not a service account's email", hint="NAME@PROJECT.iam.gserviceaccount.com"
            )
        if o.region is not None and not _REGION.match(o.region):
            raise TpuctlError(f"--region {one_line(o.region, 40)!r} is not a region", hint="e.g. us-central1")
        if o.machine_type is not None and not _MACHINE.match(o.machine_type):
            raise TpuctlError(f"--machine-type {one_line(o.machine_type, 40)!r} is not a machine type", hint="e.g. n1-standard-8")
        if self.options.job_name is not None and not (0 < len(self.options.job_name) <= 128 and self.options.job_name.isprintable()):
            raise TpuctlError("--job-name must be 1 to 128 printable characters")
        if job.model_dir and not job.model_dir.startswith("gs://"):
            raise TpuctlError(f"--model-dir {one_line(job.model_dir, 60)!r} is on this machine; a Vertex job writes to gs://", hint="--model-dir gs://BUCKET/PATH")
        if o.staging_bucket is not None and not os.path.isfile(job.script):
            raise TpuctlError(f"script not found: {job.script}", hint="with --staging-bucket SCRIPT is a file here, shipped with its folder")
        jax = job.framework == contract.JAX
        _, tpu = self._machine(jax)
        self._requirements(job, tpu, given)
        if tpu and (job.workers > 1 or job.ps):
            driver = "its JAX processes find the slice themselves" if jax else "driven by one TPUStrategy replica"
            raise TpuctlError(
                f"--accelerator {self.options.accelerator}: a Vertex TPU job is one slice, {driver}", hint="drop --workers/--ps, or pick a larger slice"
            )
        if jax and job.workers > 1:
            self.notes.append(JAX_NOTE)
        return replace(job, python=job.python or IMAGE_PYTHON)

    def _requirements(self, job: Job, tpu: bool, given: frozenset[str]) -> None:
        """--requirements, installed with the staged bundle: read, held to the TensorFlow rule on a TPU (a Vertex TPU
        replica is a TPU VM running --image), refused without a bundle to carry it or with hashes pip cannot check there;
        a [launch] requirements or setup this launch leaves alone is said."""
        from tpuctl.inputs.requirements import read_requirements, refuse_image_software

        if job.setup:  # from a [launch] table: the flag is refused (unsupported)
            self.notes.append("[launch] setup is not run on Vertex AI: the image's build runs what it needs")
        if not job.requirements:
            return
        if self.options.staging_bucket is None:
            if "requirements" in given:
                raise TpuctlError("--requirements on Vertex AI installs with the staged bundle: add --staging-bucket", hint=_REQUIREMENTS_HINT)
            self.notes.append("[launch] requirements are not installed without --staging-bucket: the image must hold the packages")
            return
        self.requirements = reqs = read_requirements(job.requirements)
        if tpu and job.framework != contract.JAX:  # a JAX run brings its own TPU runtime: jax[tpu] is how it gets one
            refuse_image_software(reqs, allowed=job.replace_tensorflow, image=self.options.image)
        hashed = next((line for line in reqs.lines if line.hashes), None)
        if hashed is not None:
            raise TpuctlError(
                f"{one_line(reqs.source, 200)}:{hashed.line}: Vertex AI installs requirements with the bundle (its "
                "install_requires), which carry no --hash: pip could not check them",
                hint="drop the --hash options for Vertex AI, or " + _REQUIREMENTS_HINT,
            )

    def _machine(self, jax: bool) -> tuple[accelerators.VertexMachine, bool]:
        chosen = self.options.accelerator
        if chosen is not None and accelerators.is_type_name(chosen):
            if self.options.machine_type or self.options.gpus_per_worker:
                raise TpuctlError("--machine-type and --gpus-per-worker are for CPU and GPU replicas; a TPU type names its machine")
            return (_jax_only_machine(chosen) if jax else None) or accelerators.vertex_machine(chosen), True
        if chosen is not None:
            gpu = accelerators.vertex_gpu_machine(chosen, self.options.gpus_per_worker)
            return (replace(gpu, machine_type=self.options.machine_type) if self.options.machine_type else gpu), False
        if self.options.gpus_per_worker:
            raise TpuctlError("--gpus-per-worker needs --accelerator with a Vertex GPU", hint="e.g. --accelerator NVIDIA_L4")
        return accelerators.VertexMachine(self.options.machine_type or accelerators.VERTEX_CPU_MACHINE, "", None, None), False

    # -- the body --------------------------------------------------------------------------------

    def _spec(self, job: Job, run_id: str) -> VertexSpec:
        from tpuctl.backends.vertex import staging
        from tpuctl.backends.vertex.job_body import VertexSpec

        machine, tpu = self._machine(job.framework == contract.JAX)
        assert self.options.image is not None
        staged = self.options.staging_bucket
        return VertexSpec(
            display_name=self.options.job_name or run_id,
            image=self.options.image,
            machine=machine,
            tpu=tpu,
            package_uri=staging.staged_uri(staged, run_id) if staged else None,
            service_account=self.options.service_account,
            run_id=run_id,
        )

    def _job_for_body(self, job: Job) -> Job:
        """With a staged bundle the script runs from its folder's copy: only its name travels."""
        return replace(job, script=os.path.basename(job.script)) if self.options.staging_bucket else job

    def request(self, job: Job, run_id: str) -> BodyRequest:
        """The body, and where it goes (from the settings, as a run reads them): no credentials, no request."""
        from tpuctl.backends.vertex.job_body import custom_job
        from tpuctl.cloud.vertex.vertex_api import regional_endpoint
        from tpuctl.settings import cloud as settings

        body = custom_job(self._job_for_body(job), self._spec(job, run_id))
        resolved = settings.resolve({"project": self.options.project, "region": self.options.region})
        region = self.options.region or resolved.get("region") or DEFAULT_REGION
        endpoint = resolved.get("vertex-endpoint") or regional_endpoint(region)
        staged = job.script if self.options.staging_bucket else None
        return BodyRequest(body, endpoint, resolved.get("project"), region, staged, self.requirements, tuple(self.notes), job.framework)

    def submit(self, request: BodyRequest, context: RunContext) -> Outcome:
        """Stage the script's folder where the body says it is, POST the body and follow the job."""
        from tpuctl.backends.vertex import staging
        from tpuctl.backends.vertex.follow import VertexRun, poll_interval
        from tpuctl.cloud.auth import credentials
        from tpuctl.cloud.vertex.vertex_api import JobLogs, VertexJobs
        from tpuctl.settings import cloud as settings

        poll_s = poll_interval()
        resolved = settings.resolve({"project": self.options.project, "region": self.options.region})
        project = request.project or resolved.project  # none set: one line, before any credential is read
        identity = credentials.load(resolved)
        for note in request.notes:
            context.notice(note)
        if request.staged_script is not None and request.package_uri is not None:
            requires = tuple(line.text for line in request.requirements.lines) if request.requirements is not None else ()
            bundle = staging.build(request.staged_script, requires)
            for link in bundle.skipped_links:
                context.notice(f"left out of the bundle: {link} (a symlinked folder, or a link leading out of the script's folder)")
            staging.upload(bundle, request.package_uri)
            context.notice(f"staged {bundle.files} file(s) ({len(bundle.data) // 1024} KiB) at {request.package_uri}")
        logging_endpoint = resolved.require("logging-endpoint")
        jobs = VertexJobs(identity, request.endpoint, project, request.region)
        run = VertexRun(jobs, lambda name: JobLogs(identity, logging_endpoint, project, name), context, request.region, poll_s, request.framework)
        outcome = run.run(request.body)
        folded = run.fold.note()
        if folded is not None:
            context.notice(folded)
        return outcome


def _jax_only_machine(accelerator: str) -> accelerators.VertexMachine | None:
    """The machineSpec of a TPU Vertex trains JAX on but not TensorFlow (v6e): its hosts' machine type and topology;
    None for every other type (the accelerator table's Vertex mapping holds)."""
    shape = accelerators.shape_of(accelerator)
    if shape.generation not in JAX_ONLY_GENERATIONS:
        return None
    host = accelerators.machine_type(shape)
    if host is None or shape.topology is None:
        raise TpuctlError(f"{accelerator}: Vertex AI has no machine type for this size", hint=f"e.g. {shape.generation}-8 or {shape.generation}-16")
    return accelerators.VertexMachine(host, "", None, shape.topology)


def runner(options: Options) -> VertexRunner:
    return VertexRunner(options)

"""The Kubernetes backend: the launch as a TFJob (CPU/GPU, parameter servers) or a JobSet (TPU slices, JAX runs).

The pods run the image's own copy of the script, so SCRIPT, --python and
--model-dir are paths inside the image. A dry run is the manifest;
a run applies it with kubectl and follows the pods (tpuctl/backends/kubernetes/follow.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import click

from tpuctl.cluster.worker_contract import JAX
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch import shared_options
from tpuctl.launch.option_fields import option
from tpuctl.launch.runner import BackendOptions, JobRunner, Unsupported

if TYPE_CHECKING:
    from tpuctl.backends.kubernetes.manifest import Manifest
    from tpuctl.launch.job import Job
    from tpuctl.launch.outcome import Outcome
    from tpuctl.launch.runner import RunContext

IMAGE_PYTHON = "python"
_OPERATOR_RESTARTS = "on Kubernetes, the operator's restart policy (--max-restarts) decides"
# The pods run the image as it is: what a launch installs on hosts belongs in the image's build.
_IN_THE_IMAGE = Unsupported(
    "build an image FROM yours that holds them (`RUN pip install -r requirements.txt`) and pass it as --image",
    line="{flag} is not available with --backend {backend}: the image must hold the packages",
)
IMAGE_NOTE = "[launch] requirements and setup are not installed on Kubernetes: the image must hold the packages"


@dataclass(frozen=True)
class Options(BackendOptions):
    image: str | None = shared_options.image()
    namespace: str = option("--namespace", metavar="NS", default="default", show_default=True, help="Kubernetes namespace of the job.")
    job_name: str | None = shared_options.job_name()
    accelerator: str | None = shared_options.accelerator()
    topology: str | None = option(
        "--topology",
        metavar="AxB[xC]",
        help="TPU slice topology, e.g. 2x4 or 2x2x4: needed with a tpu-... label.  [default for a TPU type: its usual shape, v4-32 -> 2x2x4]",
    )
    tpu_chips_per_host: int | None = option(
        "--tpu-chips-per-host",
        type=click.IntRange(min=1),
        help="Chips per TPU host where a topology comes in two machine types (4 makes v5e 2x4 two hosts).  "
        "[default: one host while the slice fits one (8 chips v5e/v6e, 4 v4/v5p), else 4]",
    )
    gpus_per_worker: int = shared_options.gpus_per_worker()


@dataclass(frozen=True)
class ManifestRequest:
    """What `kubectl apply -f -` receives: built once by `KubernetesRunner.request`, printed by the dry run,
    applied by the run."""

    manifest: Manifest
    notes: tuple[str, ...] = ()  # what the launch leaves alone (a [launch] requirements): YAML comments before the manifest

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {"kind": m.kind, "name": m.name, "namespace": m.namespace, "workers": list(m.workers), "manifest": m.text, "notes": list(self.notes)}

    def render(self) -> str:
        return "".join(f"# {note}\n" for note in self.notes) + self.manifest.text.rstrip("\n")


class KubernetesRunner(JobRunner[ManifestRequest]):
    name = "kubernetes"
    unsupported: ClassVar[Mapping[str, Unsupported]] = {
        "start_timeout": Unsupported("on Kubernetes, pods wait for the scheduler as long as it takes"),
        "hang_timeout": Unsupported(_OPERATOR_RESTARTS),
        "quiet_notice": Unsupported("run `kubectl exec POD -- py-spy dump --pid 1` to see where a quiet pod is"),
        "max_preemptions": Unsupported(_OPERATOR_RESTARTS),
        "tail_view": Unsupported("run `tpuctl tail MODEL_DIR` beside it", line="{flag} is not available with --backend {backend}"),
        "requirements": _IN_THE_IMAGE,
        "setup": _IN_THE_IMAGE,
        "index_url": _IN_THE_IMAGE,
    }

    def __init__(self, options: Options) -> None:
        self.options = options

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        if not self.options.image:
            stack = "Keras 3 and JAX" if job.framework == JAX else "TensorFlow"
            raise TpuctlError("--backend kubernetes needs --image IMAGE", hint=f"an image with SCRIPT, {stack} and tpuctl installed")
        return replace(job, python=job.python or IMAGE_PYTHON)

    def request(self, job: Job, run_id: str) -> ManifestRequest:
        from tpuctl.backends.kubernetes.manifest import KubeOptions, render

        o = self.options
        assert o.image is not None
        kube = KubeOptions(
            image=o.image,
            namespace=o.namespace or "default",
            name=o.job_name,
            accelerator=o.accelerator,
            topology=o.topology,
            chips_per_host=o.tpu_chips_per_host,
            gpus_per_worker=o.gpus_per_worker or 0,
        )
        return ManifestRequest(render(job, kube), (IMAGE_NOTE,) if job.requirements or job.setup else ())

    def submit(self, request: ManifestRequest, context: RunContext) -> Outcome:
        """Keep the manifest in the run's folder, apply it and follow the job."""
        from tpuctl.backends.kubernetes.follow import follow
        from tpuctl.inputs.private_files import write_private
        from tpuctl.runs.folder import RunFolder

        manifest = request.manifest
        for note in request.notes:
            context.notice(note)
        folder = RunFolder(context.log_dir)
        folder.make_attempt(1)  # private: the manifest holds --env values
        path = folder.manifest_file(1)
        try:
            write_private(path, manifest.text)
        except OSError as err:
            raise TpuctlError(f"cannot write {path}: {err.strerror or err}", hint="pass a --log-dir that tpuctl can write") from None
        return follow(manifest, context)


def runner(options: Options) -> KubernetesRunner:
    return KubernetesRunner(options)

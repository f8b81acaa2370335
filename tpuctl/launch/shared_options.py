"""Options more than one backend reads, declared once here and named by the same field in each
backend's Options, so the command line has one `--image` (option_fields.click_options declares a
shared field once) and each backend still receives every value it reads."""

from __future__ import annotations

from typing import Any

import click

from tpuctl.launch.option_fields import option

# A Vertex replica takes at most 16 GPUs (a2-megagpu-16g); a Kubernetes node no more in practice.
MAX_GPUS = 16
_GPU_COUNT = click.IntRange(0, MAX_GPUS)  # one instance: every declaration of --gpus-per-worker is the same option


def project() -> Any:
    return option("--project", metavar="ID", help="With --tpu or --backend vertex: the project [env TPUCTL_PROJECT].")


def image() -> Any:
    return option(
        "--image",
        metavar="IMAGE",
        help="Container image the workers run (kubernetes, vertex): it holds TensorFlow and tpuctl, and SCRIPT unless "
        "--staging-bucket uploads it (vertex).",
    )


def job_name() -> Any:
    return option(
        "--job-name", metavar="NAME", help="TFJob/JobSet name, or a Vertex job's display name.  [default: SCRIPT's name and 4 random hex digits]"
    )


def accelerator() -> Any:
    return option(
        "--accelerator",
        metavar="TYPE",
        help="A TPU type as `tpuctl create` takes it (v4-8, v5litepod-16, v6e-8, ...). Kubernetes: also a GKE node label "
        "(tpu-v5-lite-podslice, tpu-v4-podslice, ... with --topology) for a JobSet on one TPU slice, or nvidia-l4, ... for GPU "
        "nodes. Vertex: also a Vertex GPU (NVIDIA_L4, NVIDIA_TESLA_T4, NVIDIA_A100_80GB, ...).",
    )


def gpus_per_worker() -> Any:
    return option(
        "--gpus-per-worker",
        type=_GPU_COUNT,
        default=0,
        help="GPUs for each chief and worker: local workers get that many each in CUDA_VISIBLE_DEVICES (0: none)  "
        "[default: an even split of this machine's GPUs]; a pod's nvidia.com/gpu; a Vertex replica's count.",
    )

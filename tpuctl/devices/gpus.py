"""Which GPUs each local worker sees: this machine's GPUs, found without TensorFlow, shared out over the workers.

TensorFlow maps nearly all of a GPU's memory the first time a process uses it
(its BFC allocator grows only when `allow_growth` is on; TF_FORCE_GPU_ALLOW_GROWTH
overrides the setting: tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc,
GetAllowGrowthValue). Workers on one machine that all see every card therefore
fight over each, and the later ones run out of memory (issue 34). What a process
sees is CUDA's to decide, through CUDA_VISIBLE_DEVICES: GPU indices or UUIDs,
comma-separated, read up to the first entry that names no device (CUDA C++
Programming Guide, "CUDA Environment Variables"). So each worker gets its own list.

A pool that the user's own CUDA_VISIBLE_DEVICES (or `--env CUDA_VISIBLE_DEVICES`)
names is what is shared out, indices, UUIDs or empty as given; otherwise the GPUs
nvidia-smi lists, else the ones the NVIDIA driver lists in /proc/driver/nvidia/gpus.
Either way the indices are CUDA's, 0 to N-1 (CUDA numbers fastest first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID), so the lists never overlap whatever order CUDA uses.

JAX (a Keras 3 on JAX run, docs/jax.md) takes 75% of a GPU's memory when its first
operation runs, and its guide names "running multiple JAX processes concurrently" as
a cause of running out of memory, fixed with XLA_PYTHON_CLIENT_PREALLOCATE=false or
a memory fraction per process (https://docs.jax.dev/en/latest/gpu_memory_allocation.html).
So where JAX workers share a card they get XLA_PYTHON_CLIENT_PREALLOCATE=false, the
counterpart of TensorFlow's memory growth; tpuctl sets no fraction: jaxlib reads it
under two names and refuses both at once (jaxlib/xla_client.py,
generate_pjrt_gpu_plugin_options, 0.10.2), so one of the user's would make tpuctl's fail.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpuctl import devices as dev
from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.tpu.accelerators import CUDA_VISIBLE_DEVICES as VISIBLE
from tpuctl.tpu.accelerators import visible_entries

GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
# What jaxlib reads for a GPU's memory (jaxlib/xla_client.py, generate_pjrt_gpu_plugin_options): any of them set by
# the user is their choice of how JAX workers sharing a card hold memory, left to them.
JAX_MEMORY = (PREALLOCATE, "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")
DRIVER_LIST = ("proc", "driver", "nvidia", "gpus")  # one folder per GPU the loaded driver drives
# Tasks that get no GPU: ParameterServerStrategy keeps every variable on a ps task's CPU
# (parameter_server_strategy_v2.py, _create_variable_round_robin: "/job:ps/task:%d/device:CPU:0").
NO_GPU_ROLES = frozenset({"ps"})


@dataclass(frozen=True)
class Pool:
    """The GPUs there are to share out, as CUDA_VISIBLE_DEVICES entries, and where they were found."""

    ids: tuple[str, ...]
    source: str
    warning: str | None = None  # why a source was passed over (nvidia-smi failed), for the launch to say


def find_pool(environ: Mapping[str, str], nvidia_smi: str | None = None) -> Pool:
    """This machine's GPUs as the workers could see them: `environ`'s CUDA_VISIBLE_DEVICES when set, else
    nvidia-smi's GPUs, else the driver's /proc list (under TPUCTL_SYSFS_ROOT when set, for tests)."""
    warning = None
    try:
        rows: list[dev.Row] | None = dev.nvidia_smi_rows(nvidia_smi) or None
    except TpuctlError as err:
        rows, warning = None, f"{err.message}; GPUs counted from /proc/driver/nvidia/gpus"
    if VISIBLE in environ:  # an index past the machine's GPUs ends the list, as it does for CUDA
        value = environ[VISIBLE]
        return Pool(visible_entries(value, len(rows) if rows else None), f"{VISIBLE}={dev.one_line(value, 80)!r}")
    if rows:
        return Pool(tuple(str(index) for index in range(len(rows))), "nvidia-smi")
    listed = os.path.join(os.environ.get("TPUCTL_SYSFS_ROOT") or "/", *DRIVER_LIST)
    try:
        count = len([name for name in os.listdir(listed) if not name.startswith(".")])
    except OSError:
        count = 0
    source = "/proc/driver/nvidia/gpus" if count else "neither nvidia-smi nor /proc/driver/nvidia/gpus lists one"
    return Pool(tuple(str(index) for index in range(count)), source, warning)


def memory_variables(framework: str) -> dict[str, str]:
    """What makes a worker of `framework` take a shared card's memory as it needs it, rather than most of it at once."""
    return {PREALLOCATE: "false"} if framework == contract.JAX else {GROWTH: "true"}


def memory_chosen(environ: Mapping[str, str], framework: str) -> bool:
    """Whether the user already said how `framework`'s workers hold GPU memory (then tpuctl adds nothing)."""
    return any(name in environ for name in (JAX_MEMORY if framework == contract.JAX else (GROWTH,)))


@dataclass(frozen=True)
class Share:
    """What each task of a launch sees, in cluster order (chief, workers, ps): a tuple of GPUs, or None where
    tpuctl leaves the environment alone; `growth`: workers share cards and take memory as they need it
    (TensorFlow: TF_FORCE_GPU_ALLOW_GROWTH=true; JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false)."""

    pool: Pool
    gpus: tuple[tuple[str, ...] | None, ...]
    growth: bool = False
    note: str | None = None
    framework: str = contract.TENSORFLOW

    def env(self, position: int) -> dict[str, str]:
        """The variables task `position` gets (none where the environment is left alone)."""
        chosen = self.gpus[position] if position < len(self.gpus) else None
        if chosen is None:
            return {}
        return {VISIBLE: ",".join(chosen), **(memory_variables(self.framework) if self.growth and chosen else {})}

    def summary(self) -> str:
        found = f"{len(self.pool.ids)} GPU(s) ({self.pool.source})"
        return f"{found}; {self.note}" if self.note else found

    def to_json(self) -> dict[str, object]:
        return {
            "found": list(self.pool.ids),
            "source": self.pool.source,
            "tasks": [None if chosen is None else list(chosen) for chosen in self.gpus],
            "memory_growth": self.growth,
            "note": self.note,
        }


def split(pool: Pool, roles: Sequence[str], per_worker: int | None, growth_chosen: bool, framework: str = contract.TENSORFLOW) -> Share:
    """Share `pool` out over tasks of these `roles` (cluster order), for workers of `framework`.

    per_worker None: an even split, contiguous, the rest idle; fewer GPUs than workers: round-robin with
    memory growth (unless `growth_chosen`: the user set how memory is held, `memory_chosen`). One worker, or no GPU:
    nothing set. per_worker N: N each, refused (exit 2) when the pool is too small; 0: every task sees none.
    """
    takers = [position for position, role in enumerate(roles) if role not in NO_GPU_ROLES]
    count, found = len(takers), len(pool.ids)
    if per_worker is None and (not found or (count <= 1 and len(takers) == len(roles))):
        return Share(pool, (None,) * len(roles))
    chosen: list[tuple[str, ...] | None] = [()] * len(roles)  # ps tasks (and everyone under --gpus-per-worker 0) see none
    growth, note = False, None
    if per_worker == 0:
        return Share(pool, tuple(chosen), note="--gpus-per-worker 0: no task sees a GPU")
    if per_worker is not None and per_worker * count > found:
        raise TpuctlError(
            f"--gpus-per-worker {per_worker} for {count} worker(s) needs {per_worker * count} GPUs; {found} found ({pool.source})",
            hint="lower --gpus-per-worker or --workers, or leave --gpus-per-worker out to share the GPUs there are",
        )
    each = per_worker if per_worker is not None else found // count
    if each:
        for rank, position in enumerate(takers):
            chosen[position] = pool.ids[rank * each : (rank + 1) * each]
        idle = pool.ids[each * count :]
        note = f"{each} per worker" + (f"; {len(idle)} idle ({','.join(idle)})" if idle else "")
    else:
        for rank, position in enumerate(takers):
            chosen[position] = (pool.ids[rank % found],)
        growth = not growth_chosen
        variables = memory_variables(framework)
        if growth:
            how = ", ".join(f"{name}={value}" for name, value in variables.items()) + ", so each takes memory as it needs it"
        else:
            how = "JAX's GPU memory variables as you set them" if framework == contract.JAX else f"{GROWTH} as you set it"
        note = f"{count} workers share {found} GPU(s), up to {-(-count // found)} per card; {how}"
    if len(takers) < len(roles):
        note += "; ps tasks see none (their variables live on their CPU)"
    return Share(pool, tuple(chosen), growth, note, framework)

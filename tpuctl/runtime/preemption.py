"""`tpuctl.runtime.preemption_handler`: TensorFlow's PreemptionCheckpointHandler, set up for where it runs.

TensorFlow 2.x (read in 2.21: tensorflow/python/distribute/failure_handling/)
decides by platform, probing the GCE metadata server once:

| TF's platform | what ends training | exit after the save |
|---|---|---|
| not on Google Cloud, CPU/GPU | SIGTERM (a Python handler) | 42 |
| not on Google Cloud, TPU (Borg) | the TPU runtime's preemption notice | 42 |
| GCE GPU VM | `instance/maintenance-event` polled each second; trains on for up to 1 h first | 143 |
| GCE CPU VM, Cloud TPU VM | nothing: the handler only warns, restores and saves nothing | - |

tpuctl keeps TensorFlow's choice wherever it does the job, and changes it only
where a launch would otherwise lose the preemption (`choose` below, pure):
on a GCE CPU VM TensorFlow is told it is off Google Cloud, so SIGTERM (what a
VM's shutdown sends) saves and exits 42; on a GCE GPU VM under `tpuctl launch`
the exit status becomes 42, the one the launcher restarts on; on a Cloud TPU VM
the handler stays inert and tpuctl restores the latest checkpoint itself, so a
relaunch resumes from what the script saved.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tpuctl.cluster import worker_contract as contract

# TensorFlow's PlatformDevice names (failure_handling_util.py), as strings: `choose` needs no TensorFlow.
INTERNAL_CPU = "INTERNAL_CPU"
INTERNAL_GPU = "INTERNAL_GPU"
INTERNAL_TPU = "INTERNAL_TPU"
GCE_CPU = "GCE_CPU"
GCE_GPU = "GCE_GPU"
GCE_TPU = "GCE_TPU"

# Who restarts a worker that exits after a preemption.
LAUNCH = "launch"  # tpuctl launch's local or ssh backend: restarts on exit 42
OPERATOR = "operator"  # a Kubernetes operator: restarts by its own policy (tpuctl numbers no attempts there)
PLAIN = "plain"  # the script runs without tpuctl: nothing restarts it

PREEMPTED = contract.PREEMPTED_EXIT_CODE


@dataclass(frozen=True)
class Choice:
    platform: str  # the platform TensorFlow is told it runs on
    exit_code: int | None  # exit with this after the save; None: TensorFlow's own for the platform
    restore: bool  # TensorFlow's handler restores nothing there: tpuctl restores the latest checkpoint
    summary: str  # one line for the chief's log


def supervisor(environ: Mapping[str, str]) -> str:
    """Who restarts this worker: the launch numbers attempts; a Kubernetes pod has a run id but no attempt."""
    if contract.ATTEMPT in environ:
        return LAUNCH
    return OPERATOR if contract.RUN_ID in environ else PLAIN


def choose(platform: str, restarter: str) -> Choice:
    """The termination settings for TensorFlow's `platform` (a PlatformDevice name) and who restarts the worker."""
    sigterm = f"SIGTERM saves a checkpoint, then exit {PREEMPTED}"
    if restarter != OPERATOR and platform == GCE_CPU:
        # TensorFlow's handler is inert on a GCE CPU VM, yet a spot VM's shutdown sends SIGTERM: take the
        # SIGTERM path TensorFlow uses off Google Cloud.
        return Choice(INTERNAL_CPU, None, False, f"{sigterm} (TensorFlow's off-Cloud handling: its own does nothing on a GCE CPU VM)")
    if platform in (INTERNAL_CPU, INTERNAL_GPU):
        return Choice(platform, None, False, f"{sigterm} (TensorFlow's default off Google Cloud)")
    if platform == GCE_GPU:
        code = PREEMPTED if restarter == LAUNCH else None
        ends = "exit 42 for the launcher" if code else "exit 143 (TensorFlow's default)"
        return Choice(platform, code, False, f"a GCE maintenance event saves a checkpoint, and again before the host stops; then {ends}")
    if platform == INTERNAL_TPU:
        return Choice(platform, None, False, f"the TPU preemption notice saves a checkpoint, then exit {PREEMPTED} (TensorFlow's default)")
    if platform in (GCE_CPU, GCE_TPU):
        return Choice(
            platform, None, True,
            "TensorFlow's handler does nothing on this Google Cloud VM: save checkpoints yourself; tpuctl restores the latest",
        )
    return Choice(platform, None, False, f"TensorFlow's defaults for platform {platform}")


def preemption_handler(checkpoint: Any, directory: str | None, *, strategy: Any, chief: bool, termination_config: Any = None) -> Any:
    """TensorFlow's PreemptionCheckpointHandler for `strategy`; `chief`: this worker says what was chosen.

    `checkpoint` is a `tf.train.Checkpoint` (then `directory` is where the
    handler keeps it) or a `tf.train.CheckpointManager`. On creation the latest
    checkpoint there is restored. Fields of a `termination_config` you pass win
    over tpuctl's choice. The defaults (the worker's strategy, whether it is the
    chief) are the package's to fill in: `tpuctl.runtime.preemption_handler`.
    """
    import tensorflow as tf

    resolver = getattr(strategy, "cluster_resolver", None)
    util = _failure_handling_util()
    platform = util.detect_platform().name if util is not None else INTERNAL_CPU
    choice = choose(platform, supervisor(os.environ))
    config = _config(tf, choice, termination_config)
    with _platform_seen_as(util, choice.platform):
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(resolver, checkpoint, directory, config)
    if choice.restore:
        _restore(tf, checkpoint, directory)
    if chief:
        print(f"tpuctl: preemption: {choice.summary}", file=sys.stderr, flush=True)
    return handler


def _failure_handling_util() -> Any:
    """TensorFlow's platform detection (a private module): None where a TensorFlow lacks it."""
    try:
        from tensorflow.python.distribute.failure_handling import failure_handling_util
    except ImportError:
        return None
    return failure_handling_util if hasattr(failure_handling_util, "detect_platform") else None


def _config(tf: Any, choice: Choice, given: Any) -> Any:
    """The TerminationConfig to pass: the caller's fields, else tpuctl's exit code, else None (TensorFlow's defaults)."""
    exit_fn = None
    if choice.exit_code is not None:
        code = choice.exit_code

        def exit_fn() -> None:
            sys.exit(code)

    if given is None:
        return None if exit_fn is None else tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn)
    return tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=given.termination_watcher_fn,
        exit_fn=given.exit_fn or exit_fn,
        grace_period=given.grace_period,
        save_fn=given.save_fn,
    )


@contextlib.contextmanager
def _platform_seen_as(util: Any, name: str) -> Iterator[None]:
    """While the handler is built, TensorFlow's detection answers `name` (and probes the metadata server no second time)."""
    if util is None:
        yield
        return
    original = util.detect_platform
    chosen = util.PlatformDevice[name]
    util.detect_platform = lambda: chosen
    try:
        yield
    finally:
        util.detect_platform = original


def _restore(tf: Any, checkpoint: Any, directory: str | None) -> None:
    if isinstance(checkpoint, tf.train.CheckpointManager):
        checkpoint.restore_or_initialize()
        return
    latest = tf.train.latest_checkpoint(directory) if directory else None
    if latest:
        checkpoint.restore(latest)

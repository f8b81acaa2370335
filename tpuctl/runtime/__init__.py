"""What a training script can ask while it runs as a tpuctl worker.

Importing this package does not import TensorFlow; only `strategy()` (and what calls it) does, so
`python -m tpuctl.runtime` can choose Keras before TensorFlow loads. Nor does it
read the worker's environment until asked: a `--strategy none` worker starts its
script with nothing but the bootstrap imported.
"""

from __future__ import annotations

import os

from tpuctl.cluster import worker_contract as contract

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from typing import Any

    import tensorflow as tf

    from tpuctl.runtime.worker_env import WorkerEnv

_built: Any = None


def strategy() -> tf.distribute.Strategy:
    """The strategy this worker trains under: the launcher's, or one built from the environment.

    Under `tpuctl launch` this is the very strategy the runtime entered, so a
    script may call it (or construct its own of the same kind) freely. Where
    the script builds its own strategy (tpuctl then builds none), it is the
    first one the script constructed; called before that, it builds tpuctl's.
    """
    return _current()


def _current() -> Any:
    """`strategy()`, by a name that preemption_handler's `strategy` parameter does not hide."""
    global _built
    if _built is None:
        from tpuctl.runtime import strategies

        env = _env()
        _built = strategies.build(env.strategy_kind(), env)
    return _built


def _env() -> WorkerEnv:
    from tpuctl.runtime import worker_env

    return worker_env.current()


def adopt(built: Any) -> None:
    """Record the strategy the bootstrap built (or the script's own), so `strategy()` returns it."""
    global _built
    _built = built


def adopted() -> Any:
    """The strategy `strategy()` returns, None while there is none yet (builds nothing)."""
    return _built


def is_chief() -> bool:
    """True on the one worker that should write checkpoints and summaries."""
    return _env().is_chief


def worker_index() -> int:
    return _env().task.index


def num_workers() -> int:
    return _env().num_workers


def model_dir(default: str | None = None) -> str | None:
    """`--model-dir` of the launch (TPUCTL_MODEL_DIR), else `default`."""
    return contract.model_dir(os.environ) or default


def global_batch_size(per_replica: int) -> int:
    """The batch size to give tf.data: strategies split each global batch across the replicas.

    With 8 replicas (a v3-8, or --simulate-devices 8) and 32 per replica this is
    256; each replica then sees 32, the size the model was tuned for.
    """
    if per_replica < 1:
        raise ValueError(f"per_replica must be at least 1, not {per_replica}")
    replicas: int = strategy().num_replicas_in_sync
    return per_replica * replicas


def preemption_handler(
    checkpoint: Any, directory: str | None = None, *, strategy: Any = None, termination_config: Any = None
) -> tf.distribute.experimental.PreemptionCheckpointHandler:
    """TensorFlow's PreemptionCheckpointHandler for this worker's strategy, set up for where it runs.

    Restores the latest checkpoint in `directory` now; on a preemption notice
    (SIGTERM on a local or ssh launch) every worker saves at the same step and
    exits 42, on which `tpuctl launch` restarts them all (--max-preemptions).
    See tpuctl/runtime/preemption.py and docs/runtime.md, "Preemption".
    """
    from tpuctl.runtime import preemption

    chosen = _current() if strategy is None else strategy
    return preemption.preemption_handler(checkpoint, directory, strategy=chosen, chief=is_chief(), termination_config=termination_config)


def write_dir(model_dir: str) -> str:
    """Where this worker may write: model_dir on the chief, model_dir/workertemp_<i> elsewhere.

    Every multi-worker replica runs the same saving code; only the chief's
    files are kept. The others need a private place, or they would overwrite
    the chief's checkpoints (the layout tf-keras callbacks use themselves).
    """
    if is_chief():
        return model_dir
    return model_dir.rstrip("/") + f"/workertemp_{worker_index()}"

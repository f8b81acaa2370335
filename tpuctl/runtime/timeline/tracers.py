"""Whose profiler a worker drives: TensorFlow's on a TensorFlow run, JAX's on a JAX run (worker_contract.framework).

A Keras 3 run on JAX often has TensorFlow loaded too (Keras' TensorBoard callback writes through `tensorflow.summary`),
yet TensorFlow's profiler sees none of JAX's work: XLA's ops there run under JAX's own copy of the profiler. So the
run's framework, not what happens to be imported, chooses. Both write the same layout, which xprof reads alike:
`LOGDIR/plugins/profile/<session>/<host>.xplane.pb` (TensorFlow: tf.profiler.experimental.stop; JAX: jax.profiler's
stop_trace, ProfilerSession.stop_and_export; jax/_src/profiler.py), and both mark a step the same way: a TraceMe
named "train" with `step_num` and `_r=1` (JAX's StepTraceAnnotation is that TraceMe, jax/_src/profiler.py), which
xprof takes as a step marker.

Nothing here imports either framework: each call imports what it drives, which the worker has by then.
"""

from __future__ import annotations

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any

STEP_NAME = "train"  # the marker's name, as tf-keras and Keras 2 name their own steps' markers


class TensorFlowTracer:
    name = "TensorFlow"
    module = "tensorflow"  # the server starts once this is imported

    @staticmethod
    def serve(tf: ModuleType, port: int) -> None:
        tf.profiler.experimental.server.start(port)

    @staticmethod
    def start(logdir: str) -> None:
        import tensorflow as tf

        tf.profiler.experimental.start(logdir)

    @staticmethod
    def stop() -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()

    @staticmethod
    def step(number: int) -> Any:
        import tensorflow as tf

        return tf.profiler.experimental.Trace(STEP_NAME, step_num=number, _r=1)


class JaxTracer:
    name = "JAX"
    module = "jax"

    @staticmethod
    def serve(jax: ModuleType, port: int) -> None:
        """requires_backend=False: JAX would otherwise initialise its backends here, at `import jax`, before the script's
        keras.distribution.initialize() (jax.distributed.initialize must come first, jax/_src/distributed.py).
        JAX releases before that argument existed did not initialise them in start_server."""
        import inspect

        from jax import profiler

        if "requires_backend" in inspect.signature(profiler.start_server).parameters:
            profiler.start_server(port, requires_backend=False)
        else:
            profiler.start_server(port)

    @staticmethod
    def start(logdir: str) -> None:
        from jax import profiler

        profiler.start_trace(logdir)

    @staticmethod
    def stop() -> None:
        from jax import profiler

        profiler.stop_trace()  # type: ignore[no-untyped-call]

    @staticmethod
    def step(number: int) -> Any:
        from jax import profiler

        return profiler.StepTraceAnnotation(STEP_NAME, step_num=number)


if TYPE_CHECKING:  # a runtime union of classes needs Python 3.10; hosts run the runtime on 3.8 and later
    Tracer = TensorFlowTracer | JaxTracer


def jax_run(environ: Mapping[str, str]) -> bool:
    """A worker whose framework is unreadable runs TensorFlow's way (bootstrap.py refuses it anyway)."""
    try:
        return contract.framework(environ) == contract.JAX
    except TpuctlError:
        return False


def for_run(environ: Mapping[str, str]) -> Tracer:
    return JaxTracer() if jax_run(environ) else TensorFlowTracer()


def save(source: str, folder: str, name: str) -> str:
    """Copy the profile into `folder` (local, or a URL such as gs:// through TensorFlow's file systems); its path."""
    target = f"{folder.rstrip('/')}/{name}"
    if "://" not in folder:
        import os
        import shutil

        os.makedirs(folder, exist_ok=True)
        shutil.copyfile(source, target)
        return target
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        raise RuntimeError(f"writing to {folder.split('://')[0]}:// needs TensorFlow's file systems, and TensorFlow is not installed here")
    import tensorflow as tf

    tf.io.gfile.makedirs(folder)
    tf.io.gfile.copy(source, target, overwrite=True)
    return target

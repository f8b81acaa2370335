"""The worker's part of the run's timeline: Keras `fit`'s steps and validation, every checkpoint save and restore, told to the launcher.

The launcher stamps each `timeline {json}` line on its arrival (tpuctl/runs/timeline.py), so a
worker sends only what it alone sees: the first step done, a step now and then, a checkpoint's
begin and end. Nothing here may slow a step down or stop one:

- steps come from a callback installed into every `fit` (Keras 3, tf-keras, Keras 2), and so does the
  validation at each epoch's end (fit passes its callbacks to the evaluate it runs); it sends steps at
  most one line a second (SAMPLE_S), and between two it costs one clock read (a vDSO call, no
  syscall). It keeps `fit`'s fast paths as they were: Keras 3's asynchronous callback dispatch
  (async_safe) and tf-keras' logs as tensors (_supports_tf_logs, else every step would wait for its
  result to be copied to Python);
- checkpoints: tf.train.Checkpoint's save/write/restore/read and CheckpointManager's save and
  restore_or_initialize (tf-keras' BackupAndRestore and TF-format weights go through them), and a
  Keras model's save, save_weights and load_weights (Keras 3's BackupAndRestore and ModelCheckpoint
  use those). Only the outermost of nested calls is told (save calls write);
- each line is one non-blocking send on the control channel (channel.py): a channel the launcher
  does not read drops the line.

The same callback keeps the worker's profiling steps (profiler.py: Keras 3's step markers,
`launch --profile`'s window), which need no channel.

Installed by bootstrap.py unless TPUCTL_TIMELINE=0 (worker_contract.TIMELINE) and nothing is profiled,
on import of the modules concerned (after_import.py): nothing of TensorFlow or Keras is imported here.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

from tpuctl.runtime import after_import
from tpuctl.runtime.timeline.channel import Channel

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from tpuctl.runtime.timeline.profiler import Steps

SAMPLE_S = 1.0  # at most one step line a second from a worker
SOURCE = "keras"
_MARK = "_tpuctl_timeline"
_inside = threading.local()  # .depth: timed checkpoint calls running in this thread


def install(channel: Channel | None, steps: Steps | None = None) -> None:
    """Hook `fit` (and, with a channel, the checkpoint calls) once their modules load (now, for those already loaded)."""
    for name in ("keras", "tf_keras"):
        after_import.when_imported(name, functools.partial(_hook_keras, channel=channel, steps=steps))
    if channel is None:
        return
    after_import.when_imported("tensorflow.python.checkpoint.checkpoint", functools.partial(_hook_checkpoint, channel=channel))
    after_import.when_imported("tensorflow.python.checkpoint.checkpoint_management", functools.partial(_hook_manager, channel=channel))


def _hook_keras(keras: ModuleType, channel: Channel | None, steps: Steps | None) -> None:
    """Keras 3, tf-keras or Keras 2 (TensorFlow 2.15 and older's `keras`): the same names serve all three."""
    model = getattr(keras, "Model", None)
    base = getattr(getattr(keras, "callbacks", None), "Callback", None)
    if model is None or base is None:
        return  # a `keras` that is no Keras, or one whose import failed half-way
    keras_3 = keras.__name__ == "keras" and str(getattr(keras, "__version__", "")).split(".")[0] not in ("", "0", "1", "2")
    callback = _callback_class(base, channel, steps, markers=keras_3)
    _patch(model, "fit", lambda fit: _fitting(fit, callback))
    if channel is None:
        return
    for name in ("save", "save_weights"):
        _patch(model, name, lambda method: _timed(method, "checkpoint_save_begin", "checkpoint_save_end", channel))
    _patch(model, "load_weights", lambda method: _timed(method, "checkpoint_restore_begin", "checkpoint_restore_end", channel))


def _hook_checkpoint(module: ModuleType, channel: Channel) -> None:
    klass = module.Checkpoint  # tf.train.Checkpoint (TF2's)
    for name in ("save", "write"):
        _patch(klass, name, lambda method: _timed(method, "checkpoint_save_begin", "checkpoint_save_end", channel))
    for name in ("restore", "read"):
        _patch(klass, name, lambda method: _timed(method, "checkpoint_restore_begin", "checkpoint_restore_end", channel))


def _hook_manager(module: ModuleType, channel: Channel) -> None:
    klass = module.CheckpointManager
    _patch(klass, "save", lambda method: _timed(method, "checkpoint_save_begin", "checkpoint_save_end", channel))
    # tf-keras' BackupAndRestore calls it at every fit's start: a restore only where there is a checkpoint to restore.
    _patch(
        klass,
        "restore_or_initialize",
        lambda method: _timed(method, "checkpoint_restore_begin", "checkpoint_restore_end", channel, when=_has_checkpoint),
    )


def _has_checkpoint(manager: Any) -> bool:
    return manager.latest_checkpoint is not None


def _patch(klass: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    method = getattr(klass, name, None)
    if method is None or getattr(method, _MARK, False):
        return
    wrapper = wrap(method)
    setattr(wrapper, _MARK, True)
    setattr(klass, name, wrapper)


def _timed(
    method: Callable[..., Any], begin: str, end: str, channel: Channel, when: Callable[[Any], bool] | None = None
) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "depth", 0) or (when is not None and not when(args[0])):
            return method(*args, **kwargs)  # inside another timed call (save -> write): told once, by the outermost
        _inside.depth = 1
        channel.send(begin)
        failed = True
        try:
            result = method(*args, **kwargs)
            failed = False
            return result
        finally:
            _inside.depth = 0
            channel.send(end, **({"failed": True} if failed else {}))

    return wrapper


def _fitting(fit: Callable[..., Any], callback: Callable[[], Any]) -> Callable[..., Any]:
    """`fit` with the timeline's callback added to the script's own (callbacks=, or fit's sixth argument)."""

    @functools.wraps(fit)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > 5:
            args = (*args[:5], _with(args[5], callback), *args[6:])
        else:
            kwargs["callbacks"] = _with(kwargs.get("callbacks"), callback)
        return fit(self, *args, **kwargs)

    return wrapper


def _with(callbacks: Any, callback: Callable[[], Any]) -> Any:
    if callbacks is None:
        return [callback()]
    if isinstance(callbacks, list | tuple):
        return [*callbacks, callback()]
    return callbacks  # a CallbackList of the script's own: left as it is


def _callback_class(base: type, channel: Channel | None, steps: Steps | None = None, *, markers: bool = False) -> Callable[[], Any]:
    """markers: Keras 3, whose steps get profiler markers (profiler.py says why they run begin to begin)."""

    class TimelineCallback(base):  # type: ignore[misc]
        """Sends the first step done, then a step at most every SAMPLE_S, and the last one as the fit ends;
        keeps the profiling steps."""

        async_safe = True  # Keras 3: dispatch callbacks asynchronously where it did without this one

        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # tf-keras: the step's logs stay tensors, no per-step sync
            self._next = 0.0
            self._batches = 0
            self._sent = 0  # batches done when the last step line went
            self._start: int | None = None  # Keras 3 on JAX: the optimizer's step count as the fit began

        def on_train_begin(self, logs: Any = None) -> None:
            if steps is not None:
                steps.train_begins()
            if _on_jax():
                self._start = self._iterations()

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if steps is not None:
                steps.step_begins(markers)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if steps is not None:
                steps.epoch_ends()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if steps is not None and not markers:
                steps.step_ends()
            self._batches += 1
            if channel is None:
                return
            now = time.monotonic()
            if now < self._next:
                return
            self._next = now + SAMPLE_S
            self._sent = self._batches
            step = self._step()
            if not channel.first_step_sent:
                channel.first_step_sent = True
                channel.send("first_step", step=step, source=SOURCE)
            channel.send("step", step=step, source=SOURCE)

        def on_test_begin(self, logs: Any = None) -> None:
            if channel is not None:  # fit's validation: fit hands its callbacks to its own evaluate
                channel.send("evaluation_begin")

        def on_test_end(self, logs: Any = None) -> None:
            if channel is not None:
                channel.send("evaluation_end")

        def on_train_end(self, logs: Any = None) -> None:
            if steps is not None:
                steps.train_ends()
            if channel is not None and self._batches > self._sent:  # where training ended, not where the last sample fell
                channel.send("step", step=self._step(), source=SOURCE)

        def _step(self) -> int:
            """The optimizer's step count (the run's, across restarts); the batches of this fit where it has none.

            On JAX the count is the fit's start plus its batches: Keras' `Callback.model` syncs the trainer's JAX
            state into the model's variables, and done from the asynchronous dispatch's thread mid-epoch it races the
            next step, which has donated those buffers ("Buffer has been deleted or donated": the fit fails)."""
            if self._start is not None:
                return self._start + self._batches
            return self._iterations()

        def _iterations(self) -> int:
            try:
                return int(self.model.optimizer.iterations.numpy())
            except Exception:  # noqa: BLE001 - a step number is a view: never a reason for a step to fail
                return self._batches

    return TimelineCallback


def _on_jax() -> bool:
    """Keras 3 on its JAX backend (keras.src.backend's config, read where Keras already loaded it)."""
    config = sys.modules.get("keras.src.backend.config")
    backend = getattr(config, "backend", None)
    try:
        return callable(backend) and backend() == "jax"
    except Exception:  # noqa: BLE001 - a Keras without it: not Keras 3 on JAX
        return False

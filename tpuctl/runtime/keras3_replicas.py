"""Keras 3 custom training loops on several replicas in one process: variables created where they can be.

The tutorials' custom loop creates `optimizer = tf.keras.optimizers.Adam()` in
`strategy.scope()` and calls `optimizer.apply_gradients(...)` inside
`strategy.run`; many also leave the model without an input shape, so its first
call inside `strategy.run` builds it. Keras 3 creates those variables (the
layers' weights, Adam's moments) right there: inside the replica function, which
MirroredStrategy runs in one thread per local device while tf.function traces
it. Their initialisers land in tf.function's "initialise on the first call"
`cond`, fed from another replica's graph, and the first step fails with `You
must feed a value for placeholder tensor 'cond/.../Placeholder'`
(keras-team/keras#19246; tensorflow/tensorflow#72686 reports a hang on GPUs).
That is every MirroredStrategy with two or more local devices: several GPUs,
simulated CPUs (`--simulate-devices`), a rehearsal's stand-in TPUStrategy. One
device per process (MultiWorkerMirrored on CPU, OneDevice, the default
strategy) runs the replica function in the calling thread and works, and so
does a real TPUStrategy, which traces one replica function for all its cores.

tf-keras lifts the same creation out of the function (`tf.init_scope()`), and
Keras 3's own `fit` builds model and optimizer in the strategy's scope before
its first step. This does the latter for a custom loop, at the moment Keras 3
would have built them: the replicas meet in a `merge_call`, and there, once,
outside any function and in the strategy's scope, the layer or optimizer is
built, exactly as `optimizer.build(model.trainable_variables)` before the loop
would build it. Nothing else about the step changes; what is already built, or
is built anywhere else, is never touched.

Installed when the `keras` package (Keras 3) has been imported; inert under
tf-keras, which never imports it.
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

NOTE = (
    "Keras 3 on {replicas} replicas in one process: built {what} in the strategy's scope before the first step, as "
    "Keras 3's own fit does (created inside strategy.run they fail there: keras-team/keras#19246); "
    "--keras tf-keras runs tf-keras instead"
)


def watch(say: Callable[[str], None] | None) -> None:
    """Patch Keras 3 once it is imported (now, if it already is); `say` tells each kind of build once, if given."""
    from tpuctl.runtime import after_import

    after_import.when_imported("keras", functools.partial(install, say=say))


def install(keras: ModuleType, say: Callable[[str], None] | None = None) -> None:
    """Runs as soon as `keras` has executed, possibly in the middle of TensorFlow's own import:
    nothing of TensorFlow is touched here, only when a step first runs. The `keras` package of
    TensorFlow 2.15 and older is Keras 2 (whose tf.keras builds as tf-keras does): left alone."""
    if not str(getattr(keras, "__version__", "")).startswith("3.") or keras.config.backend() != "tensorflow":
        return
    said: set[str] = set()

    def tell(replicas: int, kind: str, what: str) -> None:
        if say is not None and kind not in said:
            said.add(kind)
            say(NOTE.format(replicas=replicas, what=what))

    layer = keras.src.layers.layer.Layer
    if not getattr(layer._maybe_build, "_tpuctl_builds", False):
        layer._maybe_build = _building_layer(layer._maybe_build, tell)
    # Every optimizer class that defines its own `apply` builds there (LossScaleOptimizer, MultiOptimizer).
    pending: list[type] = [keras.src.optimizers.base_optimizer.BaseOptimizer]
    while pending:
        klass = pending.pop()
        pending.extend(klass.__subclasses__())
        apply = vars(klass).get("apply")
        if apply is not None and not getattr(apply, "_tpuctl_builds", False):
            klass.apply = _building_optimizer(apply, tell)  # type: ignore[attr-defined]


def _building_layer(maybe_build: Callable[..., Any], tell: Callable[[int, str, str], None]) -> Callable[..., Any]:
    @functools.wraps(maybe_build)
    def wrapper(self: Any, call_spec: Any) -> Any:
        if not self.built:
            replicas = build_across_replicas(lambda: maybe_build(self, call_spec), lambda: bool(self.built))
            if replicas and self.weights:  # said only where variables were created
                tell(replicas, "layer", f"the layers of '{self.name}'")
        return maybe_build(self, call_spec)  # built: returns at once

    wrapper._tpuctl_builds = True  # type: ignore[attr-defined]
    return wrapper


def _building_optimizer(apply: Callable[..., Any], tell: Callable[[int, str, str], None]) -> Callable[..., Any]:
    @functools.wraps(apply)
    def wrapper(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
        if trainable_variables is not None and not self.built:
            trainable_variables = list(trainable_variables)
            variables = trainable_variables

            def build() -> None:
                self.build(variables)
                self.built = True

            before = len(self.variables)
            replicas = build_across_replicas(build, lambda: bool(self.built))
            if replicas and len(self.variables) > before:  # plain SGD has no slots to create
                tell(replicas, "optimizer", f"{type(self).__name__}'s variables")
        return apply(self, grads, trainable_variables)

    wrapper._tpuctl_builds = True  # type: ignore[attr-defined]
    return wrapper


def build_across_replicas(build: Callable[[], object], built: Callable[[], bool]) -> int:
    """Run `build` once for all replicas, outside the traced function and in the strategy's scope, where Keras 3
    would otherwise run it inside each replica of a multi-device MirroredStrategy; the replica count, or 0 (not here)."""
    import tensorflow as tf
    from tensorflow.python.distribute import mirrored_strategy

    if tf.distribute.in_cross_replica_context():
        return 0
    context = tf.distribute.get_replica_context()
    extended = context.strategy.extended
    # Checked before `worker_devices`, which the default strategy answers with a RuntimeError.
    if not isinstance(extended, mirrored_strategy.MirroredExtended) or len(extended.worker_devices) < 2:
        return 0
    devices = extended.worker_devices

    def once(distribution: Any) -> None:
        if not built():
            with tf.init_scope(), distribution.scope():
                build()

    # Building is plain Python, run once: AutoGraph (merge_call converts inside tf.function) has nothing to convert.
    context.merge_call(tf.autograph.experimental.do_not_convert(once))
    return len(devices)

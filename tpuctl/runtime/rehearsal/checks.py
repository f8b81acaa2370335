"""What a rehearsal can tell on a CPU about a script's fit for a TPU, observed without changing how it runs.

Each rule says what the TPU's own code path does (docs/rehearse.md has the table with sources):

- a global batch that does not split evenly across the replicas runs: TPUStrategy
  pads the replicas' batches (its dynamic padder), so cores compute on padding;
  with the padder turned off in RunOptions a TPU refuses the other shapes;
- strategy.reduce of per-replica values of different shapes is add_n outside the
  TPU program, which refuses them (Keras 3's fit and evaluate reduce their first
  batch so);
- the batch is read as tf.distribute reads it to split it (the components' common
  first dimension, or TensorFlow's own op where one is not static); a TPUEstimator's
  is its train_batch_size, whatever layout its input_fn gives a batch;
- a batch dimension that is not static (`drop_remainder=False`) in a dataset that
  can end means a partial last batch, which a TPU pads and compiles a second
  program for; one that never ends (`.repeat()`) has none;
- every op of the replica step needs an XLA kernel, as a TPU compiles the step
  with XLA; without soft device placement it refuses the step, with it the op
  runs on the host. The op types are read from the traced graph and looked up
  in XLA's CPU registry, so nothing is compiled and the step still runs here;
- float64 computed in the step: a TPU accepts it, with no 64-bit floating-point
  units; float64 that XLA folds to a constant when it compiles (folding.py) is none;
- strategy.run outside tf.function with a plain Python function: TPUStrategy refuses it.

What a CPU cannot tell (speed, memory fit, TPU-only ops) is in docs/rehearse.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf
from tensorflow.python.data.experimental.ops import distribute as data_distribute
from tensorflow.python.distribute import tpu_strategy
from tensorflow.python.framework import kernels

from tpuctl.runtime.rehearsal import folding
from tpuctl.runtime.rehearsal.embedding import SPARSE_EMBEDDING_OPS

OK, WARNING, FAILED, NOT_CHECKED = "ok", "warning", "failed", "not checked"
_XLA_DEVICE = "XLA_CPU_JIT"
# Graph plumbing that is no op of the step on a TPU: function arguments, and the collectives
# MirroredStrategy uses where TPUStrategy would all-reduce inside the compiled program.
_PLUMBING_PREFIXES = ("Collective", "Nccl")
# A resource variable's handle (VarHandleOp, in a TPUEstimator model_fn) is an argument of the compiled
# program, as a variable captured by a tf.function step is a Placeholder.
_PLUMBING = frozenset({"Placeholder", "NoOp", "Const", "Identity", "VarHandleOp"})
_DT_DOUBLE = tf.float64.as_datatype_enum
_SHOWN = 6  # op names listed in a verdict


def register_xla_kernels() -> bool:
    """XLA registers its CPU kernels on first use; the op check reads that registry. False: no XLA here."""

    @not_converted
    def double(x: Any) -> Any:
        return x * 2

    try:
        tf.function(double, jit_compile=True)(tf.constant(1.0))
    except Exception:  # noqa: BLE001 - a TensorFlow built without XLA: the op check says it could not run
        return False
    return _has_xla_kernel("MatMul")


def not_converted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """tf.autograph.experimental.do_not_convert, typed: tpuctl's own code runs in the graph as written."""
    converted: Callable[..., Any] = tf.autograph.experimental.do_not_convert(fn)
    return converted


def _has_xla_kernel(op_type: str) -> bool:
    return any(k.device_type == _XLA_DEVICE for k in kernels.get_registered_kernels_for_op(op_type).kernel)


def is_train_step(fn: Any) -> bool:
    """Whether strategy.run was given a train step: Keras' evaluate and predict steps are told apart, the rest train.

    tf-keras passes a function built in make_test_function / make_predict_function;
    Keras 3 passes the model's own test_step method itself (make_test_function and
    make_train_function share one builder), and for predict a function built in
    make_predict_function.
    """
    function = getattr(fn, "python_function", fn)
    name = getattr(function, "__qualname__", "") or ""
    method = getattr(function, "__name__", "") or ""
    return method not in ("test_step", "predict_step") and "make_test_function" not in name and "make_predict_function" not in name


@dataclass
class _Dataset:
    global_batch: int | None
    per_replica: int | None
    static: bool  # every component's batch dimension is static
    endless: bool = False  # tf.data's cardinality is INFINITE: no last, partial batch
    unreadable: tuple[int, ...] = ()  # static leading dimensions that disagree: tf.distribute reads no batch from them


@dataclass
class Checks:
    replicas: int
    datasets: list[_Dataset] = field(default_factory=list)
    op_types: set[str] = field(default_factory=set)
    float64_ops: list[str] = field(default_factory=list)
    traced_steps: int = 0
    eager_refusals: list[str] = field(default_factory=list)  # TPUStrategy's own words, once per kind
    hard_placement: bool = False  # a step traced without soft device placement
    unpadded: bool = False  # a strategy.run given RunOptions(experimental_enable_dynamic_batch_size=False)
    uneven_reduces: list[str] = field(default_factory=list)  # the shapes of per-replica values reduced together
    embeddings: list[tuple[str, str]] = field(default_factory=list)  # TPU embedding APIs not rehearsed: (what, why)
    tensorcore_embeddings: list[str] = field(default_factory=list)  # those that run in the step, as here (TPUEmbeddingV0)
    estimator_batches: list[int] = field(default_factory=list)  # each TPUEstimator's train_batch_size
    xla_available: bool = True
    executions: set[int] = field(default_factory=set)  # steps_per_execution of each Keras 3 model compiled
    _scanned: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- observations ------------------------------------------------------------------------

    def dataset(self, dataset: Any, *, per_replica: bool) -> None:
        """A dataset handed to the strategy: its batch as tf.distribute reads it (global, or per replica), and whether
        it can end in a partial batch."""
        dims = _batch_dims(getattr(dataset, "element_spec", None))
        if not dims:
            return
        static = all(d is not None for d in dims)
        unreadable = tuple(sorted({d for d in dims if d is not None})) if static and len(set(dims)) > 1 else ()
        batch = None if unreadable else _batch_size(dataset, dims)
        endless = _endless(dataset)
        if per_replica:
            self.datasets.append(_Dataset(None if batch is None else batch * self.replicas, batch, static, endless, unreadable))
        else:
            split = None if batch is None or batch % self.replicas else batch // self.replicas
            self.datasets.append(_Dataset(batch, split, static, endless, unreadable))

    def estimator_dataset(self, dataset: Any) -> None:
        """A dataset a TPUEstimator's input_fn returned: whether it can end in a partial batch. Its batch is not read
        from it: TPUEstimator hands out its own (`params['batch_size']`, from train_batch_size: estimator_batches), and
        an input_fn may lay a batch out as it likes (tensorflow/tpu's ResNet flattens its images, `transpose_input`)."""
        dims = _batch_dims(getattr(dataset, "element_spec", None))
        if dims:
            self.datasets.append(_Dataset(None, None, all(d is not None for d in dims), _endless(dataset)))

    def steps_per_execution(self, steps: int) -> None:
        self.executions.add(steps)

    def run_called(self, fn: Any, eager: bool, options: Any = None) -> None:
        """strategy.run as TPUStrategy.run takes it: its own check of `fn`, and the placement its step is compiled with.

        Eagerly, TPUStrategy accepts only a tf.function (validate_run_function); inside
        one, tpu.replicate compiles the step with automatic outside compilation when soft
        device placement is on at that point (tensorflow/python/tpu/tpu.py), which inside
        a tf.function is only where the script turned it on itself. RunOptions can turn
        off the dynamic padder that lets replicas' batches differ.
        """
        if options is not None and not getattr(options, "experimental_enable_dynamic_batch_size", True):
            self.unpadded = True
        if eager:
            try:
                tpu_strategy.validate_run_function(fn)
            except NotImplementedError as refused:
                said = str(refused).split(". ")[0]
                if said not in self.eager_refusals:
                    self.eager_refusals.append(said)
        else:
            self.placement()

    def placement(self) -> None:
        """Soft device placement where a TPU program is being built (strategy.run traced, or TPUEstimator's model_fn):
        tpu.replicate and tpu.shard read it there; a graph of TF1 behaviour has it off too unless the script set it."""
        if not tf.config.get_soft_device_placement():
            self.hard_placement = True

    def reduced(self, value: Any) -> None:
        """strategy.reduce in cross-replica context: per-replica values whose shapes cannot be added together."""
        for leaf in tf.nest.flatten(value, expand_composites=False):
            parts = getattr(leaf, "values", None)
            if not isinstance(parts, tuple) or len(parts) < 2:
                continue
            shapes: list[Any] = [getattr(p, "shape", None) for p in parts]
            if any(s is None for s in shapes):
                continue
            first = shapes[0]
            other = next((s for s in shapes[1:] if not first.is_compatible_with(s)), None)
            if other is not None:
                self.uneven_reduces.append(f"{first.as_list()} and {other.as_list()}")

    def step_ops(self, fn: Any, call: Callable[[], Any]) -> Any:
        """Trace one replica's step (`call`) and, the first time for this step, read the op types it added to the graph."""
        key = getattr(fn, "__qualname__", None) or repr(fn)
        with self._lock:
            first = key not in self._scanned
            self._scanned.add(key)
        if not first:
            return call()
        return self.graph_ops(call)

    def graph_ops(self, call: Callable[[], Any]) -> Any:
        """Run `call` (a step being traced: a replica's, or a TPUEstimator model_fn) and read the op types it adds to the graph."""
        graph = tf.compat.v1.get_default_graph()
        functions: dict[str, Any] = getattr(graph, "_functions", {})
        ops_before, functions_before = len(graph.get_operations()), set(functions)
        result = call()
        self.traced_steps += 1
        added = graph.get_operations()[ops_before:]
        constants = folding.folded_ops(added)  # float64 there is a number in the compiled program, not work on the TPU
        for op in added:
            self.op_types.add(op.type)
            if op not in constants and any(t.dtype == tf.float64 for t in op.outputs):
                self.float64_ops.append(op.type)
        for name in set(functions) - functions_before:
            definition = _definition(functions[name])
            nodes = () if definition is None else definition.node_def
            folded = folding.folded_nodes(nodes)
            for node in nodes:
                self.op_types.add(node.op)
                if node.name not in folded and any(a.type == _DT_DOUBLE or _DT_DOUBLE in a.list.type for a in node.attr.values()):
                    self.float64_ops.append(node.op)
        self.op_types -= set(functions)  # calls of the step's own functions, by name
        return result

    # --- verdicts ------------------------------------------------------------------------------

    @property
    def global_batch(self) -> int | None:
        """The run's global batch: a TPUEstimator's train_batch_size, else the first dataset's batch tf.distribute read."""
        if self.estimator_batches:
            return self.estimator_batches[0]
        return next((d.global_batch for d in self.datasets if d.global_batch is not None), None)

    @property
    def per_replica_batch(self) -> int | None:
        if self.estimator_batches:  # TPUEstimator's params['batch_size'] in model_fn on the TPU: train_batch_size // shards
            batch = self.estimator_batches[0]
            return None if batch % self.replicas else batch // self.replicas
        return next((d.per_replica for d in self.datasets if d.global_batch is not None), None)

    def verdicts(self, *, multi_host: bool, model_dir: str | None) -> list[dict[str, str]]:
        found = [self._batch_split(), self._static_batch(), self._xla_ops(), self._float64()]
        if self.embeddings or self.tensorcore_embeddings:
            found.append(self._embeddings())
        if self.uneven_reduces:
            found.append(
                verdict(
                    "reduce",
                    FAILED,
                    f"strategy.reduce was given per-replica values of shapes {self.uneven_reduces[0]}: outside its TPU program "
                    "TPUStrategy adds them with add_n, which refuses different shapes (Keras 3's fit and evaluate reduce their "
                    "first batch so, before any step: a batch that does not split fails there on a TPU too)",
                )
            )
        if self.eager_refusals:
            found.append(verdict("tf.function", FAILED, f"TPUStrategy would raise: {self.eager_refusals[0]}"))
        looped = sorted(s for s in self.executions if s > 1)
        if looped:
            found.append(
                verdict(
                    "steps_per_execution",
                    OK,
                    f"{looped[-1]} steps per execution on the TPU; rehearsed one step per call, as Keras 3 "
                    "cannot loop steps under MirroredStrategy",
                )
            )
        if multi_host:
            found.append(self._checkpoints(model_dir))
        return found

    def _batch_split(self) -> dict[str, str]:
        name = "batch split"
        sizes = [d.global_batch for d in self.datasets if d.global_batch is not None]
        if not sizes and self.estimator_batches:
            return self._estimator_split(name)
        if not sizes:
            unreadable = next((d.unreadable for d in self.datasets if d.unreadable), ())
            if unreadable:
                return verdict(
                    name,
                    NOT_CHECKED,
                    f"the dataset's components have first dimensions {_listed([str(d) for d in unreadable])}: tf.distribute "
                    "reads no one batch from them (it splits each component along its own first dimension)",
                )
            return verdict(name, NOT_CHECKED, "no dataset with a static batch size reached the strategy")
        uneven = sorted({b for b in sizes if b % self.replicas})
        if uneven and self.unpadded:
            return verdict(
                name,
                FAILED,
                f"global batch {uneven[0]} does not split evenly across {self.replicas} replicas, and strategy.run was given "
                "RunOptions(experimental_enable_dynamic_batch_size=False): without the dynamic padder the replicas' batches "
                f"differ in shape, and a TPU runs one program of one shape on every replica; use a multiple of {self.replicas}",
            )
        if uneven:
            return verdict(
                name,
                WARNING,
                f"global batch {uneven[0]} does not split evenly across {self.replicas} replicas: TPUStrategy pads the "
                "smaller replicas' batches (its dynamic padder, RunOptions.experimental_enable_dynamic_batch_size), so "
                f"cores compute on padding; a multiple of {self.replicas} (e.g. "
                f"{self.replicas * max(1, uneven[0] // self.replicas)}) keeps every core busy",
            )
        shown = ", ".join(f"{b} = {self.replicas} x {b // self.replicas}" for b in sorted(set(sizes)))
        return verdict(name, OK, f"global batch {shown} per replica")

    def _estimator_split(self, name: str) -> dict[str, str]:
        """TPUEstimator splits its train_batch_size over the shards itself, and refuses a size that does not divide."""
        batch = self.estimator_batches[0]
        if batch % self.replicas:
            return verdict(
                name,
                NOT_CHECKED,
                f"TPUEstimator splits its train_batch_size {batch} over the {self.replicas} replicas itself: see the TPUEstimator train check",
            )
        return verdict(name, OK, f"global batch {batch} = {self.replicas} x {batch // self.replicas} per replica (TPUEstimator's train_batch_size)")

    def _static_batch(self) -> dict[str, str]:
        name = "static shapes"
        if not self.datasets:
            return verdict(name, NOT_CHECKED, "no dataset reached the strategy")
        dynamic = sum(1 for d in self.datasets if not d.static and not d.endless)
        if dynamic:
            return verdict(
                name,
                WARNING,
                f"{dynamic} dataset(s) can end in a partial batch (batch dimension None): a TPU pads it and compiles "
                "another program; batch with drop_remainder=True",
            )
        if all(d.static for d in self.datasets):
            return verdict(name, OK, "every batch has a static size (drop_remainder=True)")
        return verdict(
            name,
            OK,
            "no dataset ends in a partial batch: those without a static batch size never end (tf.data cardinality INFINITE, "
            "as after .repeat()), so every batch has the same size",
        )

    def _xla_ops(self) -> dict[str, str]:
        name = "XLA ops"
        if not self.xla_available:
            return verdict(name, NOT_CHECKED, "this TensorFlow has no XLA CPU compiler")
        if not self.traced_steps:
            return verdict(name, NOT_CHECKED, "no step ran inside tf.function")
        steps = {t for t in self.op_types if t not in _PLUMBING and not t.startswith(_PLUMBING_PREFIXES)}
        if self.embeddings:  # a TPU's embedding hardware does that work, outside the XLA program
            steps -= SPARSE_EMBEDDING_OPS
        missing = sorted(t for t in steps if not _has_xla_kernel(t))
        if missing and self.hard_placement:
            return verdict(
                name,
                FAILED,
                f"no XLA kernel for {_listed(missing)}: without soft device placement (off inside tf.function unless "
                "tf.config.set_soft_device_placement(True)) a TPU refuses to compile the step",
            )
        if missing:
            return verdict(
                name,
                WARNING,
                f"no XLA kernel for {_listed(missing)}: soft device placement is on, so the TPU runs them on its host "
                "(automatic outside compilation), a round trip in every step",
            )
        return verdict(name, OK, f"all {len(steps)} op types of the step have XLA kernels")

    def _float64(self) -> dict[str, str]:
        name = "float64"
        if not self.traced_steps:
            return verdict(name, NOT_CHECKED, "no step ran inside tf.function")
        if self.float64_ops:
            return verdict(
                name,
                WARNING,
                f"the step computes in float64 ({_listed(sorted(set(self.float64_ops)))}): a TPU compiles it, "
                "but has no 64-bit floating-point units; float32 or bfloat16 is what it computes fast",
            )
        return verdict(name, OK, "no float64 in the step")

    def _embeddings(self) -> dict[str, str]:
        name = "TPU embeddings"
        if not self.embeddings:
            return verdict(
                name,
                OK,
                f"{self.tensorcore_embeddings[0]}: its lookups run in the step on the TensorCores, from tables on every replica, "
                "as on the TPU: rehearsed, and in the XLA ops check",
            )
        what, why = self.embeddings[0]
        left_out = sorted(self.op_types & SPARSE_EMBEDDING_OPS)
        ops = f"; their sparse CPU ops ({_listed(left_out)}) were left out of the XLA check" if left_out else ""
        return verdict(name, NOT_CHECKED, f"{what}: {why}; that path was not rehearsed{ops}")

    @staticmethod
    def _checkpoints(model_dir: str | None) -> dict[str, str]:
        name = "checkpoints"
        if not model_dir:
            return verdict(name, NOT_CHECKED, "no --model-dir")
        if model_dir.startswith("gs://"):
            return verdict(name, OK, f"{model_dir} is shared by every host")
        return verdict(name, WARNING, f"{model_dir} is a local path: each host of the slice would write its own; use gs://")


def _batch_dims(element_spec: Any) -> list[int | None]:
    """The first dimension of each batched component (None: not static); scalars have none.

    Under TF1 behaviour (disable_v2_behavior, as TPUEstimator scripts run) a shape's
    dimensions are Dimension objects, not ints: dimension_value reads both.
    """
    dims: list[int | None] = []
    for spec in tf.nest.flatten(element_spec) if element_spec is not None else ():
        shape = getattr(spec, "shape", None)
        if shape is None or shape.rank is None:
            dims.append(None)
        elif shape.rank > 0:
            dims.append(tf.compat.dimension_value(shape[0]))
    return dims


def _batch_size(dataset: Any, dims: list[int | None]) -> int | None:
    """The batch as tf.distribute reads it to split it over the replicas (input_lib.py, `_make_rebatch_fn`, with
    `compute_batch_size` of tensorflow/python/data/experimental/ops/distribute.py): the components' first dimension
    where all are static and agree; where one is not static, TensorFlow's own op, which finds the size of the
    pipeline's batch transformation (-1 where it cannot: unknown). Eager only: a graph's op would need a session."""
    if all(d is not None for d in dims):
        return dims[0]
    if not tf.executing_eagerly():
        return None
    try:
        found = int(data_distribute.compute_batch_size(dataset))
    except Exception:  # noqa: BLE001 - TensorFlow could not read this pipeline: the batch stays unknown, as it says -1
        return None
    return found if found > 0 else None


def _endless(dataset: Any) -> bool:
    """tf.data's cardinality is INFINITE (a `.repeat()` with no count, before or after `.batch()`): the dataset never
    ends, so it has no last, partial batch. Eager only, as above."""
    if not tf.executing_eagerly():
        return False
    try:
        return bool(int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY)
    except Exception:  # noqa: BLE001 - not a tf.data.Dataset, or one TensorFlow cannot size: it may end
        return False


def _definition(function: Any) -> Any:
    for attribute in ("cached_definition", "definition"):
        definition = getattr(function, attribute, None)
        if definition is not None:
            return definition
    return None


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def verdict(check: str, found: str, detail: str) -> dict[str, str]:
    return {"check": check, "verdict": found, "detail": detail}

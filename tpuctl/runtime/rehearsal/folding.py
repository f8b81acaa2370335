"""Which ops of a traced step XLA folds to constants when it compiles the step, so that none of them computes on a TPU.

A step's float64 matters only where it reaches the device's computation: a TPU has
no 64-bit floating-point units. Shape arithmetic does not: the TensorFlow-to-XLA
bridge emits a shape's static dimensions as constants (the `Shape` kernel,
tensorflow/compiler/tf2xla/kernels/shape_op.cc), and XLA's constant folding
evaluates every instruction whose operands are all constants at compile time
(HloConstantFolding, xla/hlo/transforms/simplifiers/hlo_constant_folding.cc). So
`tf.cast(tf.shape(x)[1], tf.float64)` for a static dimension, or a NumPy float64
constant cast to float32, is a number in the compiled program, not float64 work.

An op is folded here when it is a constant, a shape, size or rank of a tensor whose
dimensions it reads are static, a slice of such a shape that selects only static
dimensions, or a stateless op whose inputs are all folded. What this cannot tell
stays unfolded, and is checked as computation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tensorflow.python.framework import op_def_registry, tensor_util

_SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size"})


def folded_ops(ops: Iterable[Any]) -> set[Any]:
    """The ops of a graph (in creation order: an op's inputs before it) that XLA folds to constants."""
    folded: set[Any] = set()
    for op in ops:
        if _folds(op, folded):
            folded.add(op)
    return folded


def folded_nodes(nodes: Iterable[Any]) -> set[str]:
    """The same for a function's NodeDefs (a cond or while body), by name. Their inputs' shapes are not at hand,
    so shapes read there count as computed."""
    folded: set[str] = set()
    for node in nodes:
        inputs = [name.split(":")[0] for name in node.input if not name.startswith("^")]
        if node.op == "Const" or (inputs and _stateless(node.op) and all(name in folded for name in inputs)):
            folded.add(node.name)
    return folded


def _folds(op: Any, folded: set[Any]) -> bool:
    if op.type == "Const":
        return True
    if op.type in _SHAPE_OPS:
        return all(t.shape.is_fully_defined() for t in op.inputs)
    if op.type == "Rank":
        return all(t.shape.rank is not None for t in op.inputs)
    if op.type == "StridedSlice" and op.inputs[0].op.type == "Shape":
        return _static_slice(op)
    return bool(op.inputs) and _stateless(op.type) and all(t.op in folded for t in op.inputs)


def _stateless(op_type: str) -> bool:
    """An op TensorFlow registers as stateless (a function call or an unknown op is not known to be)."""
    definition = op_def_registry.get(op_type)
    return definition is not None and not definition.is_stateful


def _static_slice(op: Any) -> bool:
    """`tf.shape(x)[i]` or `tf.shape(x)[a:b]`: only the dimensions it selects need be static."""
    dims = op.inputs[0].op.inputs[0].shape
    if dims.rank is None:
        return False
    begin, end, strides = (tensor_util.constant_value(t) for t in op.inputs[1:4])
    masks = {name: op.get_attr(name) for name in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    if begin is None or end is None or strides is None or len(begin) != 1 or masks["ellipsis_mask"] or masks["new_axis_mask"]:
        return False
    known = [d is not None for d in dims.as_list()]
    if masks["shrink_axis_mask"] & 1:
        index = int(begin[0])
        return -len(known) <= index < len(known) and known[index]
    start = None if masks["begin_mask"] & 1 else int(begin[0])
    stop = None if masks["end_mask"] & 1 else int(end[0])
    return all(known[start : stop : int(strides[0])])

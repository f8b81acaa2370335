"""Does a training script build its own tf.distribute strategy, or run in graph mode? Read, never run.

Before a worker runs its script, the runtime decides whether to build a
strategy for it (and enter its scope) or to leave that to the script: a
script that constructs its own strategy must get that construction, with its
arguments (a ParameterServerStrategy's variable_partitioner, a
MultiWorkerMirroredStrategy's CommunicationOptions), and a graph-mode script
(Estimator, TPUEstimator: `disable_eager_execution()` first) breaks when a
strategy was built eagerly before it switched modes (FIELD-NOTES, 2026-11-22).

The source is parsed with `ast`, never executed. Anything unusual (a binary
file, an unknown encoding, a syntax error, a file too large to parse) is
tolerated: the scan then answers from a plain search of the text, or answers
"nothing found", which keeps tpuctl's usual behaviour. Every worker pays for
this before its script starts, so a file that names none of the words is
answered without importing `ast` at all.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    import ast

# The constructors of tf.distribute strategies, by every name TensorFlow has exported them under
# (tf.distribute.X, tf.distribute.experimental.X, tf.compat.v1.distribute.X) and the internal ones.
STRATEGY_CLASSES = frozenset(
    {
        "MultiWorkerMirroredStrategy",
        "CollectiveAllReduceStrategy",
        "ParameterServerStrategy",
        "MirroredStrategy",
        "TPUStrategy",
        "OneDeviceStrategy",
        "CentralStorageStrategy",
    }
)
GRAPH_MODE_CALLS = frozenset({"disable_eager_execution", "disable_v2_behavior"})
ESTIMATOR_MODULES = ("tensorflow_estimator", "tensorflow.estimator", "tensorflow.compat.v1.estimator")
# Parsing past this is slow and memory-hungry; a larger "script" is searched as text instead.
MAX_PARSED_BYTES = 4 * 1024 * 1024
# Read at most this much of a file at all.
MAX_READ_BYTES = 16 * 1024 * 1024
_WORDS = re.compile(rb"Strategy|disable_eager_execution|disable_v2_behavior|estimator")
_STRATEGY_CALL = re.compile(
    rb"\b(" + b"|".join(n.encode() for n in sorted(STRATEGY_CLASSES)) + rb")(?:V1|V2)?\s*\("
)
_GRAPH_CALL = re.compile(rb"\b(disable_eager_execution|disable_v2_behavior)\s*\(")
_ESTIMATOR_TEXT = re.compile(rb"\b(tensorflow_estimator|estimator\.(?:Estimator|RunConfig|train_and_evaluate|tpu)|TPUEstimator)\b")


class Shape:
    """What the scan found: each with the line where it was first seen (0: found in the text, line unknown)."""

    __slots__ = ("estimator_line", "graph_line", "graph_mode", "strategy", "strategy_line")

    def __init__(self) -> None:
        self.strategy: str | None = None  # the public name of the first strategy class the script constructs
        self.strategy_line: int | None = None
        self.graph_mode: str | None = None  # disable_eager_execution / disable_v2_behavior
        self.graph_line: int | None = None
        self.estimator_line: int | None = None

    @property
    def builds_strategy(self) -> bool:
        return self.strategy is not None

    @property
    def estimator(self) -> bool:
        return self.estimator_line is not None

    @property
    def own(self) -> bool:
        """The script should get to build (or not build) its strategy itself."""
        return self.builds_strategy or self.graph_mode is not None or self.estimator

    def describe(self) -> str:
        """For a note: what was found, and where."""
        found = []
        if self.strategy is not None:
            found.append(f"constructs {self.strategy}(...){_at(self.strategy_line)}")
        if self.graph_mode is not None:
            found.append(f"calls {self.graph_mode}(){_at(self.graph_line)}")
        if self.estimator_line is not None:
            found.append(f"uses tf.estimator{_at(self.estimator_line)}")
        return ", ".join(found) or "builds no strategy"

    def __repr__(self) -> str:
        return f"Shape({self.describe()})"


def _at(line: int | None) -> str:
    return f" on line {line}" if line else ""


def public_name(name: str) -> str:
    """CollectiveAllReduceStrategy -> MultiWorkerMirroredStrategy; a V1/V2 suffix dropped."""
    for suffix in ("V1", "V2"):
        if name.endswith(suffix) and name[: -len(suffix)] in STRATEGY_CLASSES:
            name = name[: -len(suffix)]
    return "MultiWorkerMirroredStrategy" if name == "CollectiveAllReduceStrategy" else name


def _strategy_name(name: str) -> str | None:
    bare = public_name(name)
    return bare if bare in STRATEGY_CLASSES else None


def scan_file(path: str) -> Shape:
    """The shape of the script at `path`; an unreadable file is an empty shape (tpuctl's usual behaviour)."""
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_READ_BYTES)
    except OSError:
        return Shape()
    return scan(data)


def scan(data: bytes) -> Shape:
    if not _WORDS.search(data):
        return Shape()
    if b"\0" in data:  # a .pyc, a zip: its names are no calls; run it as tpuctl always did
        return Shape()
    if len(data) <= MAX_PARSED_BYTES:
        tree = _parse(data)
        if tree is not None:
            return _from_tree(tree)
    return _from_text(data)


def _parse(data: bytes) -> ast.Module | None:
    import ast

    try:
        return ast.parse(data)  # bytes: honours a PEP 263 coding line and a BOM
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return None


def _from_text(data: bytes) -> Shape:
    """A file Python cannot parse here: look for the calls in its text."""
    shape = Shape()
    if found := _STRATEGY_CALL.search(data):
        shape.strategy, shape.strategy_line = public_name(found.group(1).decode()), 0
    if found := _GRAPH_CALL.search(data):
        shape.graph_mode, shape.graph_line = found.group(1).decode(), 0
    if _ESTIMATOR_TEXT.search(data):
        shape.estimator_line = 0
    return shape


def _final_name(node: ast.expr) -> str | None:
    """`a.b.C` -> C, `C` -> C; anything else (a call's result, a subscript) -> None."""
    import ast

    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _dotted(node: ast.expr) -> str | None:
    """`tf.compat.v1.estimator` as text, for an attribute chain of names."""
    import ast

    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _from_tree(tree: ast.Module) -> Shape:
    import ast

    shape = Shape()
    aliases: dict[str, str] = {}  # a local name -> the strategy class or graph-mode call it stands for
    estimator_names: set[str] = set()  # local names bound to tf.estimator / tensorflow_estimator (or within)
    tf_names: set[str] = set()  # local names bound to tensorflow or one of its modules (tf, v1, compat)
    nodes = list(ast.walk(tree))

    # Names first: `from tensorflow.distribute import MultiWorkerMirroredStrategy as S`, `S = tf.distribute.X`.
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            root = module.split(".")[0]
            for alias in node.names:
                local = alias.asname or alias.name
                if _strategy_name(alias.name) or alias.name in GRAPH_MODE_CALLS:
                    aliases[local] = alias.name
                if root == "tensorflow_estimator" or (root == "tensorflow" and "estimator" in (*module.split("."), alias.name)):
                    estimator_names.add(local)
                    _first(shape, "estimator_line", node.lineno)
                elif root == "tensorflow":
                    tf_names.add(local)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                if alias.name.startswith(ESTIMATOR_MODULES):
                    estimator_names.add(local)
                    _first(shape, "estimator_line", node.lineno)
                elif alias.name.split(".")[0] == "tensorflow":
                    tf_names.add(local)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            named = _final_name(node.value)
            if named is not None and (_strategy_name(named) or named in GRAPH_MODE_CALLS):
                aliases[node.targets[0].id] = named

    for node in nodes:
        if isinstance(node, ast.Call):
            named = _final_name(node.func)
            if named is None:
                continue
            if isinstance(node.func, ast.Name):
                named = aliases.get(named, named)
            strategy = _strategy_name(named)
            if strategy is not None and (shape.strategy_line is None or node.lineno < shape.strategy_line):
                shape.strategy, shape.strategy_line = strategy, node.lineno
            elif named in GRAPH_MODE_CALLS and (shape.graph_line is None or node.lineno < shape.graph_line):
                shape.graph_mode, shape.graph_line = named, node.lineno
        elif isinstance(node, ast.Attribute) and node.attr == "estimator":
            # tf.estimator.Estimator, tf.compat.v1.estimator.tpu.TPUEstimator: under a name bound to tensorflow
            dotted = _dotted(node)
            if dotted is not None and dotted.split(".")[0] in tf_names:
                _first(shape, "estimator_line", node.lineno)
        elif isinstance(node, ast.Name) and node.id in estimator_names and isinstance(node.ctx, ast.Load):
            _first(shape, "estimator_line", node.lineno)
    return shape


def _first(shape: Shape, field: str, line: int) -> None:
    current = getattr(shape, field)
    if current is None or line < current:
        setattr(shape, field, line)


# A cluster the script makes inside its own process (TensorFlow's parameter-server tutorial:
# `create_in_process_cluster`, ports from portpicker, tf.distribute.Server on localhost): its
# strategy talks to those servers, never to the workers tpuctl started.
_IN_PROCESS = re.compile(rb"\bcreate_in_process_cluster\s*\(|\bpick_unused_port\s*\(|\bmulti_process_runner\b")
_SERVER_CALL = re.compile(rb"\bServer\s*\(")
_LOCALHOST = re.compile(rb"[\"']localhost:")


def in_process_cluster(path: str) -> int | None:
    """The line where the script builds a TensorFlow cluster of its own, in its own process; None if it does not."""
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_READ_BYTES)
    except OSError:
        return None
    if b"\0" in data:
        return None
    found = _IN_PROCESS.search(data)
    if found is None and _LOCALHOST.search(data):
        found = _SERVER_CALL.search(data)  # a server on an address the script chose itself
    return None if found is None else data.count(b"\n", 0, found.start()) + 1


# What only tf-keras (Keras 2) has, written as scripts from before Keras 3 write it (TensorFlow's own TPU guide
# and distributed-training tutorials among them): Keras 3 refuses the legacy optimizers with an ImportError and
# its metrics have reset_state() but no reset_states(). A stateful RNN's reset_states() is Keras 3 too: a script
# with `stateful=True` is not judged by that call. tensorflow_hub's KerasLayer subclasses tf_keras' Layer wherever
# tf.keras is Keras 3 (tensorflow_hub/keras_layer.py imports tf_keras then), and a Keras 3 model refuses it
# ("Only instances of `keras.Layer` can be added to a Sequential model"): TF's hub tutorials need tf-keras on 2.16+.
# Only KerasLayer counts: hub.load() returns a SavedModel that either Keras can call.
LEGACY_OPTIMIZERS = "uses tf.keras.optimizers.legacy, which Keras 3 refuses"
RESET_STATES = "calls reset_states(), which Keras 3 metrics do not have (reset_state() there)"
HUB_KERAS_LAYER = "uses tensorflow_hub's KerasLayer, a tf-keras layer that Keras 3 models refuse"
_LEGACY_TEXT = re.compile(rb"\bkeras\.optimizers\.legacy\b")
_RESET_TEXT = re.compile(rb"\.reset_states\s*\(\s*\)")
_HUB_TEXT = re.compile(rb"\btensorflow_hub\b")
_HUB_LAYER_TEXT = re.compile(rb"\bKerasLayer\b")
_STATEFUL_TEXT = re.compile(rb"\bstateful\s*=\s*True\b")


def keras2_only(path: str) -> tuple[str, int] | None:
    """(what the script uses that Keras 3 lacks, its first line) where it was written for tf-keras; None otherwise.

    Read from the syntax tree, so a docstring or comment that names these is no use of them.
    """
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_READ_BYTES)
    except OSError:
        return None
    hub = bool(_HUB_TEXT.search(data) and _HUB_LAYER_TEXT.search(data))
    if b"\0" in data or not (_LEGACY_TEXT.search(data) or _RESET_TEXT.search(data) or hub):
        return None
    tree = _parse(data) if len(data) <= MAX_PARSED_BYTES else None
    if tree is None:
        return _keras2_in_text(data)
    import ast

    found: dict[str, int] = {}
    stateful = False
    for node in ast.walk(tree):
        what = None
        if _names_legacy_optimizers(node):
            what = LEGACY_OPTIMIZERS
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "reset_states" and not node.args and not node.keywords:
                what = RESET_STATES
            stateful |= any(k.arg == "stateful" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)
        line = getattr(node, "lineno", None)
        if what is not None and line is not None:
            found[what] = min(found.get(what, line), line)
    if stateful:
        found.pop(RESET_STATES, None)
    if hub and (line := _hub_keras_layer(tree)) is not None:
        found[HUB_KERAS_LAYER] = line
    for what in (LEGACY_OPTIMIZERS, RESET_STATES, HUB_KERAS_LAYER):
        if what in found:
            return what, found[what]
    return None


def _names_legacy_optimizers(node: ast.AST) -> bool:
    """`tf.keras.optimizers.legacy` (any prefix), or `from ...keras.optimizers[.legacy] import ...legacy...`."""
    import ast

    if isinstance(node, ast.Attribute):
        return node.attr == "legacy" and (_dotted(node.value) or "").endswith("keras.optimizers")
    if isinstance(node, ast.ImportFrom):
        return any(_LEGACY_TEXT.search(f"{node.module or ''}.{alias.name}".encode()) for alias in node.names)
    return False


def _hub_keras_layer(tree: ast.Module) -> int | None:
    """The first line that names tensorflow_hub's KerasLayer: `hub.KerasLayer` for the module imported under any
    name, or KerasLayer imported from it (under any name)."""
    import ast

    modules, layers = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "tensorflow_hub"}
        elif isinstance(node, ast.ImportFrom) and node.module == "tensorflow_hub":
            layers |= {alias.asname or alias.name for alias in node.names if alias.name == "KerasLayer"}
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr == "KerasLayer" and isinstance(node.value, ast.Name) and node.value.id in modules)
        or (isinstance(node, ast.Name) and node.id in layers)
    ]
    return min(lines, default=None)


def _keras2_in_text(data: bytes) -> tuple[str, int] | None:
    """A file Python cannot parse here: the same, searched in its text."""
    checks = [(_LEGACY_TEXT, LEGACY_OPTIMIZERS)]
    if not _STATEFUL_TEXT.search(data):
        checks.append((_RESET_TEXT, RESET_STATES))
    if _HUB_TEXT.search(data):
        checks.append((_HUB_LAYER_TEXT, HUB_KERAS_LAYER))
    for pattern, what in checks:
        if found := pattern.search(data):
            return what, data.count(b"\n", 0, found.start()) + 1
    return None

"""What tpuctl generates and rejects, checked against TensorFlow's own reader of TF_CONFIG.

TensorFlow is imported once, in one child process (~3 s), which answers for
every case; the test process itself stays TF-free like the CLI.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from typing import Any

import pytest

from tpuctl.cluster.tf_config import ClusterSpec, Task, cluster_from_hosts, parse_tf_config
from tpuctl.inputs.errors import TpuctlError

pytestmark = [
    pytest.mark.tf,
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs the [tf] extra"),
]

_PROBE = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util

def accepted(text):
    os.environ["TF_CONFIG"] = text
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    task_type, task_id = resolver.task_type, resolver.task_id
    return {
        "cluster": spec.as_dict(),
        "task_type": task_type,
        "task_id": task_id,
        "is_chief": multi_worker_util.is_chief(spec, task_type, task_id),
        "num_workers": multi_worker_util.worker_count(spec, "worker"),
    }

def verdict(text):
    # The path a worker takes: the resolver reads TF_CONFIG, strategies validate it.
    os.environ["TF_CONFIG"] = text
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        multi_worker_util._validate_cluster_spec(resolver.cluster_spec(), resolver.task_type, resolver.task_id)
    except (ValueError, TypeError) as err:
        return f"{type(err).__name__}: {err}"
    return None

cases = json.load(sys.stdin)
json.dump({
    "accepted": [accepted(text) for text in cases["accepted"]],
    "verdicts": [verdict(text) for text in cases["rejected"]],
}, sys.stdout)
"""

SHAPES = list(itertools.product(range(1, 4), (False, True), range(3), (False, True)))


def _generated() -> list[tuple[ClusterSpec, Task]]:
    found: list[tuple[ClusterSpec, Task]] = []
    for workers, chief, ps, evaluator in SHAPES:
        spec = cluster_from_hosts(workers, chief=chief, ps=ps, evaluator=evaluator)
        found.extend((spec, task) for task in spec.tasks())
    return found


def _config(cluster: object, task: object = None) -> str:
    return json.dumps({"cluster": cluster} if task is None else {"cluster": cluster, "task": task})


W2 = {"worker": ["a:1", "b:1"]}
W0 = {"type": "worker", "index": 0}

# (case, TF_CONFIG, field tpuctl names). TF rejects these too.
TF_REJECTS = [
    ("bad JSON", '{"cluster": {', "TF_CONFIG"),
    ("cluster not an object", _config(["a:1"], W0), "cluster"),
    ("cluster null", _config(None, W0), "cluster"),
    ("job not a list", _config({"worker": "a:1"}, W0), "cluster.worker"),
    ("unknown job in cluster", _config({**W2, "master": ["m:1"]}, W0), "cluster"),
    ("address not a string", _config({"worker": [1]}, W0), "cluster.worker[0]"),
    ("two chiefs", _config({**W2, "chief": ["c:1", "d:1"]}, W0), "cluster.chief"),
    ("two evaluators in cluster", _config({**W2, "evaluator": ["e:1", "f:1"]}, W0), "cluster.evaluator"),
    ("empty job list", _config({"worker": []}, W0), "cluster.worker"),
    ("empty cluster", _config({}, W0), "cluster"),
    ("unknown task type", _config(W2, {"type": "master", "index": 0}), "task.type"),
    ("task type not a string", _config(W2, {"type": 1, "index": 0}), "task.type"),
    ("task type not in cluster", _config(W2, {"type": "chief", "index": 0}), "task.type"),
    ("index out of range", _config(W2, {"type": "worker", "index": 2}), "task.index"),
    ("index missing", _config(W2, {"type": "worker"}), "task.index"),
    ("index not a number", _config(W2, {"type": "worker", "index": "one"}), "task.index"),
]

# TF's validation lets these through; each fails later (a hang on a port, the
# wrong chief, MWMS refusing to start) or silently means something else.
STRICTER_THAN_TF = [
    ("duplicate address", _config({"worker": ["a:1", "a:1"]}, W0), "cluster.worker[1]"),
    ("address without port", _config({"worker": ["a"]}, W0), "cluster.worker[0]"),
    ("port out of range", _config({"worker": ["a:70000"]}, W0), "cluster.worker[0]"),
    ("IPv6 without brackets", _config({"worker": ["::1:2222"]}, W0), "cluster.worker[0]"),
    ("evaluator in cluster", _config({**W2, "evaluator": ["e:1"]}, W0), "cluster.evaluator"),
    ("ps only", _config({"ps": ["p:1"]}, {"type": "ps", "index": 0}), "cluster"),
    ("TF_CONFIG not an object", "[1]", "TF_CONFIG"),
    ("missing task", _config(W2), "task"),
    ("task not an object", _config(W2, "worker"), "task"),
    ("negative index", _config(W2, {"type": "worker", "index": -1}), "task.index"),
    ("boolean index", _config(W2, {"type": "worker", "index": True}), "task.index"),
    ("string index", _config(W2, {"type": "worker", "index": "1"}), "task.index"),
    ("float index", _config(W2, {"type": "worker", "index": 1.5}), "task.index"),
    ("evaluator index 1", _config(W2, {"type": "evaluator", "index": 1}), "task.index"),
    (
        "duplicate JSON key",
        '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "task": {}}',
        "TF_CONFIG",
    ),
]


@pytest.fixture(scope="module")
def tensorflow_says() -> dict[str, list[Any]]:
    cases = {
        "accepted": [spec.tf_config_json(task) for spec, task in _generated()],
        "rejected": [text for _, text, _ in TF_REJECTS + STRICTER_THAN_TF],
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], input=json.dumps(cases), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, list[Any]] = json.loads(done.stdout)
    return answer


def test_every_generated_task_reads_the_same_in_tensorflow(tensorflow_says: dict[str, list[Any]]) -> None:
    generated = _generated()
    assert len(generated) == len(tensorflow_says["accepted"]) == 144
    for (spec, task), seen in zip(generated, tensorflow_says["accepted"], strict=True):
        where = spec.tf_config_json(task)
        assert (seen["task_type"], seen["task_id"]) == (task.type, task.index), where
        assert seen["cluster"] == spec.tf_config(task)["cluster"], where
        assert seen["num_workers"] == spec.num_workers, where
        # TF calls the evaluator "a chief on its own"; tpuctl's chief is the training cluster's.
        assert seen["is_chief"] == (spec.is_chief(task) or task.type == "evaluator"), where


@pytest.mark.parametrize(("index", "case"), list(enumerate(TF_REJECTS)), ids=[c[0] for c in TF_REJECTS])
def test_check_rejects_what_tensorflow_rejects(
    tensorflow_says: dict[str, list[Any]], index: int, case: tuple[str, str, str]
) -> None:
    _, text, field = case
    assert tensorflow_says["verdicts"][index] is not None
    _assert_rejected(text, field)


@pytest.mark.parametrize(("index", "case"), list(enumerate(STRICTER_THAN_TF)), ids=[c[0] for c in STRICTER_THAN_TF])
def test_check_is_stricter_than_tensorflow_on_purpose(
    tensorflow_says: dict[str, list[Any]], index: int, case: tuple[str, str, str]
) -> None:
    _, text, field = case
    assert tensorflow_says["verdicts"][len(TF_REJECTS) + index] is None
    _assert_rejected(text, field)


def _assert_rejected(text: str, field: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_tf_config(text)
    assert caught.value.message.startswith(f"{field}: ")

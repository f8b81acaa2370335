"""Vertex AI's CLUSTER_SPEC read into tpuctl's cluster and task, TF_CONFIG as Vertex writes it, and which TPU a worker reaches.

Examples follow the shapes Vertex AI documents (docs.cloud.google.com/vertex-ai/docs/training/
distributed-training, "CLUSTER_SPEC" and "TF_CONFIG"); hypothesis then throws hostile
text at the parser, which must answer with a cluster or one line, never a traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import ClusterSpec, Task, parse_tf_config
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import tpu_connect, vertex_env, vertex_jax, worker_env
from tpuctl.runtime.vertex_env import MAX_SPEC_CHARS, from_environ, parse_cluster_spec

EXAMPLES = int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

POOL0 = "cmle-training-workerpool0-1a2b3c4d5e-0:2222"
POOL1 = [f"cmle-training-workerpool1-1a2b3c4d5e-{i}:2222" for i in range(2)]
POOL2 = ["cmle-training-workerpool2-1a2b3c4d5e-0:2222"]
POOL3 = ["cmle-training-workerpool3-1a2b3c4d5e-0:2222"]
JOB = {  # what Vertex puts under "job": the CustomJobSpec, any JSON to tpuctl
    "workerPoolSpecs": [
        {
            "machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": "1",
            "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/train:1", "command": ["python", "-m", "tpuctl.runtime"]},
        }
    ],
    "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/run"},
}


def vertex_spec(pools: dict[str, list[str]], pool: str, index: int, **extra: Any) -> str:
    return json.dumps({"cluster": pools, "environment": "cloud", "task": {"type": pool, "index": index, "trial": ""}, "job": JOB, **extra})


FULL = {"workerpool0": [POOL0], "workerpool1": POOL1, "workerpool2": POOL2, "workerpool3": POOL3}


# --- the documented shapes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "index", "task"),
    [
        ("workerpool0", 0, Task("chief", 0)),
        ("workerpool1", 0, Task("worker", 0)),
        ("workerpool1", 1, Task("worker", 1)),
        ("workerpool2", 0, Task("ps", 0)),
        ("workerpool3", 0, Task("evaluator", 0)),
    ],
)
def test_every_pool_maps_to_its_tensorflow_role(pool: str, index: int, task: Task) -> None:
    cluster, found = parse_cluster_spec(vertex_spec(FULL, pool, index))
    assert found == task
    assert cluster == ClusterSpec(jobs={"chief": (POOL0,), "worker": tuple(POOL1), "ps": tuple(POOL2)}, evaluator=True)
    assert cluster.is_chief(found) == (task.type == "chief")
    assert cluster.num_workers == 3


def test_the_tf_config_written_from_it_is_what_tensorflow_expects() -> None:
    """The evaluator stays out of `cluster` (TensorFlow's rule), and tpuctl's own TF_CONFIG parser agrees."""
    cluster, task = parse_cluster_spec(vertex_spec(FULL, "workerpool1", 1))
    assert cluster is not None
    config = json.loads(cluster.tf_config_json(task))
    assert config == {"cluster": {"chief": [POOL0], "worker": POOL1, "ps": POOL2}, "task": {"type": "worker", "index": 1}}
    assert parse_tf_config(cluster.tf_config_json(task)) == (ClusterSpec(jobs=cluster.jobs), task)


def test_one_replica_is_a_single_worker() -> None:
    assert parse_cluster_spec(vertex_spec({"workerpool0": [POOL0]}, "workerpool0", 0)) == (None, Task("worker", 0))
    # Pools the job spec skipped may be listed empty.
    empty = {"workerpool0": [POOL0], "workerpool1": [], "workerpool2": [], "workerpool3": []}
    assert parse_cluster_spec(vertex_spec(empty, "workerpool0", 0)) == (None, Task("worker", 0))


def test_primary_plus_workers_is_a_multi_worker_cluster() -> None:
    cluster, task = parse_cluster_spec(vertex_spec({"workerpool0": [POOL0], "workerpool1": POOL1[:1]}, "workerpool0", 0))
    assert cluster == ClusterSpec(jobs={"chief": (POOL0,), "worker": (POOL1[0],)})
    assert task == Task("chief", 0)


def test_keys_tpuctl_does_not_read_are_left_alone() -> None:
    text = json.dumps(
        {
            "cluster": {"workerpool0": [POOL0], "workerpool1": POOL1},
            "task": {"type": "workerpool1", "index": 0, "trial": "3", "cloud": "internal-id"},
            "environment": "cloud",
            "job": {"deeply": [{"nested": [1, 2.5, None, True, {"x": "y"}]}]},
            "something_new": 1,
        }
    )
    assert parse_cluster_spec(text)[1] == Task("worker", 0)


def test_tf_config_as_vertex_writes_it_parses() -> None:
    """environment, job, the task's trial and cloud keys: accepted by tpuctl.cluster.tf_config.parse_tf_config unchanged."""
    text = json.dumps(
        {
            "cluster": {"chief": [POOL0], "worker": POOL1, "ps": POOL2},
            "environment": "cloud",
            "task": {"type": "worker", "index": 1, "trial": "", "cloud": "internal-id"},
            "job": JOB,
        }
    )
    cluster, task = parse_tf_config(text)
    assert task == Task("worker", 1)
    assert cluster.jobs == {"chief": (POOL0,), "worker": tuple(POOL1), "ps": tuple(POOL2)}


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("", "invalid JSON"),
        ("[]", "expected a JSON object, got array"),
        ('{"task": {"type": "workerpool0", "index": 0}}', "cluster: missing"),
        ('{"cluster": [], "task": {}}', "cluster: expected an object"),
        ('{"cluster": {"chief": ["a:1"]}, "task": {"type": "chief", "index": 0}}', "unknown worker pool 'chief'"),
        ('{"cluster": {"workerpool1": ["a:1"]}, "task": {"type": "workerpool1", "index": 0}}', "cluster.workerpool0: missing"),
        ('{"cluster": {"workerpool0": ["a:1", "b:1"]}, "task": {"type": "workerpool0", "index": 0}}', "2 replicas"),
        ('{"cluster": {"workerpool0": ["a:1"], "workerpool3": ["b:1", "c:1"]}, "task": {"type": "workerpool0", "index": 0}}', "2 evaluators"),
        ('{"cluster": {"workerpool0": "a:1"}, "task": {"type": "workerpool0", "index": 0}}', "expected a list of addresses, got string"),
        ('{"cluster": {"workerpool0": [7]}, "task": {"type": "workerpool0", "index": 0}}', "workerpool0[0]: expected an address string"),
        ('{"cluster": {"workerpool0": ["a"]}, "task": {"type": "workerpool0", "index": 0}}', "missing :port"),
        ('{"cluster": {"workerpool0": ["a:1"], "workerpool1": ["a:1"]}, "task": {"type": "workerpool0", "index": 0}}', "duplicate address"),
        ('{"cluster": {"workerpool0": ["a:1"]}}', "task: missing"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"index": 0}}', "task.type: missing"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool1", "index": 0}}', "workerpool1 is not in cluster"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0"}}', "task.index: missing"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0", "index": true}}', "expected an integer, got boolean"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0", "index": "0"}}', "expected an integer, got string"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0", "index": 1}}', "1 out of range"),
        ('{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0", "index": -1}}', "-1 out of range"),
        ('{"cluster": {}, "task": {}, "task": {}}', "duplicate key 'task'"),
    ],
)
def test_each_mistake_is_one_line_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_cluster_spec(text)
    message = str(caught.value)
    assert message.startswith("CLUSTER_SPEC")
    assert field in message
    assert "\n" not in message


def test_size_and_depth_are_bounded() -> None:
    with pytest.raises(TpuctlError, match="more than the"):
        parse_cluster_spec(" " * (MAX_SPEC_CHARS + 1))
    with pytest.raises(TpuctlError, match=r"nested too deeply|invalid JSON"):
        parse_cluster_spec("[" * 200_000 + "]" * 200_000)
    too_many = {"workerpool0": [POOL0], "workerpool1": [f"h{i}:2222" for i in range(5000)]}
    with pytest.raises(TpuctlError, match="more than the 4096 replicas"):
        parse_cluster_spec(vertex_spec(too_many, "workerpool0", 0))


def test_hostile_values_are_quoted_and_cut_in_the_message() -> None:
    hostile = "\x1b[2J\n" + "x" * 10_000
    with pytest.raises(TpuctlError) as caught:
        parse_cluster_spec(json.dumps({"cluster": {"workerpool0": ["a:1"]}, "task": {"type": hostile, "index": 0}}))
    message = str(caught.value)
    assert "\x1b" not in message and "\n" not in message
    assert len(message) < 400


# --- hypothesis -------------------------------------------------------------------------

NASTY = ["", " ", "\x00", "\n", "\ud800", "\x1b[2J", "9" * 400, "nan", "-1", "[::1]:80", "h:65536", "a:1", ":", "[", "ﬁ"]
hostile_text = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=10)), max_size=6).map("".join)
pool_names = st.one_of(st.sampled_from([*vertex_env.POOL_ROLES, "workerpool4", "chief", "worker"]), hostile_text)
addresses = st.lists(st.one_of(st.sampled_from(["a:1", "b:2", "10.0.0.1:2222", "[::1]:80", "c:2"]), hostile_text), max_size=4)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.one_of(hostile_text, pool_names), inner, max_size=4)),
    max_leaves=20,
)
tasks = st.fixed_dictionaries(
    {"type": pool_names, "index": st.one_of(st.integers(-3, 5), st.integers(), st.floats(), st.booleans(), hostile_text)},
    optional={"trial": json_values},
)
shaped = st.fixed_dictionaries(
    {"cluster": st.dictionaries(pool_names, st.one_of(addresses, json_values), max_size=5), "task": st.one_of(tasks, json_values)},
    optional={"environment": json_values, "job": json_values},
).map(json.dumps)
deep = st.tuples(st.sampled_from(["[", '{"a": ', '{"cluster": ', "[{"]), st.integers(0, 50_000)).map(lambda t: t[0] * t[1])
specs = st.one_of(shaped, json_values.map(json.dumps), hostile_text, deep)


def answer(text: str) -> tuple[ClusterSpec | None, Task] | None:
    try:
        result = parse_cluster_spec(text)
    except TpuctlError as err:
        assert err.exit_code == 2
        assert "\n" not in str(err) and len(str(err)) < 1000
        return None
    return result


@FUZZ
@given(specs)
def test_any_text_gives_a_cluster_or_one_line(text: str) -> None:
    result = answer(text)
    if result is None:
        return
    cluster, task = result
    if cluster is None:
        assert task == Task("worker", 0)
        return
    assert task in cluster.tasks()
    assert len(cluster.jobs.get("chief", ())) == 1
    # What the runtime writes to TF_CONFIG parses back to the same cluster and task.
    again, same = parse_tf_config(cluster.tf_config_json(task))
    assert same == task and again.jobs == cluster.jobs


@FUZZ
@given(st.dictionaries(st.sampled_from(list(vertex_env.POOL_ROLES)), st.integers(0, 3)), st.data())
def test_well_formed_jobs_always_parse(counts: dict[str, int], data: st.DataObject) -> None:
    """Any pool sizes Vertex accepts (one primary, at most one evaluator) parse, whichever replica reads them."""
    counts["workerpool0"] = 1
    counts["workerpool3"] = min(counts.get("workerpool3", 0), 1)
    pools = {name: [f"{name}-{i}.example:2222" for i in range(count)] for name, count in counts.items()}
    live = [name for name, count in counts.items() if count]
    pool = data.draw(st.sampled_from(live))
    index = data.draw(st.integers(0, counts[pool] - 1))
    cluster, task = parse_cluster_spec(vertex_spec(pools, pool, index))
    if live == ["workerpool0"]:
        assert (cluster, task) == (None, Task("worker", 0))
    else:
        assert cluster is not None
        assert task == Task(vertex_env.POOL_ROLES[pool], index)
        assert cluster.evaluator == bool(counts.get("workerpool3"))


# --- the worker's view: TF_CONFIG first, then CLUSTER_SPEC, then one worker --------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ("TF_CONFIG", "CLUSTER_SPEC", "TPU_NAME", tpu_connect.GKE_TPU_ENDPOINTS):
        monkeypatch.delenv(name, raising=False)
    worker_env.current.cache_clear()
    yield monkeypatch
    worker_env.current.cache_clear()


def test_cluster_spec_alone_is_read_and_written_to_tf_config(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLUSTER_SPEC", vertex_spec({"workerpool0": [POOL0], "workerpool1": POOL1}, "workerpool1", 1))
    env = worker_env.current()
    assert env.task == Task("worker", 1)
    assert env.num_workers == 3 and not env.is_chief
    assert env.strategy_kind(tpu_here=False) == "multi-worker-mirrored"
    # MultiWorkerMirroredStrategy reads TF_CONFIG: it now names the same cluster.
    assert parse_tf_config(os.environ["TF_CONFIG"]) == (env.cluster, env.task)


def test_tf_config_wins_over_cluster_spec(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLUSTER_SPEC", vertex_spec({"workerpool0": [POOL0], "workerpool1": POOL1}, "workerpool1", 1))
    tf_config = {"cluster": {"chief": [POOL0], "worker": POOL1}, "task": {"type": "chief", "index": 0}, "environment": "cloud", "job": JOB}
    clean_env.setenv("TF_CONFIG", json.dumps(tf_config))
    env = worker_env.current()
    assert env.task == Task("chief", 0) and env.is_chief
    assert json.loads(os.environ["TF_CONFIG"]) == tf_config  # left exactly as Vertex wrote it


def test_a_single_replica_job_writes_no_tf_config(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLUSTER_SPEC", vertex_spec({"workerpool0": [POOL0]}, "workerpool0", 0))
    env = worker_env.current()
    assert env.cluster is None and env.is_chief and env.num_workers == 1
    assert "TF_CONFIG" not in os.environ


def test_neither_is_a_single_worker(clean_env: pytest.MonkeyPatch) -> None:
    assert worker_env.cluster_from_env() == (None, Task("worker", 0))
    assert from_environ({}) is None and from_environ({"CLUSTER_SPEC": "  "}) is None


def test_a_broken_cluster_spec_fails_the_worker_in_one_line(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLUSTER_SPEC", '{"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool9", "index": 0}}')
    with pytest.raises(TpuctlError, match=r"CLUSTER_SPEC task\.type: unknown worker pool .workerpool9."):
        worker_env.current()


# --- a JAX run: CLUSTER_SPEC into the variables Keras and JAX read ---------------------------


@pytest.mark.parametrize(("pool", "index", "process"), [("workerpool0", 0, 0), ("workerpool1", 0, 1), ("workerpool1", 1, 2)])
def test_a_jax_replica_s_cluster_is_its_place_in_cluster_spec(pool: str, index: int, process: int) -> None:
    """Process 0 is workerpool0's one replica, then workerpool1's in order, at the addresses Vertex lists."""
    environ = vertex_env.jax_environ(vertex_spec({"workerpool0": [POOL0], "workerpool1": POOL1}, pool, index))
    assert environ[jax_cluster.JOB_ADDRESSES] == ",".join([POOL0, *POOL1])
    assert environ[jax_cluster.COORDINATOR_ADDRESS] == POOL0
    assert jax_cluster.COORDINATOR_BIND_ADDRESS not in environ  # the others reach it across machines
    # What keras.distribution.initialize() and tpuctl's ClusterEnv for jax.distributed.initialize() read back.
    assert jax_cluster.cluster_of(environ) == (POOL0, 3, process)
    assert (environ[contract.WORKER_INDEX], environ[contract.NUM_WORKERS]) == (str(process), "3")


def test_a_one_replica_jax_job_is_told_no_cluster() -> None:
    assert vertex_env.jax_environ(vertex_spec({"workerpool0": [POOL0]}, "workerpool0", 0)) == {}


@pytest.mark.parametrize(("pools", "named"), [({"workerpool2": POOL2}, "ps"), ({"workerpool3": POOL3}, "evaluator")])
def test_tensorflow_only_pools_are_refused_for_a_jax_run_in_one_line(pools: dict[str, list[str]], named: str) -> None:
    spec = vertex_spec({"workerpool0": [POOL0], "workerpool1": POOL1, **pools}, "workerpool1", 0)
    with pytest.raises(TpuctlError, match=f"CLUSTER_SPEC cluster: a JAX run's replicas all run the script: it has no {named} pool"):
        vertex_env.jax_environ(spec)


def test_the_jax_worker_adopts_cluster_spec_only_on_vertex() -> None:
    elsewhere = {"PATH": "/bin"}
    vertex_jax.adopt(elsewhere)
    assert elsewhere == {"PATH": "/bin"}
    on_vertex = {"CLUSTER_SPEC": vertex_spec({"workerpool0": [POOL0], "workerpool1": POOL1}, "workerpool1", 0)}
    vertex_jax.adopt(on_vertex)
    assert jax_cluster.cluster_of(on_vertex) == (POOL0, 3, 1)


# --- which TPU ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "target"),
    [
        ({}, "local"),  # a TPU VM, e.g. Vertex AI ct5lp-hightpu-* or cloud-tpu on a TPU VM
        ({"TPU_NAME": "  "}, "local"),
        ({"TPU_NAME": "my-tpu"}, "my-tpu"),
        ({"TPU_NAME": "grpc://10.0.0.2:8470", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": "grpc://10.9.9.9:8470"}, "grpc://10.0.0.2:8470"),
        ({"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": "grpc://10.0.0.2:8470"}, "grpc://10.0.0.2:8470"),
        ({"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": " 10.0.0.2:8470 "}, "grpc://10.0.0.2:8470"),
        (
            {"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": "grpc://10.0.0.2:8470, grpc://10.0.0.3:8470,"},
            "grpc://10.0.0.2:8470,grpc://10.0.0.3:8470",
        ),
    ],
)
def test_target_from_env(environ: dict[str, str], target: str) -> None:
    assert tpu_connect.target_from_env(environ) == target


def test_target_from_the_process_environment(clean_env: pytest.MonkeyPatch) -> None:
    assert tpu_connect.target_from_env() == "local"
    clean_env.setenv(tpu_connect.GKE_TPU_ENDPOINTS, "grpc://10.0.0.2:8470")
    assert tpu_connect.target_from_env() == "grpc://10.0.0.2:8470"


def test_endpoints_without_one_endpoint_fail_in_one_line() -> None:
    with pytest.raises(TpuctlError, match="names no TPU endpoint"):
        tpu_connect.target_from_env({"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": " , ,"})


@pytest.mark.parametrize(
    ("target", "address"),
    [
        ("grpc://10.0.0.2:8470", ("10.0.0.2", 8470)),
        ("grpc://10.0.0.2", ("10.0.0.2", 8470)),
        ("grpc://10.0.0.2:8470,grpc://10.0.0.3:8470", ("10.0.0.2", 8470)),  # the first host is TF's master
        ("local", None),
        ("my-tpu", None),
    ],
)
def test_the_address_checked_before_tensorflow_connects(target: str, address: tuple[str, int] | None) -> None:
    assert tpu_connect.grpc_address(target) == address


@pytest.mark.parametrize("target", ["grpc://[::1", "grpc://:8470", "grpc://h:99999", "grpc://h:x"])
def test_malformed_endpoints_are_one_line(target: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        tpu_connect.grpc_address(target)
    assert "\n" not in str(caught.value)


def test_an_unreachable_vertex_tpu_endpoint_fails_within_the_deadline() -> None:
    """No TPU listens here: the TCP check gives up by the deadline, before TensorFlow is ever asked."""
    import socket
    import time

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    target = tpu_connect.target_from_env({"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": f"127.0.0.1:{port}"})
    started = time.monotonic()
    with pytest.raises(TpuctlError, match="not reachable") as caught:
        tpu_connect.connect(target, timeout_s=1.5)
    assert time.monotonic() - started < 5
    assert caught.value.exit_code == 1

"""ClusterSpec generation and TF_CONFIG validation: every rejection names its field."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpuctl.cluster.hosts import HostEntry, parse_hostfile
from tpuctl.cluster.tf_config import (
    ClusterSpec,
    Task,
    cluster_from_hosts,
    describe_counts,
    make_cluster,
    parse_task,
    parse_tf_config,
)
from tpuctl.inputs.errors import TpuctlError

# -- generation ---------------------------------------------------------------



def _local(base_port: int) -> Iterator[str]:
    return (f"localhost:{port}" for port in itertools.count(base_port))

def test_make_cluster_assigns_chief_then_workers_then_ps() -> None:
    spec = make_cluster(2, _local(2222), chief=True, ps=1, evaluator=True)
    assert spec.jobs == {
        "chief": ("localhost:2222",),
        "worker": ("localhost:2223", "localhost:2224"),
        "ps": ("localhost:2225",),
    }
    assert [t.name for t in spec.tasks()] == ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]
    assert spec.num_workers == 3
    assert spec.describe() == "chief:0, worker:0-1, ps:0"


def test_evaluator_is_beside_the_cluster() -> None:
    spec = make_cluster(1, _local(2222), evaluator=True)
    evaluator = Task("evaluator", 0)
    assert spec.address(evaluator) is None
    assert spec.tf_config(evaluator) == {
        "cluster": {"worker": ["localhost:2222"]},
        "task": {"type": "evaluator", "index": 0},
    }
    assert not spec.is_chief(evaluator)


@pytest.mark.parametrize(("chief", "expected"), [(False, Task("worker", 0)), (True, Task("chief", 0))])
def test_chief_is_the_chief_task_or_worker_0(chief: bool, expected: Task) -> None:
    spec = make_cluster(2, _local(1), chief=chief)
    assert [t for t in spec.tasks() if spec.is_chief(t)] == [expected]


def test_cluster_from_hosts_defaults_to_localhost_ports() -> None:
    spec = cluster_from_hosts(2, chief=True, ps=2, base_port=5000)
    assert spec == make_cluster(2, _local(5000), chief=True, ps=2)


def test_cluster_from_hosts_uses_ports_and_slots() -> None:
    hosts = parse_hostfile("a slots=2\nb:9000\n[::1]\n")
    spec = cluster_from_hosts(3, hosts, chief=True, base_port=7000)
    assert spec.jobs == {"chief": ("a:7000",), "worker": ("a:7001", "b:9000", "[::1]:7000")}


def test_cluster_from_hosts_needs_a_chief_or_worker() -> None:
    with pytest.raises(TpuctlError, match=r"needs a chief or a worker"):
        cluster_from_hosts(0)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (
            [HostEntry("a"), HostEntry("b")],
            "--hosts gives 2 address(es) but the cluster has 3 task(s): chief:0, worker:0, ps:0",
        ),
        (
            [HostEntry("a", None, 4)],
            "--hosts gives 4 address(es) but the cluster has 3 task(s): chief:0, worker:0, ps:0",
        ),
        (
            [HostEntry("a", 1), HostEntry("b"), HostEntry("a")],
            "cluster.ps[0]: duplicate address a:1 (also cluster.chief[0])",
        ),
        (
            [HostEntry("a", 1), HostEntry("a", None, 2)],
            "cluster.worker[0]: duplicate address a:1 (also cluster.chief[0])",
        ),
        ([HostEntry("a", 65535, 3)], "a: 3 task(s) from port 65535 need ports up to 65537, past 65535"),
    ],
)
def test_cluster_from_hosts_rejects(hosts: list[HostEntry], message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        cluster_from_hosts(1, hosts, chief=True, ps=1, base_port=1, source="--hosts")
    assert caught.value.message == message


def test_describe_counts() -> None:
    assert describe_counts({"ps": 3, "chief": 1, "worker": 0}) == "chief:0, ps:0-2"


@pytest.mark.parametrize(("text", "task"), [("worker:1", Task("worker", 1)), ("evaluator:0", Task("evaluator", 0))])
def test_parse_task(text: str, task: Task) -> None:
    assert parse_task(text) == task


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("bogus", "'bogus': expected TYPE:INDEX"),
        ("worker:", "'worker:': expected TYPE:INDEX"),
        ("worker:-1", "'worker:-1': expected TYPE:INDEX"),
        ("worker:one", "'worker:one': expected TYPE:INDEX"),
        ("master:0", "'master:0': unknown task type 'master' (expected one of chief, worker, ps, evaluator)"),
    ],
)
def test_parse_task_rejects(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(problem)):
        parse_task(text)


# -- parse_tf_config ----------------------------------------------------------


def _config(cluster: object, task: object = None, **extra: object) -> str:
    config: dict[str, object] = {"cluster": cluster, **extra}
    if task is not None:
        config["task"] = task
    return json.dumps(config)


def _task(role: object, index: object) -> dict[str, object]:
    return {"type": role, "index": index}


WORKERS = {"worker": ["localhost:2222", "localhost:2223"]}


def test_parse_tf_config_reads_the_tf_docs_example() -> None:
    spec, task = parse_tf_config(
        '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 1}}'
    )
    assert spec == ClusterSpec({"worker": ("host1:2222", "host2:2222")})
    assert task == Task("worker", 1)
    assert not spec.is_chief(task)


def test_parse_tf_config_leaves_other_keys_to_tf() -> None:
    text = _config(WORKERS, _task("worker", 0), rpc_layer="grpc", environment="cloud")
    assert parse_tf_config(text)[1] == Task("worker", 0)


def test_parse_tf_config_marks_the_evaluator() -> None:
    spec, task = parse_tf_config(_config(WORKERS, _task("evaluator", 0)))
    assert spec.evaluator and task == Task("evaluator", 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # JSON itself
        ('{"cluster": {"worker": [}', "TF_CONFIG: invalid JSON at line 1, column 25: Expecting value"),
        ('{\n  "cluster": {}\n  "task": {}\n}', "TF_CONFIG: invalid JSON at line 3, column 3: Expecting ',' delimiter"),
        ("", "TF_CONFIG: invalid JSON at line 1, column 1: Expecting value"),
        ("[" * 100_000, "TF_CONFIG: invalid JSON: nested too deeply"),
        ('{"task": 1, "task": 2}', "TF_CONFIG: duplicate key 'task'"),
        ('{"cluster": {"worker": ["a:1"], "worker": ["b:1"]}}', "TF_CONFIG: duplicate key 'worker'"),
        ("[1]", "TF_CONFIG: expected a JSON object, got array"),
        ("null", "TF_CONFIG: expected a JSON object, got null"),
        # cluster
        (json.dumps({"task": _task("worker", 0)}), "cluster: missing"),
        (
            _config("worker", _task("worker", 0)),
            "cluster: expected an object mapping task types to address lists, got string",
        ),
        (_config({}, _task("worker", 0)), "cluster: empty"),
        (
            _config({"master": ["a:1"]}, _task("worker", 0)),
            "cluster: unknown task type 'master' (expected one of chief, worker, ps)",
        ),
        (
            _config({"worker\n": ["a:1"]}, _task("worker", 0)),
            "cluster: unknown task type 'worker\\n' (expected one of chief, worker, ps)",
        ),
        (
            _config({**WORKERS, "evaluator": ["e:1"]}, _task("worker", 0)),
            "cluster.evaluator: the evaluator must not be listed in cluster",
        ),
        (_config({"worker": "a:1"}, _task("worker", 0)), "cluster.worker: expected a list of addresses, got string"),
        (
            _config({"worker": {"0": "a:1"}}, _task("worker", 0)),
            "cluster.worker: expected a list of addresses, got object",
        ),
        (_config({**WORKERS, "ps": []}, _task("worker", 0)), "cluster.ps: empty list"),
        (_config({"chief": ["a:1", "b:1"]}, _task("chief", 0)), "cluster.chief: more than one chief (2 addresses)"),
        (
            _config({"worker": ["a:1", 2]}, _task("worker", 0)),
            "cluster.worker[1]: expected an address string, got number",
        ),
        (_config({"worker": [None]}, _task("worker", 0)), "cluster.worker[0]: expected an address string, got null"),
        (_config({"ps": ["a:1"]}, _task("ps", 0)), "cluster: no chief or worker task"),
        # addresses
        (
            _config({"worker": ["localhost"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address 'localhost': missing :port",
        ),
        (
            _config({"worker": ["a:0"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address 'a:0': port 0 out of range 1-65535",
        ),
        (
            _config({"worker": ["a:65536"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address 'a:65536': port 65536 out of range 1-65535",
        ),
        (
            _config({"worker": ["a:b"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address 'a:b': port 'b' is not a number 1-65535",
        ),
        (
            _config({"worker": ["::1:2222"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address '::1:2222': IPv6 addresses go in brackets, e.g. [::1]:2222",
        ),
        (
            _config({"worker": ["grpc://a:1"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address 'grpc://a:1': IPv6 addresses go in brackets, e.g. [::1]:2222",
        ),
        (
            _config({"worker": ["a b:1"]}, _task("worker", 0)),
            "cluster.worker[0]: malformed address 'a b:1': invalid host name 'a b'",
        ),
        (_config({"worker": [""]}, _task("worker", 0)), "cluster.worker[0]: malformed address '': empty host"),
        (
            _config({"worker": ["localhost:2222", "localhost:2222"]}, _task("worker", 1)),
            "cluster.worker[1]: duplicate address localhost:2222 (also cluster.worker[0])",
        ),
        (
            _config({"chief": ["[::1]:5"], "ps": ["[0:0::1]:5"], "worker": ["a:1"]}, _task("worker", 0)),
            "cluster.ps[0]: duplicate address [0:0::1]:5 (also cluster.chief[0])",
        ),
        (
            _config({"worker": ["Host:1", "host:1"]}, _task("worker", 0)),
            "cluster.worker[1]: duplicate address host:1 (also cluster.worker[0])",
        ),
        # task
        (_config(WORKERS), "task: missing"),
        (_config(WORKERS, "worker"), "task: expected an object with type and index, got string"),
        (_config(WORKERS, {"index": 0}), "task.type: missing"),
        (_config(WORKERS, _task(1, 0)), "task.type: expected a string, got number"),
        (
            _config(WORKERS, _task("master", 0)),
            "task.type: unknown task type 'master' (expected one of chief, worker, ps, evaluator)",
        ),
        (_config(WORKERS, _task("chief", 0)), "task.type: chief is not in cluster"),
        (_config(WORKERS, {"type": "worker"}), "task.index: missing"),
        (_config(WORKERS, _task("worker", True)), "task.index: expected an integer, got boolean"),
        (_config(WORKERS, _task("worker", "1")), "task.index: expected an integer, got string"),
        (_config(WORKERS, _task("worker", 1.0)), "task.index: expected an integer, got number"),
        (_config(WORKERS, _task("worker", None)), "task.index: expected an integer, got null"),
        (_config(WORKERS, _task("worker", 2)), "task.index: 2 out of range: cluster.worker has 2 task(s)"),
        (_config(WORKERS, _task("worker", -1)), "task.index: -1 out of range: cluster.worker has 2 task(s)"),
        (_config(WORKERS, _task("evaluator", 1)), "task.index: 1 out of range: there is only one evaluator (index 0)"),
    ],
)
def test_parse_tf_config_names_the_field(text: str, message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_tf_config(text)
    assert caught.value.message == message
    assert caught.value.exit_code == 2


def test_the_first_problem_in_field_order_is_reported() -> None:
    text = _config({"worker": ["a:1", "a:1"], "ps": [1]}, _task("bogus", -5))
    with pytest.raises(TpuctlError, match=r"^cluster\.ps\[0\]: expected an address string"):
        parse_tf_config(text)


# -- properties ---------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_roles = st.sampled_from(["chief", "worker", "ps", "evaluator", "master", ""])
_addresses = st.sampled_from(["a:1", "a:2", "b:1", "[::1]:1", "a", "a:0", "a:x", "::1", "", "A:1"])
_near_configs = st.fixed_dictionaries(
    {
        "cluster": st.dictionaries(_roles, st.lists(_addresses, max_size=3) | _json, max_size=4) | _json,
        "task": st.fixed_dictionaries({"type": _roles | _json, "index": st.integers(-2, 4) | _json}) | _json,
    }
)


def _only_tpuctl_errors(text: str) -> None:
    try:
        parse_tf_config(text)
    except TpuctlError as err:
        assert "\n" not in err.message


@given(st.text())
def test_parse_tf_config_takes_any_text(text: str) -> None:
    _only_tpuctl_errors(text)


@given(_json)
def test_parse_tf_config_takes_any_json(value: object) -> None:
    _only_tpuctl_errors(json.dumps(value))


@given(_near_configs)
def test_parse_tf_config_takes_near_miss_configs(config: dict[str, object]) -> None:
    _only_tpuctl_errors(json.dumps(config))


_shapes = st.tuples(st.integers(1, 4), st.booleans(), st.integers(0, 3), st.booleans(), st.integers(1, 60000))


@given(_shapes, st.data())
def test_every_generated_task_parses_back(shape: tuple[int, bool, int, bool, int], data: st.DataObject) -> None:
    workers, chief, ps, evaluator, base_port = shape
    spec = cluster_from_hosts(workers, chief=chief, ps=ps, evaluator=evaluator, base_port=base_port)
    task = data.draw(st.sampled_from(spec.tasks()))
    parsed, parsed_task = parse_tf_config(spec.tf_config_json(task))
    assert parsed_task == task
    assert parsed.jobs == spec.jobs
    assert parsed.evaluator == (task.type == "evaluator")
    assert parsed.is_chief(task) == spec.is_chief(task)
    assert parsed.num_workers == spec.num_workers


@given(_shapes, st.data())
def test_spliced_tf_config_is_exactly_what_json_dumps_writes(shape: tuple[int, bool, int, bool, int], data: st.DataObject) -> None:
    """The cluster is serialised once and spliced per task; the text must not change for it."""
    workers, chief, ps, evaluator, base_port = shape
    spec = cluster_from_hosts(workers, chief=chief, ps=ps, evaluator=evaluator, base_port=base_port)
    task = data.draw(st.sampled_from(spec.tasks()))
    assert spec.tf_config_json(task) == json.dumps(spec.tf_config(task), separators=(",", ":"))


def test_cluster_size_is_capped_before_any_address_is_made() -> None:
    from tpuctl.cluster.hosts import MAX_TASKS

    with pytest.raises(TpuctlError, match=f"more than the {MAX_TASKS}"):
        cluster_from_hosts(MAX_TASKS, chief=True)
    with pytest.raises(TpuctlError, match="gives 4000 address"):
        cluster_from_hosts(2, [HostEntry("a", slots=4000)])

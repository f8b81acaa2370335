"""Vertex AI's CLUSTER_SPEC, read into tpuctl's ClusterSpec and Task without TensorFlow.

Vertex AI sets CLUSTER_SPEC in every replica of a CustomJob:

    {"cluster": {"workerpool0": ["host:2222"], "workerpool1": [...], ...},
     "task": {"type": "workerpool1", "index": 0, "trial": ""},
     "environment": "cloud", "job": {...the CustomJobSpec...}}

Worker pool N is a role: 0 the primary replica (TensorFlow's chief), 1 workers,
2 parameter servers, 3 evaluators. Only `cluster` and `task` are read; `job`
(the whole job spec, any JSON), `environment` and the task's `trial` are left
alone. Vertex also sets TF_CONFIG for TensorFlow; the runtime prefers that one
(worker_env.current) and reads CLUSTER_SPEC only where TF_CONFIG is absent.

A JAX run (Keras 3 on JAX, or plain JAX) reads no TF_CONFIG: `jax_environ` turns
CLUSTER_SPEC into the variables Keras and JAX read (tpuctl/cluster/jax_cluster.py),
process 0 being workerpool0's one replica and the next workerpool1's in order, each
at the address Vertex lists for it (port 2222, which no TensorFlow server takes in a
JAX run): process 0's is the coordinator's (tpuctl/runtime/vertex_jax.py applies them).

The text comes from the environment, so it is parsed as hostile: bounded in
size and nesting, every field checked, and every problem a one-line
TpuctlError naming the field, never a traceback.
"""

from __future__ import annotations

from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.hosts import MAX_TASKS
from tpuctl.cluster.tf_config import ClusterSpec, Task, check_addresses, json_kind, load_json, task_index, task_type
from tpuctl.inputs.errors import TpuctlError, one_line

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see runtime/bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

CLUSTER_SPEC = "CLUSTER_SPEC"

# Worker pool -> TensorFlow role, in the order of CustomJobSpec.workerPoolSpecs.
POOL_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps", "workerpool3": "evaluator"}

# Linux caps one environment variable at 128 KiB (MAX_ARG_STRLEN), so a real CLUSTER_SPEC,
# `job` included, always fits; anything larger is not from Vertex.
MAX_SPEC_CHARS = 1 << 20

_MISSING = object()
_HINT = 'CLUSTER_SPEC is {"cluster": {"workerpool0": ["host:port"], ...}, "task": {"type": "workerpool0", "index": 0}}'


def from_environ(environ: Mapping[str, str]) -> tuple[ClusterSpec | None, Task] | None:
    """The cluster and task CLUSTER_SPEC describes; None when the variable is unset or blank."""
    raw = environ.get(CLUSTER_SPEC, "").strip()
    return parse_cluster_spec(raw) if raw else None


def parse_cluster_spec(text: str) -> tuple[ClusterSpec | None, Task]:
    """Parse and validate a CLUSTER_SPEC value.

    Returns (None, worker:0) for a job of one replica (workerpool0 alone): a
    single worker, exactly as when no TF_CONFIG is set. Otherwise workerpool0
    is the chief, workerpool1 the workers, workerpool2 the ps and workerpool3
    the evaluator (TensorFlow runs at most one).
    """
    if len(text) > MAX_SPEC_CHARS:
        raise _invalid("", f"{len(text)} characters, more than the {MAX_SPEC_CHARS} an environment variable can hold")
    spec = load_json(text, CLUSTER_SPEC)
    if not isinstance(spec, dict):
        raise _invalid("", f"expected a JSON object, got {json_kind(spec)}", hint=_HINT)
    pools = _parse_pools(spec.get("cluster", _MISSING))
    pool, index = _parse_task(spec, pools)
    role = POOL_ROLES[pool]
    jobs = {POOL_ROLES[name]: addresses for name, addresses in pools.items() if POOL_ROLES[name] != "evaluator"}
    evaluator = "workerpool3" in pools
    if set(pools) == {"workerpool0"}:
        return None, Task("worker", 0)  # one replica: nothing to coordinate
    return ClusterSpec(jobs=jobs, evaluator=evaluator), Task(role, index)


def jax_environ(text: str) -> dict[str, str]:
    """A JAX run's cluster, from a CLUSTER_SPEC value: this replica's KERAS_DISTRIBUTION_* and JAX_COORDINATOR_ADDRESS
    (and TPUCTL_WORKER_INDEX / TPUCTL_NUM_WORKERS, so the runtime names it as process N); none for one replica.

    Parameter servers and evaluators are TensorFlow's roles: a JAX cluster is processes that all run the script."""
    cluster, task = parse_cluster_spec(text)
    if cluster is None:
        return {}
    others = [role for role in cluster.jobs if role not in ("chief", "worker")] + (["evaluator"] if cluster.evaluator else [])
    if others:
        raise _invalid("cluster", f"a JAX run's replicas all run the script: it has no {' or '.join(others)} pool", hint="workerpool0 and workerpool1 only")
    addresses = [*cluster.jobs["chief"], *cluster.jobs.get("worker", ())]
    process = 0 if task.type == "chief" else 1 + task.index
    return {
        **jax_cluster.process_env(addresses, process),
        contract.WORKER_INDEX: str(process),
        contract.NUM_WORKERS: str(len(addresses)),
    }


def _parse_pools(cluster: object) -> dict[str, tuple[str, ...]]:
    if cluster is _MISSING:
        raise _invalid("cluster", "missing", hint=_HINT)
    if not isinstance(cluster, dict):
        raise _invalid("cluster", f"expected an object mapping worker pools to address lists, got {json_kind(cluster)}")
    pools: dict[str, tuple[str, ...]] = {}
    total = 0
    for name, addresses in cluster.items():
        if name not in POOL_ROLES:
            raise _invalid("cluster", f"unknown worker pool {_show(name)} (expected {', '.join(POOL_ROLES)})")
        where = f"cluster.{name}"
        if not isinstance(addresses, list):
            raise _invalid(where, f"expected a list of addresses, got {json_kind(addresses)}")
        total += len(addresses)
        if total > MAX_TASKS:
            raise _invalid("cluster", f"more than the {MAX_TASKS} replicas a cluster may have")
        for position, address in enumerate(addresses):
            if not isinstance(address, str):
                raise _invalid(f"{where}[{position}]", f"expected an address string, got {json_kind(address)}")
        if addresses:  # a pool the job spec skipped may be listed empty
            pools[name] = tuple(addresses)
    if "workerpool0" not in pools:
        raise _invalid("cluster.workerpool0", "missing or empty", hint="every Vertex AI job has a primary replica in worker pool 0")
    if len(pools["workerpool0"]) != 1:
        raise _invalid(
            "cluster.workerpool0",
            f"{len(pools['workerpool0'])} replicas: the primary pool has exactly one",
            hint="set replicaCount 1 in workerPoolSpecs[0] and put more replicas in workerPoolSpecs[1]",
        )
    if len(pools.get("workerpool3", ())) > 1:
        raise _invalid(
            "cluster.workerpool3",
            f"{len(pools['workerpool3'])} evaluators: TensorFlow runs at most one",
            hint="set replicaCount 1 in workerPoolSpecs[3]",
        )
    try:
        check_addresses(pools)
    except TpuctlError as err:
        raise TpuctlError(one_line(f"{CLUSTER_SPEC} {err.message}", 400), hint=err.hint) from None
    return pools


def _parse_task(spec: Mapping[str, object], pools: Mapping[str, tuple[str, ...]]) -> tuple[str, int]:
    pool, given = task_type(spec, example='e.g. "task": {"type": "workerpool1", "index": 0}', variable=CLUSTER_SPEC)
    if pool not in POOL_ROLES:
        raise _invalid("task.type", f"unknown worker pool {_show(pool)} (expected {', '.join(POOL_ROLES)})")
    if pool not in pools:
        raise _invalid("task.type", f"{pool} is not in cluster")
    index = task_index(given, variable=CLUSTER_SPEC)
    if not 0 <= index < len(pools[pool]):
        raise _invalid("task.index", f"{_show(index)} out of range: cluster.{pool} has {len(pools[pool])} replica(s)")
    return pool, index


def _show(value: object) -> str:
    """A value from the input, quoted, escaped and short enough for one line."""
    return one_line(repr(value), 60)


def _invalid(where: str, problem: str, *, hint: str | None = None) -> TpuctlError:
    field = f"{CLUSTER_SPEC} {where}" if where else CLUSTER_SPEC
    return TpuctlError(f"{field}: {problem}", hint=hint)

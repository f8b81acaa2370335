"""Cluster shapes and TF_CONFIG: the single source of truth for task roles.

Semantics follow TensorFlow's TFConfigClusterResolver: the `chief` task, or
worker 0 when there is none, is the chief; the evaluator runs beside the
cluster and is never listed in `cluster`. Pure functions, no I/O, no TF.

Validation is at least as strict as TensorFlow's own (multi_worker_util.
_validate_cluster_spec) and stricter where TF accepts a TF_CONFIG that can only
hang or misbehave later: duplicate or malformed addresses, negative indices,
an evaluator inside `cluster`. Errors name the offending field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tpuctl.cluster.hosts import MAX_TASKS, HostEntry, expand_addresses, parse_host
from tpuctl.inputs.errors import TpuctlError, one_line

# Order in which tasks are numbered, addressed and started.
CLUSTER_ROLES = ("chief", "worker", "ps")
ROLES = (*CLUSTER_ROLES, "evaluator")

# The port TensorFlow's own multi-worker examples use.
DEFAULT_PORT = 2222


@dataclass(frozen=True, order=True)
class Task:
    type: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"


@dataclass(frozen=True)
class ClusterSpec:
    """Addresses per cluster role, plus whether an evaluator runs beside them."""

    jobs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    evaluator: bool = False

    def tasks(self) -> list[Task]:
        found = [Task(role, i) for role in CLUSTER_ROLES for i in range(len(self.jobs.get(role, ())))]
        if self.evaluator:
            found.append(Task("evaluator", 0))
        return found

    def address(self, task: Task) -> str | None:
        if task.type == "evaluator":
            return None
        return self.jobs[task.type][task.index]

    def chief(self) -> Task:
        return Task("chief", 0) if self.jobs.get("chief") else Task("worker", 0)

    def is_chief(self, task: Task) -> bool:
        return task == self.chief()

    @property
    def num_workers(self) -> int:
        """Workers that run training steps: chief plus workers (what MWMS counts)."""
        return len(self.jobs.get("chief", ())) + len(self.jobs.get("worker", ()))

    def tf_config(self, task: Task) -> dict[str, object]:
        cluster = {role: list(addrs) for role, addrs in self.jobs.items() if addrs}
        return {"cluster": cluster, "task": {"type": task.type, "index": task.index}}

    def tf_config_json(self, task: Task) -> str:
        """`json.dumps(tf_config(task))`, compact, with the cluster serialised once per spec, not once per task.

        Every task's TF_CONFIG lists the whole cluster, so N tasks' configs are N² in
        size whatever is done; re-serialising the cluster each time made them N² in
        work too (4096 tasks: 16M addresses through json.dumps). Splicing one cached
        text keeps the work proportional to the bytes written.
        """
        task_json = json.dumps({"type": task.type, "index": task.index}, separators=(",", ":"))
        return f'{{"cluster":{self._cluster_json},"task":{task_json}}}'

    @cached_property
    def _cluster_json(self) -> str:
        cluster = {role: list(addrs) for role, addrs in self.jobs.items() if addrs}
        return json.dumps(cluster, separators=(",", ":"))

    def describe(self) -> str:
        """The cluster's tasks as ranges, e.g. `chief:0, worker:0-1, ps:0`."""
        return describe_counts(_counts(self.jobs))


def role_counts(workers: int, *, chief: bool = False, ps: int = 0) -> dict[str, int]:
    """How many addresses each cluster role needs."""
    return {"chief": 1 if chief else 0, "worker": workers, "ps": ps}


def make_cluster(
    workers: int,
    addresses: Iterable[str],
    *,
    chief: bool = False,
    ps: int = 0,
    evaluator: bool = False,
) -> ClusterSpec:
    """Assign addresses to chief, workers and ps, in that order.

    Raises ValueError when there are too few addresses; callers own the message.
    """
    supply: Iterator[str] = iter(addresses)
    jobs: dict[str, tuple[str, ...]] = {}
    for role, count in role_counts(workers, chief=chief, ps=ps).items():
        taken = tuple(next(supply, "") for _ in range(count))
        if "" in taken:
            raise ValueError(f"not enough addresses for {count} {role} task(s)")
        if taken:
            jobs[role] = taken
    return ClusterSpec(jobs=jobs, evaluator=evaluator)


def describe_counts(counts: Mapping[str, int]) -> str:
    """Task ranges per role in cluster order, e.g. `chief:0, worker:0-2`; empty roles left out."""
    parts = []
    for role in CLUSTER_ROLES:
        count = counts.get(role, 0)
        if count:
            parts.append(f"{role}:0" if count == 1 else f"{role}:0-{count - 1}")
    return ", ".join(parts)


def parse_task(text: str) -> Task:
    """Parse `TYPE:INDEX` such as `worker:1`.

    Raises ValueError naming the problem; callers add where the text came from.
    """
    role, colon, index = text.partition(":")
    if not colon or not re.fullmatch(r"[0-9]{1,9}", index):
        raise ValueError(f"{text!r}: expected TYPE:INDEX, e.g. worker:1")
    if role not in ROLES:
        raise ValueError(f"{text!r}: unknown task type {role!r} (expected one of {', '.join(ROLES)})")
    return Task(role, int(index))


def cluster_from_hosts(
    workers: int,
    hosts: Sequence[HostEntry] | None = None,
    *,
    chief: bool = False,
    ps: int = 0,
    evaluator: bool = False,
    base_port: int = DEFAULT_PORT,
    source: str = "the host list",
) -> ClusterSpec:
    """A validated cluster with one address per task: chief, then workers, then ps.

    Without hosts, every task runs on localhost on consecutive ports from base_port.
    The address count must match exactly: a surplus host is as likely a typo as a
    missing one, and either way some machine would not do what its owner expects.
    The evaluator needs no address; it runs beside the cluster.
    """
    if workers < 0 or ps < 0 or workers + chief < 1:
        raise TpuctlError(f"no cluster with {workers} worker(s), {ps} ps: it needs a chief or a worker")
    counts = role_counts(workers, chief=chief, ps=ps)
    needed = sum(counts.values())
    if needed > MAX_TASKS:
        raise TpuctlError(f"{needed} tasks ({describe_counts(counts)}) are more than the {MAX_TASKS} a cluster may have")
    if hosts is None:
        hosts = [HostEntry("localhost", slots=needed)]
    supplied = sum(entry.slots for entry in hosts)  # counted before expanding: a typo may ask for billions
    if supplied != needed:
        raise TpuctlError(
            f"{source} gives {supplied} address(es) but the cluster has {needed} task(s): " + describe_counts(counts),
            hint="one address per task, in the order chief, workers, ps",
        )
    addresses = expand_addresses(hosts, base_port)
    spec = make_cluster(workers, addresses, chief=chief, ps=ps, evaluator=evaluator)
    check_addresses(spec.jobs)
    return spec


def check_addresses(jobs: Mapping[str, Sequence[str]]) -> None:
    """Every address is `host:port` and used once.

    TF accepts duplicates and garbage here and then hangs waiting for a task that
    can never bind its port, so they are caught before anything starts.
    """
    seen: dict[tuple[str, int | None], str] = {}
    for role, addresses in jobs.items():
        for index, address in enumerate(addresses):
            where = f"cluster.{role}[{index}]"
            try:
                entry = parse_host(address)
            except ValueError as err:
                raise _invalid(where, f"malformed address {address!r}: {err}") from None
            if entry.port is None:
                raise _invalid(where, f"malformed address {address!r}: missing :port", hint="e.g. localhost:2222")
            first = seen.setdefault(entry.key(), where)
            if first != where:
                raise _invalid(where, f"duplicate address {address} (also {first})")


_MISSING = object()


def parse_tf_config(text: str) -> tuple[ClusterSpec, Task]:
    """Parse and validate a TF_CONFIG value.

    Only the evaluator's own TF_CONFIG reveals that an evaluator exists, so the
    returned ClusterSpec has `evaluator` set exactly when the task is the evaluator.
    Keys other than `cluster` and `task` (rpc_layer, environment, ...) are left to TF.
    """
    config = load_json(text)
    if not isinstance(config, dict):
        raise _invalid("TF_CONFIG", f"expected a JSON object, got {json_kind(config)}")
    jobs = _parse_cluster(config.get("cluster", _MISSING))
    task = _parse_task_field(config, jobs)
    return ClusterSpec(jobs=jobs, evaluator=task.type == "evaluator"), task


def load_json(text: str, variable: str = "TF_CONFIG") -> object:
    """JSON from an environment variable, strictly: a duplicated key or a parse failure is one line naming `variable`."""

    def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
        # json keeps the last of two equal keys; a duplicated `worker` list is a mistake to report, not to pick from.
        found: dict[str, object] = {}
        for key, value in pairs:
            if key in found:
                raise _invalid(variable, f"duplicate key {one_line(repr(key), 60)}")
            found[key] = value
        return found

    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as err:
        raise _invalid(variable, f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    except ValueError as err:  # e.g. an integer longer than Python will convert
        raise _invalid(variable, f"invalid JSON: {one_line(str(err), 120)}") from None
    except RecursionError:
        raise _invalid(variable, "invalid JSON: nested too deeply") from None


def _parse_cluster(cluster: object) -> dict[str, tuple[str, ...]]:
    if cluster is _MISSING:
        raise _invalid("cluster", "missing", hint='TF_CONFIG is {"cluster": {...}, "task": {...}}')
    if not isinstance(cluster, dict):
        raise _invalid("cluster", f"expected an object mapping task types to address lists, got {json_kind(cluster)}")
    if not cluster:
        raise _invalid("cluster", "empty", hint="list at least one chief or worker address")
    for role, addresses in cluster.items():
        _check_job(role, addresses)
    jobs = {role: tuple(cluster[role]) for role in CLUSTER_ROLES if role in cluster}
    check_addresses(jobs)
    if "chief" not in jobs and "worker" not in jobs:
        raise _invalid("cluster", "no chief or worker task", hint="TF needs one of them to lead the cluster")
    return jobs


def _check_job(role: str, addresses: object) -> None:
    if role == "evaluator":
        raise _invalid(
            "cluster.evaluator",
            "the evaluator must not be listed in cluster",
            hint="it runs beside the cluster; only its own task names it",
        )
    if role not in CLUSTER_ROLES:
        raise _invalid("cluster", f"unknown task type {role!r} (expected one of {', '.join(CLUSTER_ROLES)})")
    where = f"cluster.{role}"
    if not isinstance(addresses, list):
        raise _invalid(where, f"expected a list of addresses, got {json_kind(addresses)}")
    if not addresses:
        raise _invalid(where, "empty list", hint="leave the task type out instead")
    if role == "chief" and len(addresses) > 1:
        raise _invalid(where, f"more than one chief ({len(addresses)} addresses)")
    for index, address in enumerate(addresses):
        if not isinstance(address, str):
            raise _invalid(f"{where}[{index}]", f"expected an address string, got {json_kind(address)}")


def task_type(config: Mapping[str, object], *, example: str, variable: str = "") -> tuple[str, object]:
    """The type of the `task` object in a parsed TF_CONFIG or Vertex's CLUSTER_SPEC (the same object in both),
    checked to be a string, and its index as written. The caller checks the type against its own names, then
    the index with task_index, so a task wrong in both is told by its type first. `variable` prefixes each message."""
    task = config.get("task", _MISSING)
    if task is _MISSING:
        raise _invalid("task", "missing", hint=example, variable=variable)
    if not isinstance(task, dict):
        raise _invalid("task", f"expected an object with type and index, got {json_kind(task)}", variable=variable)
    kind = task.get("type", _MISSING)
    if kind is _MISSING:
        raise _invalid("task.type", "missing", variable=variable)
    if not isinstance(kind, str):
        raise _invalid("task.type", f"expected a string, got {json_kind(kind)}", variable=variable)
    return kind, task.get("index", _MISSING)


def task_index(index: object, *, variable: str = "") -> int:
    """The index task_type returned, checked to be a JSON integer."""
    if index is _MISSING:
        raise _invalid("task.index", "missing", variable=variable)
    if type(index) is not int:  # bool is an int to Python, not to TF_CONFIG's or CLUSTER_SPEC's readers
        raise _invalid("task.index", f"expected an integer, got {json_kind(index)}", variable=variable)
    return index


def _parse_task_field(config: Mapping[str, object], jobs: Mapping[str, Sequence[str]]) -> Task:
    role, given = task_type(config, example='each task needs its own, e.g. "task": {"type": "worker", "index": 0}')
    if role not in ROLES:
        raise _invalid("task.type", f"unknown task type {role!r} (expected one of {', '.join(ROLES)})")
    index = task_index(given)
    if role == "evaluator":
        if index != 0:
            raise _invalid("task.index", f"{index} out of range: there is only one evaluator (index 0)")
    elif role not in jobs:
        raise _invalid(
            "task.type", f"{role} is not in cluster", hint=f"the cluster has {describe_counts(_counts(jobs))}"
        )
    elif not 0 <= index < len(jobs[role]):
        raise _invalid("task.index", f"{index} out of range: cluster.{role} has {len(jobs[role])} task(s)")
    return Task(role, index)


def _counts(jobs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    return {role: len(addresses) for role, addresses in jobs.items()}


def json_kind(value: object) -> str:
    """JSON's name for a value's type, as the user wrote it (for messages about TF_CONFIG and CLUSTER_SPEC)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _invalid(where: str, problem: str, *, hint: str | None = None, variable: str = "") -> TpuctlError:
    field = f"{variable} {where}" if variable and where else variable or where
    return TpuctlError(f"{field}: {problem}", hint=hint)

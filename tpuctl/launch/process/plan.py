"""The exact processes that will run a Job (Plan), one WorkerSpec each.

Plain data: `--dry-run` prints a Plan, backends only execute one, and
tests can check every command line and environment without starting anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import ClusterSpec, Task, make_cluster
from tpuctl.devices.gpus import Share
from tpuctl.launch.job import Job, worker_env


@dataclass(frozen=True)
class WorkerSpec:
    """One process: its task, where it runs, its argv and the variables tpuctl sets.

    `env` is an overlay on the launcher's environment, not a full one, so a
    plan stays readable and never copies the user's secrets into its output.
    """

    task: Task
    chief: bool
    host: str
    address: str | None
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    server: bool = False  # serves until stopped (parameter-server workers and ps); never "done" on its own

    @property
    def name(self) -> str:
        return self.task.name

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, object]:
        return {
            "task": self.name,
            "type": self.task.type,
            "index": self.task.index,
            "chief": self.chief,
            "host": self.host,
            "address": self.address,
            "argv": list(self.argv),
            "env": dict(self.env),
            "server": self.server,
        }


@dataclass(frozen=True)
class Plan:
    job: Job
    cluster: ClusterSpec
    workers: tuple[WorkerSpec, ...]
    run_id: str
    attempt: int
    gpus: Share | None = None  # which GPUs each local worker sees (tpuctl/devices/gpus.py); None: left alone
    notes: tuple[str, ...] = ()  # what the backend says of the launch beside the workers (a setting it leaves alone)

    @property
    def tf_config(self) -> bool:
        """Whether the workers get a TF_CONFIG (`one_process` says when they do not; a JAX run never does)."""
        return self.job.framework != contract.JAX and not one_process(self.job, self.cluster)

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "attempt": self.attempt,
            "attempts": self.job.attempts,
            "script": self.job.script,
            "args": list(self.job.args),
            "framework": self.job.framework,
            "framework_found": self.job.framework_found,
            "strategy": self.job.strategy,
            "model_dir": self.job.model_dir,
            "tf_config": self.tf_config,
            "workers": [w.to_dict() for w in self.workers],
            "gpus": self.gpus.to_json() if self.gpus is not None else None,
            "notes": list(self.notes),
        }

    def render(self) -> str:
        job = self.job
        if job.framework == contract.JAX:
            found = f" ({job.framework_found})" if job.framework_found else ""
            lines = [f"plan {self.run_id}: {job.workers} process(es), Keras 3 / JAX{found}, up to {job.attempts} attempt(s)"]
        else:
            lines = [f"plan {self.run_id}: {job.workers} worker(s), strategy {job.strategy}, up to {job.attempts} attempt(s)"]
        if self.gpus is not None:
            lines.append(f"GPUs: {self.gpus.summary()}")
        for worker in self.workers:
            role = " (chief)" if worker.chief else ""
            lines.append(f"{worker.name}{role} on {worker.host}")
            lines.append(f"  command: {worker.command_line()}")
            lines.extend(f"  env: {name}={shlex.quote(value)}" for name, value in worker.env.items())
        if job.framework == contract.JAX:
            lines.append(JAX_CLUSTER if self.workers and jax_cluster.JOB_ADDRESSES in self.workers[0].env else JAX_FINDS_HOSTS)
        elif not self.tf_config:
            lines.append(NO_TF_CONFIG)
        lines.extend(self.notes)
        lines.append("(dry run: nothing started; ports are chosen afresh at launch)")
        # An argument that is not UTF-8 reaches Python as lone surrogates ("\udcff" for the byte 0xff),
        # which a strict UTF-8 stdout cannot encode: show those as backslash escapes instead.
        return "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8")


NO_TF_CONFIG = (
    "no TF_CONFIG: one worker runs as `python SCRIPT` does; a one-task TF_CONFIG would send "
    "MultiWorkerMirroredStrategy() down its multi-worker path (--strategy multi-worker-mirrored writes one)"
)


JAX_CLUSTER = (
    "no TF_CONFIG: a JAX run; keras.distribution.initialize() and jax.distributed.initialize() find the other "
    "processes in the KERAS_DISTRIBUTION_* and JAX_COORDINATOR_* variables above (process 0 is the coordinator)"
)
JAX_FINDS_HOSTS = "no TF_CONFIG: a JAX run on a TPU VM slice; JAX finds the slice's hosts itself (the metadata server)"


def one_process(job: Job, cluster: ClusterSpec) -> bool:
    """A single worker, with no chief, ps or evaluator, that the user did not ask to run as a multi-worker cluster.

    It gets no TF_CONFIG, as `python SCRIPT` has none. With a one-task TF_CONFIG,
    MultiWorkerMirroredStrategy() takes its multi-worker path (TF 2.21,
    collective_all_reduce_strategy.py `_initialize_strategy`: local only when the
    resolver's cluster_spec() is empty), which must configure collectives before
    the eager context starts: a script that builds it after other TensorFlow work,
    as TensorFlow's distributed-training guide does, dies with "Collective ops must
    be configured at program startup", while without TF_CONFIG it runs locally.
    Estimator's RunConfig, too, refuses a one-worker cluster without a chief.
    """
    return len(cluster.tasks()) == 1 and job.strategy != contract.MULTI_WORKER


def build_plan(
    job: Job,
    addresses: Sequence[str],
    *,
    run_id: str,
    attempt: int,
    host: str = "localhost",
    hosts: Sequence[str] | None = None,
    log_dir: str | None = None,
    gpus: Share | None = None,
    jax_finds_hosts: bool = False,
) -> Plan:
    """Turn a Job and one address per worker into every worker's argv and env.

    Every worker runs on `host`, unless `hosts` names one host per task (in task order).
    `log_dir`: the run's, where profiles go when there is no model dir. `gpus`: each task's
    CUDA_VISIBLE_DEVICES (and memory growth where workers share a card), over the user's --env.
    A JAX run gets its cluster in Keras' and JAX's variables instead of TF_CONFIG, unless `jax_finds_hosts` (a TPU
    VM slice, whose hosts JAX reads from the metadata server).
    """
    cluster = make_cluster(job.workers, addresses, chief=job.parameter_server, ps=job.ps)
    tasks = cluster.tasks()
    if hosts is not None and len(hosts) != len(tasks):
        raise ValueError(f"{len(hosts)} hosts for {len(tasks)} tasks")
    user_env = dict(job.env)
    strategy_env = worker_env(job)
    if job.framework == contract.JAX:  # TensorFlow's strategy options mean nothing to a JAX worker: not shown either
        for variable in (contract.STRATEGY, contract.SCOPE, contract.KERAS):
            strategy_env.pop(variable, None)
    argv = (job.python, "-m", "tpuctl.runtime", job.script, *job.args)
    jax = job.framework == contract.JAX
    alone = jax or one_process(job, cluster)
    if jax and jax_cluster.BACKEND not in user_env:
        user_env[jax_cluster.BACKEND] = contract.JAX  # the script's own os.environ assignment still wins
    specs = []
    for position, task in enumerate(tasks):
        env = {
            **user_env,
            **({} if alone else {"TF_CONFIG": cluster.tf_config_json(task)}),
            **(jax_cluster.process_env(list(addresses[: len(tasks)]), position) if jax and not jax_finds_hosts else {}),
            contract.RUN_ID: run_id,
            contract.ATTEMPT: str(attempt),
            contract.TASK_TYPE: task.type,
            contract.WORKER_INDEX: str(task.index),
            contract.NUM_WORKERS: str(cluster.num_workers),
            **strategy_env,
            **(gpus.env(position) if gpus is not None else {}),
            # Worker output must reach the terminal line by line, not in 8 KiB blocks.
            "PYTHONUNBUFFERED": "1",
        }
        if job.model_dir:
            env[contract.MODEL_DIR] = job.model_dir
        if job.model_dir or log_dir:  # where --profile's window and `tpuctl profile`'s captures go
            env[contract.PROFILE_DIR] = job.model_dir or log_dir or ""
        specs.append(
            WorkerSpec(
                task=task,
                chief=cluster.is_chief(task),
                host=host if hosts is None else hosts[position],
                address=cluster.address(task),
                argv=argv,
                env=env,
                server=job.parameter_server and task.type in ("worker", "ps"),
            )
        )
    return Plan(job=job, cluster=cluster, workers=tuple(specs), run_id=run_id, attempt=attempt, gpus=gpus)

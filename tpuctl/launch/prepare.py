"""From the command line's values to a checked launch: the backend, its Options and Runner, and the Job.

The CLI hands every parsed value here (`prepare`); this module picks the
backend, builds that backend's Options dataclass, refuses another backend's
options (and the Job options the backend cannot honour) instead of ignoring
them, and lets the Runner shape the Job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.hosts import MAX_TASKS
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch import framework, option_fields, rehearsal_report, secret_values
from tpuctl.launch.job import Job, check_strategy_options
from tpuctl.launch.launch_options import LaunchOptions
from tpuctl.launch.registry import BACKENDS, backend_module
from tpuctl.launch.runner import BackendOptions, Request, Runner, refuse_unsupported
from tpuctl.launch.tfpair import rehearsal
from tpuctl.runs.naming import default_log_dir, run_id


@dataclass(frozen=True)
class Launch:
    """A checked launch: the job as its backend runs it, the runner, and how to report."""

    job: Job
    runner: Runner
    options: LaunchOptions
    run_id: str

    @property
    def log_dir(self) -> Path:
        return Path(self.options.log_dir) if self.options.log_dir else default_log_dir(self.run_id)


def check_rehearsal(job: Job, backend: str) -> Job:
    """A rehearsal is one local launch standing in for the whole slice: options that change that are refused. A JAX
    script's rehearsal runs one process per host (tfpair/rehearsal.py jax_processes) on this machine's JAX."""
    if job.rehearse is None:
        if job.runtime is not None:
            raise TpuctlError(
                "--runtime is for --rehearse: the TensorFlow image a rehearsal runs under",
                hint="a TPU VM's own image is the runtime-version setting (TPUCTL_RUNTIME_VERSION, `tpuctl create --runtime-version`)",
            )
        return job
    jax = job.framework == contract.JAX
    rehearsal_report.replicas_of(job.rehearse, jax=jax)
    if job.runtime is not None:
        if jax:
            raise TpuctlError("--runtime names a TPU image's TensorFlow; a JAX script rehearses on this machine's JAX", hint="leave --runtime out")
        rehearsal.image_of(job.runtime)
    clash = (
        "--backend " + backend if backend != "local"
        else "--workers" if job.workers > 1
        else "--simulate-devices" if job.simulate_devices
        else "--strategy " + job.strategy if job.strategy not in ("auto", "tpu", *(("none",) if jax else ()))
        else "--tpu-timeout" if job.tpu_timeout is not None
        else "--strategy-builder script" if job.strategy_builder == "script"
        else None
    )
    if clash is not None:
        kind = "one local process per host of the TPU, each with its devices" if jax else "one local process with the TPU's replicas"
        raise TpuctlError(
            f"--rehearse runs {kind} on virtual CPUs; it does not combine with {clash}",
            hint="docs/rehearse.md says how a multi-host slice is rehearsed",
        )
    return rehearsal.jax_processes(job) if jax else job


# TensorFlow's own options: a JAX run builds no tf.distribute strategy, so each would silently do nothing.
TENSORFLOW_ONLY = ("strategy", "scope", "keras", "communication", "devices", "strategy_builder", "tpu_timeout", "ps")


def choose_framework(job: Job, given: frozenset[str]) -> Job:
    """`--framework auto` resolved from the script (tpuctl/launch/framework.py); TensorFlow's options refused on a JAX run."""
    chosen, why = framework.choose(job.framework, job.script, job.env)
    if chosen == contract.JAX:
        named = [name for name in TENSORFLOW_ONLY if name in given and not (name == "strategy" and job.strategy in ("auto", "none"))]
        if named:
            because = f" ({why})" if why else ""
            raise TpuctlError(
                f"{_flag(named[0])} is TensorFlow's, and this is a JAX run{because}: the script's own keras.distribution "
                "(or jax.distributed) distributes it",
                hint="leave it out, or pass --framework tensorflow for a TensorFlow script",
            )
    return replace(job, framework=chosen, framework_found=why)


def _choose_backend(named: str, params: Mapping[str, Any], given: frozenset[str]) -> str:
    """The backend, with options that name their own backend (--hosts) choosing it when --backend is not given."""
    for candidate in BACKENDS:
        source = backend_module(candidate).Options.implied_by(params)
        if source is not None:
            if "backend" in given and named != candidate:
                raise TpuctlError(f"{source} runs workers over {candidate}, not with --backend {named}")
            return candidate
    return named


def _refuse_other_backends(chosen: str, given: frozenset[str]) -> None:
    """An option of another backend is a mistake, not something to ignore; named with every backend that takes it
    (--accelerator and --image are kubernetes' and vertex's)."""
    others = given - set(option_fields.names(backend_module(chosen).Options))
    owners: dict[str, list[str]] = {}
    for name in BACKENDS:
        if name != chosen:
            for flag in option_fields.given_flags(backend_module(name).Options, others):
                owners.setdefault(flag, []).append(name)
    if owners:
        flag, names = next(iter(owners.items()))
        template = backend_module(names[0]).Options.misplaced if len(names) == 1 else BackendOptions.misplaced
        raise TpuctlError(template.format(flag=flag, backend=" or ".join(names), chosen=chosen))


def _flag(name: str) -> str:
    owner = Job if name in option_fields.names(Job) else LaunchOptions
    return option_fields.flag(owner, name)


def _tpu_options() -> dict[str, tuple[str, Any]]:
    """The ssh backend's options that no local launch has (--tpu, --new-tpu, their zone, --sync...): (flag, default)."""
    ssh, local = backend_module("ssh").Options, backend_module("local").Options
    own = set(option_fields.names(ssh)) - set(option_fields.names(local))
    return {name: (option_fields.flag(ssh, name), option_fields.default_of(ssh, name)) for name in option_fields.names(ssh) if name in own}


def prepare(script: str, script_args: tuple[str, ...], params: Mapping[str, Any], given: frozenset[str]) -> Launch:
    """Everything `tpuctl launch` checks before it starts or prints anything."""
    standing = rehearsal.stand_in(params, given, _tpu_options(), script)  # before the ssh runner would look a TPU up
    params, given = standing.params, standing.given
    common = option_fields.from_params(LaunchOptions, params)
    chosen = _choose_backend(common.backend, params, given)
    _refuse_other_backends(chosen, given)
    module = backend_module(chosen)
    runner = module.runner(option_fields.from_params(module.Options, params))
    refuse_unsupported(runner, [name for name in (*option_fields.names(Job), *option_fields.names(LaunchOptions)) if name in given], _flag)
    if common.tail_view and not params.get("model_dir"):
        raise TpuctlError("--tail follows --model-dir: give one")
    job = option_fields.from_params(Job, params, script=script, args=script_args, runtime_of=standing.why, left_out=standing.left_out)
    job = choose_framework(job, given)
    job = check_rehearsal(job, chosen)
    job = runner.prepare(job, given)
    if job.framework != contract.JAX:  # a JAX run's --simulate-devices gives each process that many CPU devices
        check_strategy_options(job.strategy, job.workers, job.ps, job.communication, job.devices, job.simulate_devices, job.tpu_timeout)
    if job.processes > MAX_TASKS:  # --workers and --ps are capped each; a chief and the ps come on top
        raise TpuctlError(f"{job.processes} processes are more than the {MAX_TASKS} tasks a cluster may have", hint="lower --workers or --ps")
    return Launch(job=job, runner=runner, options=replace(common, backend=chosen), run_id=run_id(job.script))


def request(launch: Launch) -> Request:
    """What --dry-run prints, for every backend: the request a run would make, secret values hidden (docs/security.md)."""
    return launch.runner.request(secret_values.for_display(launch.job), launch.run_id)

"""A launch option is declared once, on the Job (or LaunchOptions), and reaches the CLI, the config file and the
workers from that declaration alone; a backend's refusals name options that exist."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import click
import pytest

from tpuctl.cluster import worker_contract as contract
from tpuctl.launch import option_fields
from tpuctl.launch.job import Job, worker_env
from tpuctl.launch.launch_options import CONFIG_KEYS, LaunchOptions
from tpuctl.launch.process.plan import build_plan
from tpuctl.launch.registry import BACKENDS, backend_module

WORKER_FIELDS = option_fields.worker_fields(Job)


def _other_value(name: str) -> Any:
    """A valid value of the option that is not its default."""
    default = option_fields.default_of(Job, name)
    kind = option_fields.param_type(Job, name)
    if isinstance(kind, click.Choice):
        return next(choice for choice in kind.choices if choice != default)
    hint = typing.get_type_hints(Job)[name]
    samples: dict[Any, Any] = {bool: not default, int: 3, float: 7.5, str: "v2-8", tuple[str, ...]: ("GPU:0", "GPU:1")}
    if hint in samples:
        return samples[hint]
    return next(value for kind_, value in samples.items() if kind_ in typing.get_args(hint))  # X | None


def test_every_job_field_but_the_script_is_a_declared_option() -> None:
    """Besides the script and its arguments, only what prepare() derives is not an option: for a rehearsal that stands
    in for a TPU launch (the image's source, the TPU flags it leaves out), and what made --framework auto choose."""
    fields = [f.name for f in dataclasses.fields(Job)]
    assert set(fields) - set(option_fields.names(Job)) == {"script", "args", "runtime_of", "left_out", "framework_found"}


@pytest.mark.parametrize(("name", "variable", "always"), WORKER_FIELDS, ids=[name for name, _, _ in WORKER_FIELDS])
def test_an_option_that_reaches_the_workers_is_read_back_by_the_runtime(name: str, variable: str, always: bool) -> None:
    """Set to another value, it is in every worker's environment under its variable, and the contract's reader of the
    same name gives the value back; at its default it is left out of the plan (unless the runtime always reads it)."""
    value = _other_value(name)
    job = dataclasses.replace(Job(script="train.py", workers=2), **{name: value})
    plan = build_plan(job, ["127.0.0.1:1", "127.0.0.1:2"], run_id="r", attempt=1)
    for spec in plan.workers:
        assert getattr(contract, name)(spec.env) == value
    assert (variable in worker_env(Job(script="train.py"))) == always


def test_the_worker_variables_are_the_contracts_and_distinct() -> None:
    variables = [variable for _, variable, _ in WORKER_FIELDS]
    assert len(set(variables)) == len(variables) >= 9
    assert set(variables) <= {v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}


def test_the_config_keys_are_the_options_marked_so_with_their_types() -> None:
    owners = (Job, LaunchOptions, *(backend_module(backend).Options for backend in BACKENDS))
    marked = {name for cls in owners for name in option_fields.config_keys(cls)}
    assert set(CONFIG_KEYS) == marked
    assert {"workers", "strategy", "hang_timeout", "log_dir", "verbose", "sync_limit"} <= marked
    for name, kind in CONFIG_KEYS.items():
        base = kind[0] if isinstance(kind, tuple) else kind
        owner = next(cls for cls in owners if name in option_fields.names(cls))
        default = option_fields.default_of(owner, name)
        assert default is None or isinstance(default, base) or (base is float and isinstance(default, int)), name


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_backends_refusals_name_options_that_exist(backend: str) -> None:
    module = backend_module(backend)
    runner = module.runner(option_fields.from_params(module.Options, {"ssh_hosts": "a,b"} if backend == "ssh" else {}))
    known = {*option_fields.names(Job), *option_fields.names(LaunchOptions)}
    assert set(runner.unsupported) <= known

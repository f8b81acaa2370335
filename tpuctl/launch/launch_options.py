"""The options of `tpuctl launch` that are not the Job's: where the logs go, how the run is shown, which backend.

The Job's own options are declared on the Job (tpuctl/launch/job.py), each backend's
on its Options; together they are the command line, and the ones marked `config=True`
the keys a [launch] table may set (CONFIG_KEYS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from tpuctl.launch import option_fields
from tpuctl.launch.job import Job
from tpuctl.launch.option_fields import option
from tpuctl.launch.registry import BACKENDS, backend_module


@dataclass(frozen=True)
class LaunchOptions:
    """Options every backend reads, beside the Job's."""

    log_dir: str | None = option(
        "--log-dir", type=click.Path(file_okay=False), help="Per-worker log files, one folder per attempt.  [default: tpuctl's state dir]",
        config=True,
    )
    verbose: bool = option(
        "--verbose", is_flag=True, default=False, help="Show TensorFlow's start-up log lines too (they are always in the log files).",
        config=True,
    )
    tail_view: bool = option(
        "--tail", is_flag=True, default=False, help="Show the scalars and checkpoints written to --model-dir while the workers run."
    )
    dry_run: bool = option("--dry-run", is_flag=True, default=False, help="Print every worker's command and environment; start nothing.")
    as_json: bool = option("--json", is_flag=True, default=False, help="Machine-readable plan (with --dry-run) or outcome.")
    backend: str = option(
        "--backend",
        type=click.Choice(tuple(BACKENDS)),
        default="local",
        show_default=True,
        help="Where workers run: processes here, hosts over SSH, a Kubernetes TFJob/JobSet (--dry-run prints its YAML), "
        "or a Vertex AI CustomJob (--dry-run prints its body).",
    )
    detach: bool = option(
        "--detach",
        is_flag=True,
        default=False,
        help="Return at once and let the run go on in a process of its own, whatever becomes of this terminal "
        "(tpuctl runs, logs, attach, stop; docs/runs.md).",
    )


# The options tpuctl.toml / the user config file may set under [launch], with their TOML types, each
# paired with its option's click type, so a file's value meets the same limits as the flag's. A backend's
# option is one only where it is a project's policy rather than one run's (ssh's --sync-limit).
CONFIG_KEYS: dict[str, type | tuple[type, Any]] = {
    name: (base, checker) if (checker := option_fields.param_type(owner, name)) is not None else base
    for owner in (Job, LaunchOptions, *(backend_module(backend).Options for backend in BACKENDS))
    for name, base in option_fields.config_keys(owner).items()
}

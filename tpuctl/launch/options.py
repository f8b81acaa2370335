"""`tpuctl launch`'s own options, their checks, and the step from parsed options to a Job and its Runner.

The CLI hands every parsed value here (`prepare`); this module picks the
backend, builds that backend's Options dataclass, refuses another backend's
options instead of ignoring them, and lets the Runner shape the Job.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import click

from tpuctl import inputs
from tpuctl.errors import TpuctlError
from tpuctl.hosts import MAX_TASKS
from tpuctl.launch import logs, option_fields, rehearsal_report, secret_values
from tpuctl.launch.option_fields import option
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.plan import Job
from tpuctl.launch.private_files import hold_new, is_held, private_dir, write_private
from tpuctl.launch.runner import BACKENDS, Request, RunContext, Runner, backend_module
from tpuctl.seconds import Seconds
from tpuctl.worker_contract import BUILDERS, COMMUNICATIONS, KERAS_CHOICES, STRATEGIES

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DEVICE = re.compile(r"/?(job:[a-z]+/(replica:\d+/)?(task:\d+/)?)?(device:)?(CPU|GPU|TPU|cpu|gpu|tpu):\d+\Z")
DEFAULT_START_TIMEOUT_S = 300.0
# Restarts past this are a typo; each one is a new attempt folder of logs.
MAX_RESTARTS = 1000
# Preemptions are routine on spot TPUs: a day's run may see several; each is a restart from the last checkpoint.
DEFAULT_MAX_PREEMPTIONS = 10
# Virtual CPUs for a rehearsal of one host's devices (a TPU host has at most 8 chips): far past any machine.
MAX_SIMULATED_DEVICES = 4096
# The backend that options such as --hosts imply when --backend is not given.
IMPLIED_BACKEND = "ssh"


@dataclass(frozen=True)
class LaunchOptions:
    """Options every backend reads."""

    workers: int = option(
        "--workers", type=click.IntRange(1, MAX_TASKS), default=1, show_default=True, help=f"Worker processes (at most {MAX_TASKS})."
    )
    strategy: str = option(
        "--strategy",
        type=click.Choice(STRATEGIES),
        default="auto",
        show_default=True,
        help="Distribution strategy each worker builds; auto: TPU if present, else multi-worker when --workers > 1.",
    )
    model_dir: str | None = option("--model-dir", help="Where the script keeps checkpoints and summaries (TPUCTL_MODEL_DIR).")
    max_restarts: int = option(
        "--max-restarts",
        type=click.IntRange(0, MAX_RESTARTS),
        default=0,
        show_default=True,
        help="Restart all workers this many times after a failure."
    )
    max_preemptions: int = option(
        "--max-preemptions",
        type=click.IntRange(0, MAX_RESTARTS),
        default=DEFAULT_MAX_PREEMPTIONS,
        show_default=True,
        help="Restart all workers this many times after a preemption (a worker exiting 42), besides --max-restarts.",
    )
    hang_timeout: float | None = option(
        "--hang-timeout",
        type=Seconds(),
        metavar="S",
        help="Stop (or restart) when no worker printed and no new step reached --model-dir for S seconds; "
        "every worker's stacks are shown first (0 < S <= 604800).  [default: off]",
    )
    log_dir: str | None = option(
        "--log-dir", type=click.Path(file_okay=False), help="Per-worker log files, one folder per attempt.  [default: tpuctl's state dir]"
    )
    env_values: tuple[str, ...] = option(
        "--env", multiple=True, default=(), metavar="NAME=VALUE", help="Extra environment for every worker (repeatable)."
    )
    python: str | None = option("--python", metavar="PATH", help="Interpreter for the workers.  [default: this one]")
    start_timeout: float = option(
        "--start-timeout",
        type=Seconds(),
        metavar="S",
        default=DEFAULT_START_TIMEOUT_S,
        show_default=True,
        help="Seconds every worker has to build its strategy; where the script builds its own, its code before that counts too "
        "(0 < S <= 604800).",
    )
    scope: bool = option("--scope/--no-scope", default=True, show_default=True, help="Run the script inside strategy.scope().")
    strategy_builder: str = option(
        "--strategy-builder",
        type=click.Choice(BUILDERS),
        default="auto",
        show_default=True,
        help="script: tpuctl builds no strategy and enters no scope; the script's own construction runs, arguments and all. "
        "tpuctl: built before the script, entered, and handed to the script's constructors. "
        "auto: script when its source constructs a tf.distribute strategy or uses graph mode or tf.estimator.",
    )
    keras: str = option(
        "--keras",
        type=click.Choice(KERAS_CHOICES),
        default="auto",
        show_default=True,
        help="auto: on TensorFlow 2.16+, tf-keras (TF_USE_LEGACY_KERAS=1) for multi-worker and parameter-server runs "
        "(also a script's own ParameterServerStrategy), whose tf.keras (Keras 3) cannot fit under those strategies, "
        "and for scripts written for tf-keras (legacy optimizers, metrics' reset_states()); otherwise Keras 3, whose "
        "custom loops on several replicas in one process get their variables built in the strategy's scope. "
        "TensorFlow 2.15 and older keep their own Keras 2. keras3: keep Keras 3. tf-keras: on any run.",
    )
    ps: int = option(
        "--ps",
        type=click.IntRange(0, MAX_TASKS),
        default=0,
        show_default=True,
        help="Parameter-server tasks (with --strategy parameter-server; a chief coordinates).",
    )
    communication: str = option(
        "--communication", type=click.Choice(COMMUNICATIONS), default="auto", show_default=True, help="MultiWorkerMirrored collectives implementation."
    )
    device_list: str | None = option(
        "--devices", metavar="DEV[,DEV]", help="Devices for --strategy mirrored, e.g. GPU:0,GPU:1.  [default: all]"
    )
    simulate_devices: int = option(
        "--simulate-devices",
        type=click.IntRange(0, MAX_SIMULATED_DEVICES),
        default=0,
        help="Split the CPU into N logical devices: MirroredStrategy with N replicas.",
    )
    rehearse: str | None = option(
        "--rehearse",
        metavar="ACCELERATOR",
        help="Run a TPU script unchanged on this machine's CPU with that TPU's replicas (e.g. v2-8: 8) and report "
        "what the TPU would refuse (docs/rehearse.md).",
    )
    tpu_timeout: float | None = option(
        "--tpu-timeout",
        type=Seconds(),
        metavar="S",
        help="Seconds a worker may spend reaching its TPU, tpuctl's connection or the script's own (TPU_NAME; 0 < S <= 604800; default 300).",
    )
    verbose: bool = option(
        "--verbose", is_flag=True, default=False, help="Show TensorFlow's start-up log lines too (they are always in the log files)."
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


# Options that tpuctl.toml / the user config file may set under [launch], with their TOML types.
_CONFIG_TYPES: dict[str, type] = {
    "workers": int,
    "strategy": str,
    "model_dir": str,
    "max_restarts": int,
    "max_preemptions": int,
    "hang_timeout": float,
    "verbose": bool,
    "log_dir": str,
    "python": str,
    "start_timeout": float,
    "scope": bool,
    "strategy_builder": str,
    "keras": str,
    "ps": int,
    "communication": str,
    "simulate_devices": int,
    "tpu_timeout": float,
}
# ... each paired with its option's click type, so a file's value meets the same limits as the flag's.
CONFIG_KEYS: dict[str, type | tuple[type, Any]] = {
    name: (base, checker) if (checker := option_fields.param_type(LaunchOptions, name)) is not None else base
    for name, base in _CONFIG_TYPES.items()
}


@dataclass(frozen=True)
class Launch:
    """A checked launch: the job as its backend runs it, the runner, and how to report."""

    job: Job
    runner: Runner
    options: LaunchOptions
    run_id: str

    @property
    def log_dir(self) -> Path:
        if self.options.log_dir:
            return Path(self.options.log_dir)
        from platformdirs import user_state_path

        return user_state_path("tpuctl") / "runs" / self.run_id


def parse_env(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise TpuctlError(f"--env {value!r} is not NAME=VALUE", hint="e.g. --env TF_CPP_MIN_LOG_LEVEL=2")
        # tpuctl writes these per worker; letting --env set them would silently lose one of the two.
        if name == "TF_CONFIG" or name.startswith("TPUCTL_"):
            raise TpuctlError(f"--env cannot set {name}: tpuctl writes it for every worker")
        pairs.append((name, text))
    return tuple(pairs)


def parse_devices(text: str) -> tuple[str, ...]:
    devices = tuple(part.strip() for part in text.split(","))
    for device in devices:
        if not _DEVICE.match(device):
            raise TpuctlError(f"--devices: {device!r} is not a TensorFlow device", hint="e.g. GPU:0,GPU:1 or /gpu:0")
    if len(set(devices)) != len(devices):
        raise TpuctlError("--devices names a device twice")
    return devices


def check_strategy_options(
    strategy: str, workers: int, ps: int, communication: str, devices: tuple[str, ...], simulate: int, tpu_timeout: float | None
) -> None:
    """Options that only one strategy reads are refused elsewhere, instead of silently doing nothing."""
    if strategy == "parameter-server" and ps < 1:
        raise TpuctlError("--strategy parameter-server needs --ps N (at least one parameter server)")
    if ps and strategy != "parameter-server":
        raise TpuctlError("--ps is for --strategy parameter-server")
    if communication != "auto" and strategy not in ("auto", "multi-worker-mirrored"):
        raise TpuctlError("--communication is for --strategy multi-worker-mirrored")
    if devices and strategy != "mirrored":
        raise TpuctlError("--devices is for --strategy mirrored")
    if simulate and (workers > 1 or strategy not in ("auto", "mirrored")):
        raise TpuctlError(
            "--simulate-devices is for one worker under mirrored (or auto)",
            hint="MultiWorkerMirroredStrategy uses one device per worker and ignores virtual CPUs",
        )
    if tpu_timeout is not None and strategy not in ("auto", "tpu"):
        raise TpuctlError("--tpu-timeout is for --strategy tpu or auto (tpuctl's own TPU connection, and the script's)")


def check_rehearsal(job: Job, backend: str) -> None:
    """A rehearsal is one process here standing in for the whole slice: options that change that are refused."""
    if job.rehearse is None:
        return
    rehearsal_report.replicas_of(job.rehearse)
    clash = (
        "--backend " + backend if backend != "local"
        else "--workers" if job.workers > 1
        else "--simulate-devices" if job.simulate_devices
        else "--strategy " + job.strategy if job.strategy not in ("auto", "tpu")
        else "--tpu-timeout" if job.tpu_timeout is not None
        else "--strategy-builder script" if job.strategy_builder == "script"
        else None
    )
    if clash is not None:
        raise TpuctlError(
            f"--rehearse runs one local process with the TPU's replicas on virtual CPUs; it does not combine with {clash}",
            hint="a multi-host slice is rehearsed in the same one process (docs/rehearse.md)",
        )


def run_id(script: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(script).stem) or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{os.urandom(2).hex()}"


def _choose_backend(named: str, params: Mapping[str, Any], given: frozenset[str]) -> str:
    """The backend, with options that name their own backend (--hosts) choosing it when --backend is not given."""
    for candidate in BACKENDS:
        options = backend_module(candidate).Options
        implies = getattr(options, "implies_backend", None)
        if implies is not None and implies(params):
            if "backend" in given and named != candidate:
                raise TpuctlError(f"{options.source_of(params)} runs workers over {candidate}, not with --backend {named}")  # type: ignore[attr-defined]
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
        template = getattr(backend_module(names[0]).Options, "misplaced", None) if len(names) == 1 else None
        template = template or "{flag} is for --backend {backend} (this launch uses --backend {chosen})"
        raise TpuctlError(template.format(flag=flag, backend=" or ".join(names), chosen=chosen))


def prepare(script: str, script_args: tuple[str, ...], params: Mapping[str, Any], given: frozenset[str]) -> Launch:
    """Everything `tpuctl launch` checks before it starts or prints anything."""
    common = option_fields.from_params(LaunchOptions, params)
    chosen = _choose_backend(common.backend, params, given)
    _refuse_other_backends(chosen, given)
    module = backend_module(chosen)
    runner = module.runner(option_fields.from_params(module.Options, params))
    if common.tail_view and not common.model_dir:
        raise TpuctlError("--tail follows --model-dir: give one")
    job = Job(
        script=script,
        args=script_args,
        workers=common.workers,
        strategy=common.strategy,
        model_dir=common.model_dir,
        env=parse_env(common.env_values),
        python=common.python or "",
        scope=common.scope,
        strategy_builder=common.strategy_builder,
        keras=common.keras,
        max_restarts=common.max_restarts,
        max_preemptions=common.max_preemptions,
        hang_timeout=common.hang_timeout,
        start_timeout=common.start_timeout,
        ps=common.ps,
        communication=common.communication,
        devices=parse_devices(common.device_list) if common.device_list else (),
        simulate_devices=common.simulate_devices,
        tpu_timeout=common.tpu_timeout,
        rehearse=common.rehearse,
    )
    check_rehearsal(job, chosen)
    job = runner.prepare(job, given)
    check_strategy_options(job.strategy, job.workers, job.ps, job.communication, job.devices, job.simulate_devices, job.tpu_timeout)
    if job.processes > MAX_TASKS:  # --workers and --ps are capped each; a chief and the ps come on top
        raise TpuctlError(f"{job.processes} processes are more than the {MAX_TASKS} tasks a cluster may have", hint="lower --workers or --ps")
    return Launch(job=job, runner=runner, options=replace(common, backend=chosen), run_id=run_id(job.script))


def request(launch: Launch) -> Request:
    """What --dry-run prints, for every backend: the request a run would make, secret values hidden (docs/security.md)."""
    return launch.runner.dry_run(secret_values.for_display(launch.job), launch.run_id)


# In LOG_DIR, the launch that claimed it: made afresh and locked for the launch's life, left behind after it.
RUN_FILE = "run.json"
_EARLIER = (RUN_FILE, "outcome.json", "attempt-1")


def claim_log_dir(log_dir: Path, run_id: str) -> int:
    """Make LOG_DIR this launch's alone, or refuse in one line; the descriptor holds the claim.

    One folder, one launch: a second launch into the same folder (at once, or after the
    first ended) would interleave or replace its logs and outcome. The folder must be
    this user's and closed to other users' writes (a planted symlink would be followed
    otherwise); LOG_DIR/run.json, created only if absent (O_EXCL) and locked while the
    launch runs, decides a race and tells a running launch from a finished one.
    """
    hint = "pass a --log-dir of your own that other users cannot write"
    try:
        private_dir(log_dir, tighten=False, hint=hint)  # new folders 0700; a folder the user made keeps its mode
        earlier = [name for name in _EARLIER if os.path.lexists(log_dir / name)]
        if not earlier:
            record = {"run_id": run_id, "pid": os.getpid(), "started": time.time()}
            return hold_new(log_dir / RUN_FILE, json.dumps(record) + "\n")
    except FileExistsError:
        earlier = [RUN_FILE]
    except OSError as err:
        raise TpuctlError(f"cannot create log dir {log_dir}: {err.strerror or err}", hint=hint) from None
    raise _log_dir_taken(log_dir, earlier[0])


def _log_dir_taken(log_dir: Path, found: str) -> TpuctlError:
    fresh = "pass a new --log-dir (or leave it out: each launch then gets its own folder)"
    running = False
    with contextlib.suppress(OSError):
        running = found == RUN_FILE and is_held(log_dir / RUN_FILE)
    if running:
        return TpuctlError(f"--log-dir {log_dir} is in use by a running launch ({_run_of(log_dir)})", hint=fresh)
    return TpuctlError(f"--log-dir {log_dir} already holds a launch ({_run_of(log_dir) or found})", hint=f"{fresh}, or remove {log_dir} first")


def _run_of(log_dir: Path) -> str:
    """`RUN_ID, pid N` from a claimed folder's run.json, or "" where it cannot be read."""
    try:
        raw = json.loads(inputs.read_small_bytes(log_dir / RUN_FILE, "run record", limit=4096) or b"")
        return f"{raw['run_id']}, pid {int(raw['pid'])}"
    except (TpuctlError, ValueError, KeyError, TypeError):
        return ""


def execute(launch: Launch, stream: TextIO, notice: Callable[[str], None]) -> Outcome:
    """Run a prepared launch: worker lines to `stream`, tpuctl's own to `notice`; the outcome also lands in LOG_DIR/outcome.json.

    tpuctl's own words (notices, errors, which may relay kubectl's or an API's) never carry a secret value.
    """
    log_dir = launch.log_dir
    claim = claim_log_dir(log_dir, launch.run_id)
    job = launch.job
    context = RunContext(
        run_id=launch.run_id,
        log_dir=log_dir,
        writer=logs.LineWriter(stream),
        notice=lambda line: notice(secret_values.scrub(line, job)),
        colour=logs.use_colour(stream),
        tail_view=launch.options.tail_view,
        verbose=launch.options.verbose,
    )
    try:
        outcome = launch.runner.run(job, context)
        secret_values.scrub_outcome(outcome, job)
        record = outcome.to_json(backend=launch.runner.name, run_id=launch.run_id, log_dir=log_dir)
        try:
            write_private(log_dir / "outcome.json", json.dumps(record, indent=2) + "\n")
        except OSError as err:  # a full disk loses the record, never the exit status or the summary
            context.notice(f"warning: cannot write {log_dir / 'outcome.json'}: {err.strerror or err}")
    except TpuctlError as err:
        raise TpuctlError(
            secret_values.scrub(err.message, job), hint=err.hint and secret_values.scrub(err.hint, job), exit_code=err.exit_code
        ) from None
    finally:
        os.close(claim)
    return outcome

"""`tpuctl launch`: parse, build the Job, then dry-run it or hand it to the Supervisor."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import click

from tpuctl.cli.launch_kubernetes import kubernetes_options, launch_kubernetes, refuse_elsewhere
from tpuctl.cli.ssh_options import RemoteLaunch, ssh_backend, ssh_launch_options
from tpuctl.errors import TpuctlError
from tpuctl.launch import logs
from tpuctl.launch.plan import COMMUNICATIONS, KERAS_CHOICES, STRATEGIES, Job, Plan, build_plan
from tpuctl.launch.supervisor import Outcome

BACKENDS = ("local", "ssh", "kubernetes")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_START_TIMEOUT_S = 300.0
# Options that tpuctl.toml / the user config file may set under [launch].
CONFIG_KEYS: dict[str, type] = {
    "workers": int,
    "strategy": str,
    "model_dir": str,
    "max_restarts": int,
    "log_dir": str,
    "python": str,
    "start_timeout": float,
    "scope": bool,
    "keras": str,
    "ps": int,
    "communication": str,
    "simulate_devices": int,
    "tpu_timeout": float,
}
_DEVICE = re.compile(r"/?(job:[a-z]+/(replica:\d+/)?(task:\d+/)?)?(device:)?(CPU|GPU|TPU|cpu|gpu|tpu):\d+\Z")


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
        raise TpuctlError("--tpu-timeout is for --strategy tpu (or auto on a TPU VM)")


def _run_id(script: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(script).stem) or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{os.urandom(2).hex()}"


def _default_log_dir(run_id: str) -> Path:
    from platformdirs import user_state_path

    return user_state_path("tpuctl") / "runs" / run_id


def _print_plan(plan: Plan, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(plan.to_dict(), indent=2))
        return
    job = plan.job
    click.echo(f"plan {plan.run_id}: {job.workers} worker(s), strategy {job.strategy}, up to {job.attempts} attempt(s)")
    for worker in plan.workers:
        role = " (chief)" if worker.chief else ""
        click.echo(f"{worker.name}{role} on {worker.host}")
        click.echo(f"  command: {worker.command_line()}")
        for name, value in worker.env.items():
            click.echo(f"  env: {name}={shlex.quote(value)}")
    click.echo("(dry run: nothing started; ports are chosen afresh at launch)")


def _summarise(outcome: Outcome, log_dir: Path, workers: int, as_json: bool) -> None:
    failure = outcome.failure
    if as_json:
        record = {
            "exit_code": outcome.exit_code,
            "attempts": outcome.attempts,
            "elapsed_s": round(outcome.elapsed_s, 3),
            "interrupted": outcome.interrupted,
            "log_dir": str(log_dir),
            "failure": None
            if failure is None
            else {
                "worker": failure.worker,
                "host": failure.host,
                "status": failure.status,
                "runtime_s": round(failure.runtime_s, 3),
                "tail": failure.tail,
                "log": str(failure.log),
            },
        }
        click.echo(json.dumps(record))
        return
    say = lambda line: click.echo(f"tpuctl: {line}", err=True)  # noqa: E731
    if outcome.interrupted:
        say(f"interrupted; all workers stopped (exit {outcome.exit_code}); logs: {log_dir}")
    elif failure is None:
        say(f"{workers} worker(s) finished in {outcome.elapsed_s:.1f}s (attempt {outcome.attempts}); logs: {log_dir}")
    else:
        say(
            f"{failure.worker} on {failure.host} failed: {failure.status} after {failure.runtime_s:.1f}s "
            f"(attempt {outcome.attempts}); all workers stopped"
        )
        if failure.tail:
            say(f"last lines of {failure.worker}:")
            for line in failure.tail:
                click.echo(f"    {line}", err=True)
        say(f"full log: {failure.log}")


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
    short_help="Run a training script as N workers under a distribution strategy.",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes.")
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="auto",
    show_default=True,
    help="Distribution strategy each worker builds; auto: TPU if present, else multi-worker when --workers > 1.",
)
@click.option("--model-dir", help="Where the script keeps checkpoints and summaries (TPUCTL_MODEL_DIR).")
@click.option("--max-restarts", type=click.IntRange(min=0), default=0, show_default=True, help="Restart all workers this many times after a failure.")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Per-worker log files, one folder per attempt.  [default: tpuctl's state dir]")
@click.option("--env", "env_values", multiple=True, metavar="NAME=VALUE", help="Extra environment for every worker (repeatable).")
@click.option("--python", "python", metavar="PATH", help="Interpreter for the workers.  [default: this one]")
@click.option("--start-timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_START_TIMEOUT_S, show_default=True, help="Seconds every worker has to build its strategy.")
@click.option("--scope/--no-scope", default=True, show_default=True, help="Run the script inside strategy.scope().")
@click.option("--keras", type=click.Choice(KERAS_CHOICES), default="auto", show_default=True, help="auto: tf-keras for multi-worker runs, where Keras 3 fit is broken.")
@click.option("--ps", type=click.IntRange(min=0), default=0, show_default=True, help="Parameter-server tasks (with --strategy parameter-server; a chief coordinates).")
@click.option("--communication", type=click.Choice(COMMUNICATIONS), default="auto", show_default=True, help="MultiWorkerMirrored collectives implementation.")
@click.option("--devices", "device_list", metavar="DEV[,DEV]", help="Devices for --strategy mirrored, e.g. GPU:0,GPU:1.  [default: all]")
@click.option("--simulate-devices", type=click.IntRange(min=0), default=0, help="Split the CPU into N logical devices: MirroredStrategy with N replicas.")
@click.option("--tpu-timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds a worker may spend reaching its TPU (TPU_NAME; default 300).")
@click.option("--tail", "tail_view", is_flag=True, help="Show the scalars and checkpoints written to --model-dir while the workers run.")
@click.option("--dry-run", is_flag=True, help="Print every worker's command and environment; start nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable plan (with --dry-run) or outcome.")
@click.option("--backend", type=click.Choice(BACKENDS), default="local", show_default=True, help="Where workers run: processes here, hosts over SSH, or a Kubernetes TFJob/JobSet (--dry-run prints its YAML).")
@kubernetes_options
@ssh_launch_options
def launch(
    script: str,
    script_args: tuple[str, ...],
    workers: int,
    strategy: str,
    model_dir: str | None,
    max_restarts: int,
    log_dir: str | None,
    env_values: tuple[str, ...],
    python: str | None,
    start_timeout: float,
    scope: bool,
    keras: str,
    ps: int,
    communication: str,
    device_list: str | None,
    simulate_devices: int,
    tpu_timeout: float | None,
    tail_view: bool,
    dry_run: bool,
    as_json: bool,
    backend: str,
    remote: RemoteLaunch | None,
) -> None:
    """Run SCRIPT as N workers, each with its own TF_CONFIG, under a distribution strategy.

    tpuctl's options may come before or after SCRIPT; everything after `--` goes
    to the script untouched. The launch exits with the status of the first
    worker that failed, or 130 when interrupted.
    """
    backend = ssh_backend(click.get_current_context(), backend, remote)
    in_image = backend == "kubernetes"  # SCRIPT, --python and --model-dir are then paths inside the image
    if backend != "kubernetes":
        refuse_elsewhere(click.get_current_context(), backend)
    if not in_image and not os.path.isfile(script):
        raise TpuctlError(f"script not found: {script}")
    interpreter = python or ("python" if in_image else sys.executable)
    if python and not in_image and remote is None and shutil.which(python) is None:
        raise TpuctlError(f"--python {python}: no such interpreter, or not executable")
    if model_dir and "://" not in model_dir and not in_image:
        model_dir = os.path.abspath(model_dir)
    if tail_view and not model_dir:
        raise TpuctlError("--tail follows --model-dir: give one")
    devices = parse_devices(device_list) if device_list else ()
    if remote is not None:
        workers, script, model_dir = remote.resolve(script, workers, strategy, ps, model_dir)
    check_strategy_options(strategy, workers, ps, communication, devices, simulate_devices, tpu_timeout)
    job = Job(
        script=script,
        args=script_args,
        workers=workers,
        strategy=strategy,
        model_dir=model_dir,
        env=parse_env(env_values),
        python=interpreter,
        scope=scope,
        keras=keras,
        max_restarts=max_restarts,
        start_timeout=start_timeout,
        ps=ps,
        communication=communication,
        devices=devices,
        simulate_devices=simulate_devices,
        tpu_timeout=tpu_timeout,
    )
    run_id = _run_id(script)
    if backend == "kubernetes":
        log_path = Path(log_dir) if log_dir else _default_log_dir(run_id)
        sys.exit(launch_kubernetes(job, dry_run=dry_run, as_json=as_json, log_dir=log_path, tail_view=tail_view))
    if dry_run and remote is not None:
        _print_plan(remote.dry_run_plan(job, run_id), as_json)
        return
    if dry_run:
        from tpuctl.launch import ports

        held = ports.reserve(job.processes)
        try:
            plan = build_plan(job, held.addresses, run_id=run_id, attempt=1)
        finally:
            held.release()
        _print_plan(plan, as_json)
        return
    sys.exit(_launch(job, run_id, Path(log_dir) if log_dir else _default_log_dir(run_id), as_json, tail_view, remote))


def _launch(
    job: Job, run_id: str, log_dir: Path, as_json: bool, tail_view: bool = False, remote: RemoteLaunch | None = None
) -> int:
    from tpuctl.launch.local import LocalBackend
    from tpuctl.launch.supervisor import Supervisor

    log_stream = sys.stderr if as_json else sys.stdout
    if remote is not None and remote.cleanup:
        remote.free_tpus()
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TpuctlError(f"cannot create log dir {log_dir}: {err.strerror}", hint="pass --log-dir") from None
    if not as_json:
        where = f" on {remote.describe()}" if remote is not None else ""
        click.echo(f"tpuctl: launching {job.workers} worker(s) of {job.script}{where}; logs: {log_dir}", err=True)
    writer = logs.LineWriter(log_stream)
    follower = None
    if tail_view and job.model_dir:
        from tpuctl.watch.follower import Follower

        follower = Follower(job.model_dir, writer.write)
        follower.start()
    notice = lambda line: click.echo(f"tpuctl: {line}", err=True)  # noqa: E731
    supervisor = Supervisor(
        LocalBackend(log_dir) if remote is None else remote.backend(job, notice),
        writer=writer,
        notice=notice,
        log_dir=log_dir,
        colour=logs.use_colour(log_stream),
    )
    outcome = supervisor.run(job, run_id)
    if follower is not None:
        for line in follower.finish():
            click.echo(f"tpuctl: {line}", err=True)
    _summarise(outcome, log_dir, job.processes, as_json)
    return outcome.exit_code

"""What the user asked for: the script, its workers and how they train, whichever backend runs it.

Each field that the command line sets is declared here once, as an `option(...)`
(tpuctl/launch/option_fields.py): the flag, its default and help, whether a config
file's [launch] table may set it, and the TPUCTL_* variable that carries it to the
workers. The CLI, the config file and the worker environment are all read off these
declarations; a new option that reaches the workers is one field here (and its
variable's name in tpuctl/cluster/worker_contract.py, where the runtime reads it).

Plain data: built once from the command line (tpuctl/launch/prepare.py), shaped by
the backend (`Runner.prepare`), then turned into a Plan by the process engine or
into a manifest or a job body by a job backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import click

from tpuctl.cluster import jax_cluster
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.hosts import MAX_TASKS
from tpuctl.cluster.worker_contract import BUILDERS, COMMUNICATIONS, FRAMEWORK_CHOICES, KERAS_CHOICES, STRATEGIES
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.seconds import Seconds
from tpuctl.launch import option_fields
from tpuctl.launch.option_fields import option

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DEVICE = re.compile(r"/?(job:[a-z]+/(replica:\d+/)?(task:\d+/)?)?(device:)?(CPU|GPU|TPU|cpu|gpu|tpu):\d+\Z")
DEFAULT_START_TIMEOUT_S = 300.0
# A healthy run's first step comes seconds after start-up on CPUs and GPUs; 2 minutes of silence is when a person wonders.
DEFAULT_QUIET_NOTICE_S = 120.0
# Restarts past this are a typo; each one is a new attempt folder of logs.
MAX_RESTARTS = 1000
# Preemptions are routine on spot TPUs: a day's run may see several; each is a restart from the last checkpoint.
DEFAULT_MAX_PREEMPTIONS = 10
# Virtual CPUs for a rehearsal of one host's devices (a TPU host has at most 8 chips): far past any machine.
MAX_SIMULATED_DEVICES = 4096


def parse_env(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise TpuctlError(f"--env {value!r} is not NAME=VALUE", hint="e.g. --env TF_CPP_MIN_LOG_LEVEL=2")
        # tpuctl writes these per worker; letting --env set them would silently lose one of the two.
        if name == "TF_CONFIG" or name.startswith("TPUCTL_"):
            raise TpuctlError(f"--env cannot set {name}: tpuctl writes it for every worker")
        if name in jax_cluster.WRITTEN:
            raise TpuctlError(f"--env cannot set {name}: tpuctl writes it for every process of a JAX run (docs/jax.md)")
        pairs.append((name, text))
    return tuple(pairs)


def parse_devices(text: str | None) -> tuple[str, ...]:
    if text is None:  # not given
        return ()
    devices = tuple(part.strip() for part in text.split(","))
    for device in devices:
        if not _DEVICE.match(device):
            raise TpuctlError(f"--devices: {device!r} is not a TensorFlow device", hint="e.g. GPU:0,GPU:1 or /gpu:0")
    if len(set(devices)) != len(devices):
        raise TpuctlError("--devices names a device twice")
    return devices


def parse_profile(text: str | None) -> str | None:
    """--profile START-END, checked here so that a typo stops the launch rather than each worker."""
    if text is None:
        return None
    try:
        start, end = contract.parse_steps(text)
    except TpuctlError as err:
        raise TpuctlError(f"--profile {err.message}", hint="e.g. --profile 10-20: steps 10 to 20 of every worker") from None
    return f"{start}-{end}"


@dataclass(frozen=True)
class Job:
    script: str
    args: tuple[str, ...] = ()
    runtime_of: str | None = None  # where a rehearsal's --runtime came from where tpuctl chose it (a node's saved spec)
    left_out: tuple[str, ...] = ()  # the TPU's own flags a rehearsal standing in for a TPU launch ignores
    framework_found: str | None = None  # what made --framework auto choose (the script's line), said in the plan
    framework: str = option(
        "--framework",
        type=click.Choice(FRAMEWORK_CHOICES),
        default="auto",
        show_default=True,
        help="What runs the script. tensorflow: tpuctl builds the strategy and writes TF_CONFIG. jax: Keras 3 on JAX "
        "(or plain JAX): no TensorFlow is imported before the script, and each process is told its cluster in the "
        "variables keras.distribution.initialize() and jax.distributed.initialize() read (docs/jax.md). "
        "auto: jax where the script sets KERAS_BACKEND=jax, or imports jax and keras, or imports jax and not TensorFlow.",
        config=True,
        worker=contract.FRAMEWORK,
        field_default=contract.TENSORFLOW,
    )
    workers: int = option(
        "--workers",
        type=click.IntRange(1, MAX_TASKS),
        default=1,
        show_default=True,
        help=f"Worker processes (at most {MAX_TASKS}).",
        config=True,
    )
    strategy: str = option(
        "--strategy",
        type=click.Choice(STRATEGIES),
        default="auto",
        show_default=True,
        help="Distribution strategy each worker builds; auto: TPU if present, else multi-worker when --workers > 1.",
        config=True,
        worker=contract.STRATEGY,
        always=True,
    )
    model_dir: str | None = option("--model-dir", help="Where the script keeps checkpoints and summaries (TPUCTL_MODEL_DIR).", config=True)
    env: tuple[tuple[str, str], ...] = option(
        "--env",
        multiple=True,
        default=(),
        metavar="NAME=VALUE",
        help="Extra environment for every worker (repeatable).",
        parse=parse_env,
    )
    python: str = option(
        "--python",
        metavar="PATH",
        help="Interpreter for the workers.  "
        "[default: this one; on a TPU VM tpuctl made (--new-tpu, or --tpu on one that `tpuctl create` or a run made), its python3]",
        config=True,
        parse=lambda given: given or "",
        field_default="python3",
    )
    requirements: str | None = option(
        "--requirements",
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="Packages the script needs (a pip requirements file), installed on every host before any worker starts, in an "
        "environment of tpuctl's over the host's Python that keeps the image's TensorFlow (docs/environments.md).",
        config=True,
    )
    setup: str | None = option(
        "--setup",
        metavar="CMD",
        help="A shell command run once per host for each environment (apt packages, a data download), before any worker "
        "starts, within --start-timeout; its output goes to the run's logs.",
        config=True,
    )
    index_url: str | None = option(
        "--index-url",
        metavar="URL",
        help="The package index --requirements resolves from (pip's --index-url; its credentials are never printed).  "
        "[default: the hosts' pip configuration, else PyPI]",
        config=True,
    )
    replace_tensorflow: bool = option(
        "--replace-tensorflow",
        is_flag=True,
        default=False,
        help="Let --requirements or --setup install TensorFlow, libtpu or jaxlib on a TPU VM over the image's (for experts: "
        "a TensorFlow not built for the image's TPU finds no TPU).",
    )
    scope: bool = option(
        "--scope/--no-scope", default=True, show_default=True, help="Run the script inside strategy.scope().", config=True, worker=contract.SCOPE, always=True
    )
    keras: str = option(
        "--keras",
        type=click.Choice(KERAS_CHOICES),
        default="auto",
        show_default=True,
        help="auto: on TensorFlow 2.16+, tf-keras (TF_USE_LEGACY_KERAS=1) for multi-worker and parameter-server runs "
        "(also a script's own ParameterServerStrategy), whose tf.keras (Keras 3) cannot fit under those strategies, "
        "and for scripts written for tf-keras (legacy optimizers, metrics' reset_states(), hub.KerasLayer); otherwise Keras 3, whose "
        "custom loops on several replicas in one process get their variables built in the strategy's scope. "
        "TensorFlow 2.15 and older keep their own Keras 2. keras3: keep Keras 3. tf-keras: on any run.",
        config=True,
        worker=contract.KERAS,
        always=True,
    )
    max_restarts: int = option(
        "--max-restarts",
        type=click.IntRange(0, MAX_RESTARTS),
        default=0,
        show_default=True,
        help="Restart all workers this many times after a failure.",
        config=True,
    )
    max_preemptions: int = option(
        "--max-preemptions",
        type=click.IntRange(0, MAX_RESTARTS),
        default=DEFAULT_MAX_PREEMPTIONS,
        show_default=True,
        help="Restart all workers this many times after a preemption (a worker exiting 42), besides --max-restarts.",
        config=True,
    )
    hang_timeout: float | None = option(
        "--hang-timeout",
        type=Seconds(),
        metavar="S",
        help="Stop (or restart) when no worker printed and no new step reached --model-dir for S seconds; "
        "every worker's stacks are shown first (0 < S <= 604800).  [default: off]",
        config=True,
    )
    quiet_notice: float = option(
        "--quiet-notice",
        type=Seconds(),
        metavar="S",
        default=DEFAULT_QUIET_NOTICE_S,
        show_default=True,
        help="Before the first step, when no worker printed and no step reached --model-dir for S seconds, say once where "
        "each worker is (its innermost frame) and that `tpuctl stacks` shows more; nothing is stopped (0 < S <= 604800).",
        config=True,
    )
    start_timeout: float = option(
        "--start-timeout",
        type=Seconds(),
        metavar="S",
        default=DEFAULT_START_TIMEOUT_S,
        show_default=True,
        help="Seconds every worker has to build its strategy; where the script builds its own, its code before that counts too (0 < S <= 604800).",
        config=True,
    )
    preflight: bool = option(
        "--preflight/--no-preflight",
        default=True,
        show_default=True,
        help="Before any worker starts, check what alone would fail them all: TensorFlow in the workers' interpreter, "
        "a TPU TensorFlow cannot use (local and ssh workers; `tpuctl doctor` checks in full).",
        config=True,
    )
    ps: int = option(
        "--ps",
        type=click.IntRange(0, MAX_TASKS),
        default=0,
        show_default=True,
        help="Parameter-server tasks (with --strategy parameter-server; a chief coordinates).",
        config=True,
    )
    communication: str = option(
        "--communication",
        type=click.Choice(COMMUNICATIONS),
        default="auto",
        show_default=True,
        help="MultiWorkerMirrored collectives implementation.",
        config=True,
        worker=contract.COMMUNICATION,
    )
    devices: tuple[str, ...] = option(
        "--devices",
        metavar="DEV[,DEV]",
        help="Devices for --strategy mirrored, e.g. GPU:0,GPU:1.  [default: all]",
        parse=parse_devices,
        field_default=(),
        worker=contract.DEVICES,
    )
    simulate_devices: int = option(
        "--simulate-devices",
        type=click.IntRange(0, MAX_SIMULATED_DEVICES),
        default=0,
        help="Split the CPU into N logical devices: MirroredStrategy with N replicas.",
        config=True,
        worker=contract.SIMULATE_DEVICES,
    )
    tpu_timeout: float | None = option(
        "--tpu-timeout",
        type=Seconds(),
        metavar="S",
        help="Seconds a worker may spend reaching its TPU, tpuctl's connection or the script's own (TPU_NAME; 0 < S <= 604800; default 300).",
        config=True,
        worker=contract.TPU_TIMEOUT,
    )
    rehearse: str | None = option(
        "--rehearse",
        metavar="ACCELERATOR",
        help="Run a TPU script unchanged on this machine's CPU with that TPU's replicas (e.g. v2-8: 8) and report "
        "what the TPU would refuse (docs/rehearse.md).",
        worker=contract.REHEARSE,
    )
    runtime: str | None = option(
        "--runtime",
        metavar="IMAGE",
        help="With --rehearse: rehearse under that TPU VM image's TensorFlow (e.g. tpu-vm-tf-2.15.1-pjrt), in an environment "
        "with its CPU build (and --requirements) built once under tpuctl's cache; --python: the Python to build it from; "
        "`local`: this machine's TensorFlow as it is.  [default: the runtime-version setting where one is set, else the "
        "image `--new-tpu ACCELERATOR` would pick for this machine's TensorFlow] (docs/rehearse.md)",
    )
    profiler_server: bool = option(
        "--profiler-server/--no-profiler-server",
        default=False,
        show_default=True,
        help="Also start the profiler server (TensorFlow's; JAX's on a JAX run) in every local and ssh worker, on a port tpuctl reserves (local ones on "
        "127.0.0.1 only), for tools that capture through it (TensorBoard's Capture Profile). `tpuctl profile` does not use it.",
        config=True,
    )
    profile: str | None = option(
        "--profile",
        metavar="START-END",
        help="Profile steps START to END (counted from 0) on every worker by itself, into --model-dir (else the log dir) "
        "under plugins/profile/: Keras fit's steps; a custom loop marks its own (docs/profile.md).",
        parse=parse_profile,
        worker=contract.PROFILE_STEPS,
    )
    strategy_builder: str = option(
        "--strategy-builder",
        type=click.Choice(BUILDERS),
        default="auto",
        show_default=True,
        help="script: tpuctl builds no strategy and enters no scope; the script's own construction runs, arguments and all. "
        "tpuctl: built before the script, entered, and handed to the script's constructors. "
        "auto: script when its source constructs a tf.distribute strategy or uses graph mode or tf.estimator.",
        config=True,
        worker=contract.STRATEGY_BUILDER,
    )

    @property
    def attempts(self) -> int:
        return self.max_restarts + 1

    @property
    def parameter_server(self) -> bool:
        return self.strategy == contract.PARAMETER_SERVER

    @property
    def processes(self) -> int:
        """Parameter-server training adds a chief (the coordinator) and the ps tasks to the workers."""
        return self.workers + 1 + self.ps if self.parameter_server else self.workers


def worker_env(job: Job) -> dict[str, str]:
    """The options that reach the workers, as their TPUCTL_* variables; those at their default are left out
    (save the few the runtime always reads), so a plan shows only what was chosen."""
    env = {}
    for name, variable, always in option_fields.worker_fields(Job):
        value = getattr(job, name)
        if always or value != option_fields.default_of(Job, name):
            env[variable] = contract.encode(value)
    return env


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

"""The environment contract between a launch and its workers: every TPUCTL_* variable
a plan writes and a worker reads, named, written and read here and nowhere else.

Every worker imports this module before its script starts, so it imports
nothing beyond tpuctl.inputs.errors (the runtime's start-up cost is measured).
"""

from __future__ import annotations

from tpuctl.inputs.errors import TpuctlError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping

# The values STRATEGY, COMMUNICATION and KERAS take.
MULTI_WORKER = "multi-worker-mirrored"
PARAMETER_SERVER = "parameter-server"
STRATEGIES = ("auto", MULTI_WORKER, "mirrored", "tpu", "one-device", PARAMETER_SERVER, "none")
COMMUNICATIONS = ("auto", "ring", "nccl")
KERAS_CHOICES = ("auto", "tf-keras", "keras3")
# Who builds the strategy: the script (its own construction, arguments and all; tpuctl builds none and
# enters no scope), tpuctl (built before the script and handed to its constructors), or auto: the
# script where its source constructs a tf.distribute strategy or uses graph mode / tf.estimator.
BUILDERS = ("auto", "script", "tpuctl")
# What runs the script: TensorFlow (tpuctl builds its strategy, writes TF_CONFIG) or Keras 3 / JAX (the script's own
# keras.distribution or jax.distributed, told its cluster in the variables they read: tpuctl/cluster/jax_cluster.py).
TENSORFLOW = "tensorflow"
JAX = "jax"
FRAMEWORK_CHOICES = (TENSORFLOW, JAX, "auto")

# A worker that ends with this status was preempted (TensorFlow's PreemptionCheckpointHandler exits
# so after saving on SIGTERM off Google Cloud; tpuctl.runtime.preemption_handler arranges it where
# TF would not): the launch restarts it from the last checkpoint, up to --max-preemptions, instead
# of counting a failure.
PREEMPTED_EXIT_CODE = 42

# Set per worker by the launch (plan.py).
RUN_ID = "TPUCTL_RUN_ID"
ATTEMPT = "TPUCTL_ATTEMPT"
TASK_TYPE = "TPUCTL_TASK_TYPE"
WORKER_INDEX = "TPUCTL_WORKER_INDEX"
NUM_WORKERS = "TPUCTL_NUM_WORKERS"
MODEL_DIR = "TPUCTL_MODEL_DIR"
# How the worker builds its strategy (read by the runtime).
STRATEGY = "TPUCTL_STRATEGY"
FRAMEWORK = "TPUCTL_FRAMEWORK"
SCOPE = "TPUCTL_SCOPE"
KERAS = "TPUCTL_KERAS"
STRATEGY_BUILDER = "TPUCTL_STRATEGY_BUILDER"
COMMUNICATION = "TPUCTL_COMMUNICATION"
DEVICES = "TPUCTL_DEVICES"
SIMULATE_DEVICES = "TPUCTL_SIMULATE_DEVICES"
TPU_TIMEOUT = "TPUCTL_TPU_TIMEOUT"
REHEARSE = "TPUCTL_REHEARSE"  # a TPU type (v2-8): run the script on CPU with that TPU's replicas (runtime/rehearsal/)
REHEARSAL_REPORT = "TPUCTL_REHEARSAL_REPORT"  # where the rehearsing worker writes its report (JSON) as it ends
# "0": the worker's runtime sends no timeline events (steps, checkpoints: runtime/timeline/hooks.py); set by whoever
# runs the launch (benchmarks/timeline_overhead.py measures the runtime's cost with it), never by a plan.
TIMELINE = "TPUCTL_TIMELINE"
# File descriptors a process backend passes (local launcher, ssh agent, devices probe).
CONTROL_FD = "TPUCTL_CONTROL_FD"  # socket: "ready" goes out on it; its EOF means the launcher is gone
RESERVED_FD = "TPUCTL_RESERVED_FD"  # the bound socket holding the worker's port until TF takes it
WATCHDOG_FD = "TPUCTL_WATCHDOG_FD"  # pipe of `tpuctl devices`: EOF means stop
# Read by the bind shim preloaded into local workers (tpuctl/launch/bindshim), not by Python:
# the ports whose wildcard bind() it turns into a loopback bind.
LOOPBACK_PORTS = "TPUCTL_LOOPBACK_PORTS"
# The worker's profiler server (`tpuctl profile` captures from it): the port it listens on (absent: no server),
# held until then by the bound socket PROFILER_FD names, as RESERVED_FD holds the TensorFlow server's port.
PROFILER_PORT = "TPUCTL_PROFILER_PORT"
PROFILER_FD = "TPUCTL_PROFILER_FD"
# `launch --profile START-END`: the steps (inclusive, counted from 0 across epochs) every worker profiles by itself,
# into PROFILE_DIR (the run's model dir, else its log dir; where it is unset, the model dir).
PROFILE_STEPS = "TPUCTL_PROFILE_STEPS"
PROFILE_DIR = "TPUCTL_PROFILE_DIR"
# `tpuctl profile`: the launcher asks each worker's reaper on its control channel ("profile SESSION MILLISECONDS"),
# the reaper hands that on to the worker (profile_line), which answers on the channel ("profile {json}": taken, with
# its file, or not_taken, with why). A capture begins at a step boundary within PROFILE_BEGIN_S of the reaper's
# receipt, and its file is written within PROFILE_SAVE_S of its end; past that nobody waits for it.
PROFILE_BEGIN_S = 20.0
PROFILE_SAVE_S = 120.0
PROFILE_MAX_MS = 300_000
# Digits enough for any step count or port; more is a typo, or input meant to make int() slow.
_MAX_DIGITS = 9


def encode(value: object) -> str:
    """A launch option's value as its variable holds it (tpuctl/launch/job.py's worker_env); the readers below undo it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


def strategy(environ: Mapping[str, str]) -> str:
    return environ.get(STRATEGY, "auto")


def num_workers(environ: Mapping[str, str]) -> int:
    """The processes the launch started; 1 where the variable is absent or not a count (a worker started by hand)."""
    raw = environ.get(NUM_WORKERS, "1")
    return int(raw) if raw.isascii() and raw.isdigit() and 0 < len(raw) <= 6 else 1


def framework(environ: Mapping[str, str]) -> str:
    """The launcher always resolves `auto` before a worker starts; a worker started by hand runs TensorFlow's way."""
    chosen = environ.get(FRAMEWORK, "").strip() or TENSORFLOW
    if chosen not in (TENSORFLOW, JAX):
        raise TpuctlError(f"{FRAMEWORK}={chosen[:40]!r} is not one of {TENSORFLOW}, {JAX}")
    return chosen


def scope(environ: Mapping[str, str]) -> bool:
    return environ.get(SCOPE, "1") != "0"


def keras(environ: Mapping[str, str]) -> str:
    return environ.get(KERAS, "auto")


def timeline(environ: Mapping[str, str]) -> bool:
    return environ.get(TIMELINE, "1") != "0"


def strategy_builder(environ: Mapping[str, str]) -> str:
    chosen = environ.get(STRATEGY_BUILDER, "").strip() or "auto"
    if chosen not in BUILDERS:
        raise TpuctlError(f"{STRATEGY_BUILDER}={chosen[:40]!r} is not one of {', '.join(BUILDERS)}")
    return chosen


def communication(environ: Mapping[str, str]) -> str:
    return environ.get(COMMUNICATION, "auto")


def devices(environ: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(d for d in environ.get(DEVICES, "").split(",") if d)


def simulate_devices(environ: Mapping[str, str]) -> int:
    # ASCII digits only, and few: str.isdigit() accepts "²", which int() refuses with a traceback.
    raw = environ.get(SIMULATE_DEVICES, "").strip() or "0"
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6):
        raise TpuctlError(f"{SIMULATE_DEVICES}={raw[:40]!r} is not a whole number")
    return int(raw)


def tpu_timeout(environ: Mapping[str, str]) -> float | None:
    # nan and inf parse as floats but are no timeout: nan never expires, inf overflows a deadline.
    raw = environ.get(TPU_TIMEOUT, "")
    try:
        seconds = float(raw) if raw else None
    except ValueError:
        seconds = -1.0
    if seconds is not None and not 0 < seconds < 1e9:
        raise TpuctlError(f"{TPU_TIMEOUT}={raw[:40]!r} is not a number of seconds")
    return seconds


def rehearse(environ: Mapping[str, str]) -> str | None:
    return environ.get(REHEARSE) or None


def model_dir(environ: Mapping[str, str]) -> str | None:
    return environ.get(MODEL_DIR) or None


def profiler_port(environ: Mapping[str, str]) -> int | None:
    raw = environ.get(PROFILER_PORT, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 5 and 0 < int(raw) < 65536):
        raise TpuctlError(f"{PROFILER_PORT}={raw[:40]!r} is not a port")
    return int(raw)


def parse_steps(text: str) -> tuple[int, int]:
    """START-END as `launch --profile` and PROFILE_STEPS spell it: two whole numbers, START <= END."""
    start, sep, end = text.strip().partition("-")
    if not (sep and all(part.isascii() and part.isdigit() and len(part) <= _MAX_DIGITS for part in (start, end))):
        raise TpuctlError(f"{text[:40]!r} is not START-END (two step numbers, e.g. 10-20)")
    if int(start) > int(end):
        raise TpuctlError(f"{text[:40]!r}: the first step comes after the last")
    return int(start), int(end)


def profile(environ: Mapping[str, str]) -> str | None:
    return environ.get(PROFILE_STEPS) or None


def profile_steps(environ: Mapping[str, str]) -> tuple[int, int] | None:
    raw = profile(environ)
    if raw is None:
        return None
    try:
        return parse_steps(raw)
    except TpuctlError as err:
        raise TpuctlError(f"{PROFILE_STEPS}: {err.message}") from None


def profile_dir(environ: Mapping[str, str]) -> str | None:
    return environ.get(PROFILE_DIR) or model_dir(environ)


def profile_session(name: str) -> bool:
    """A capture's session folder name as the launcher makes it (letters, digits, `_`, `-`, `.`; not `.` first): one
    path component, one word on the control channel."""
    return 0 < len(name) <= 100 and name.isascii() and name[0] != "." and all(c.isalnum() or c in "_-." for c in name)


def profile_line(line: bytes) -> tuple[str, int] | None:
    """"SESSION MILLISECONDS" as the launcher sends it after "profile "; None for anything else."""
    words = line.decode("ascii", "replace").split()
    if len(words) != 2 or not profile_session(words[0]) or not (words[1].isdigit() and len(words[1]) <= _MAX_DIGITS):
        return None
    milliseconds = int(words[1])
    return (words[0], milliseconds) if 0 < milliseconds <= PROFILE_MAX_MS else None

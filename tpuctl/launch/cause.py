"""Why a launch failed, in one line for a person: the first failure, classified.

The summary shows a status and last lines; this says what they mean (a traceback's last line is
the error; TF's UnavailableError on one worker means *another* died; a SIGKILL nobody sent is
usually the OOM killer), once for every backend, from what all have: an exit status and
`Failure.tail` (the last `logs.TAIL_LINES` display lines). It never raises: output is any text.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuctl.cluster.worker_contract import PREEMPTED_EXIT_CODE
from tpuctl.endings import Kind, exit_words, signal_name
from tpuctl.launch.console.tracebacks import ANSI, NAME_ENDS, split_exception

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tpuctl.safety.stack_view import Comparison

# Why, more finely than how it ended (tpuctl/endings.py); a preemption and a hang are named as the ending names them.
EXCEPTION, SIGNAL, OOM, PREEMPTED = "exception", "signal", "oom-suspected", Kind.PREEMPTED.value
PEER_LOST, NEVER_STARTED, HANG, EXIT = "peer-lost", "never-started", Kind.HANG.value, "exit"
KINDS = (EXCEPTION, SIGNAL, OOM, PREEMPTED, PEER_LOST, NEVER_STARTED, HANG, EXIT)
DETAIL_CHARS = 160  # of a quoted message: the cause stays one line

# What TensorFlow prints when another task died, froze or cannot be reached, most telling first, and
# how to say it: texts in TF 2.21's own binaries and their sources (xla/tsl coordination_service.cc,
# core/common_runtime), gRPC's as TF issues quote them. gRPC's words (True) count only beside TF's
# distributed words: a cloud API client says them too. "Collective ops is aborted by:" is left out
# on purpose: TF wraps every collective abort in it, a local NCCL error too; the reason decides.
_PEER_SIGNS = (
    ("stopped sending heartbeats", "a task stopped sending heartbeats", False),  # "The following tasks are unhealthy (stopped sending heartbeats):"
    ("heartbeat timeout", "a task missed its heartbeats", False),  # "Task /job:worker/replica:0/task:1 heartbeat timeout. This indicates ..."
    ("task has disconnected", "a task disconnected during a barrier", False),  # "Barrier failed because a task has disconnected."
    ("Failed to send RPC to coordination service", "the coordination service (run by the first worker) is unreachable", False),
    ("different incarnation", "a task restarted under the others", False),  # "... tried to connect with a different incarnation."
    ("Collective has timed out", "a collective timed out", False),  # "... during execution." (CommunicationOptions(timeout_seconds=...))
    ("Socket closed", "a peer's connection closed", True),
    ("Connection reset by peer", "a peer reset its connection", True),
    ("failed to connect to all addresses", "a peer cannot be reached", True),
    ("Deadline Exceeded", "a call to a peer timed out", True),
)
_LOST_CODES = re.compile(r"\b(?:UnavailableError|DeadlineExceededError|UNAVAILABLE:|DEADLINE_EXCEEDED:)")
_DISTRIBUTED = ("Collective", "/job:", "coordination")  # where those codes are about other tasks, not a file system
_LOOK = "another worker died, froze or was preempted, and its own log holds the root cause"
_TASK = re.compile(r"/job:([\w-]+)/(?:replica:\d+/)?task:(\d+)")
_TF_PREFIX = "tensorflow.python.framework.errors_impl."
_TF_MODULE = re.compile(r"tensorflow\.python\.(?:\w+\.)+(?=\w+: )")  # errors_impl, tb_summary: TF's private paths say nothing
_TF_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_TF_DETECTED = re.compile(r"Detected at node (\S+) defined at")  # TF's graph-execution errors name the node twice
_TF_NODE_LINE = re.compile(r"\s*\[\[\{\{node ([^}]+)\}\}\]\]")  # "\t [[{{node Gather}}]] [Op:__inference_lookup_27]"
_TF_NOT_MESSAGE = re.compile(r"\d+ root error\(s\) found\.|\d+ successful operations\.|\d+ derived errors ignored\.|\[")
_TF_CODE = re.compile(r"\(\d+\) [A-Z_]+:\s+")  # "  (0) INVALID_ARGUMENT:  You must feed ..." of several root errors
_TPUCTL_ERROR = "tpuctl: error: "  # what the worker's runtime says before it exits (tpuctl/runtime/bootstrap.py)
NO_TPU = "no TPU here: try --rehearse v2-8 (a rehearsal on this machine's CPU) or --tpu NAME"
# Errors whose fix is known, matched in the last lines of a failed worker; each seen in a real run
# (tests/data/tf_console/, the scripts that made them in its scripts/ folder).
_FIXES = (
    (
        re.compile(r"You must feed a value for placeholder tensor 'cond/"),
        "Keras 3 creates the optimizer's variables inside the first strategy.run, which fails on several replicas "
        "(keras#19246): build the optimizer before the first step: optimizer.build(model.trainable_variables) "
        "in strategy.scope(), or --keras tf-keras",
    ),
    (re.compile(r"keras\.optimizers\.legacy`? is not supported"), "the legacy optimizers are tf-keras': --keras tf-keras (pip install tf-keras)"),
    (
        # Sequential refuses the layer; in a functional model the layer is handed a Keras 3 KerasTensor it cannot take
        re.compile(
            r"can be added to a Sequential model\. Received: <tensorflow_hub\.keras_layer\.KerasLayer"
            r"|(?s:when calling layer '[^'\n]*' \(type KerasLayer\).*Received args: \(<KerasTensor )"
        ),
        "tensorflow_hub's KerasLayer is a tf-keras layer, which a Keras 3 model refuses: --keras tf-keras or auto (pip install tf-keras)",
    ),
    (re.compile(r"TBNotInstalledError"), "pip install tensorboard (TensorFlow 2.21 does not bring it; tf.summary and Keras' TensorBoard callback need it)"),
    (re.compile(r"TPUs not found in the cluster|Please provide a TPU Name"), NO_TPU),
    (
        re.compile(r"Received a label value of -?\d+ which is outside the valid range"),
        "labels must be class numbers below the last layer's units (sparse categorical loss)",
    ),
)
_SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}
_CRASHES = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"}
_OOM_SUSPECTED = (
    "killed by SIGKILL, which tpuctl did not send: OOM-killer suspected "
    "(the kernel's OOM killer is the usual sender; check `dmesg` or `journalctl -k` on its host)"
)


@dataclass(frozen=True)
class Cause:
    """What ended the launch: a kind a program can test (one of KINDS) and one line for a person."""

    kind: str
    summary: str


_REAPER_KILLED = (
    "its reaper was killed ({}), not by tpuctl: the small process tpuctl keeps above each worker to stop "
    "everything it starts (the worker itself, e.g. after os.setsid(), or another `kill`); "
    "the worker and what it started were killed with it"
)


def classify(
    returncode: int, tail: Sequence[str], *, killed_by_tpuctl: bool = False, oom_reported: bool = False, reaper_killed: bool = False
) -> Cause:
    """One worker's failure from its status (negative: killed by that signal) and its last lines.

    `killed_by_tpuctl`: tpuctl itself sent the signal. `oom_reported`: the platform says the OOM
    killer ended it (Kubernetes' reason OOMKilled), where a status alone can only suggest it.
    `reaper_killed`: the worker's reaper (tpuctl/safety/reaper.py) was itself killed, without ending as
    it does, so the status is the reaper's: not a worker the OOM killer chose.
    """
    lines = [ANSI.sub("", str(line)).rstrip() for line in tail]
    if oom_reported:
        return Cause(OOM, "killed by the OOM killer (Kubernetes reports OOMKilled): it went over its memory limit")
    if reaper_killed and returncode < 0:
        return Cause(SIGNAL, _REAPER_KILLED.format(signal_name(-returncode)))
    if returncode == PREEMPTED_EXIT_CODE:
        return Cause(PREEMPTED, f"preempted ({exit_words(returncode)}): restarted from the last checkpoint while --max-preemptions allows")
    if returncode < 0:
        return _signal(signal_name(-returncode), lines, killed_by_tpuctl)
    at = _exception_at(lines)
    peer = _peer_lost(lines[at:] if at is not None else lines)  # a generic exception beats older peer noise
    if peer is not None:
        return peer
    if at is not None:
        return Cause(EXCEPTION, f"uncaught Python exception: {_exception_text(lines, at)}{_fix(lines[at:])}")
    said = [x.removeprefix(_TPUCTL_ERROR) for x in lines if x.startswith(_TPUCTL_ERROR)]
    if said:
        return Cause(EXIT, f"{exit_words(returncode)}: {_clip(said[-1])}")
    shell = f" (128+{returncode - 128}: how a shell or container reports {_SIGNAL_NAMES[returncode - 128]})" if returncode - 128 in _SIGNAL_NAMES else ""
    return Cause(EXIT, f"{exit_words(returncode)}{shell}; no Python exception in its last lines")


def never_started(workers: list[str], seconds: float) -> Cause:
    """Workers that did not report ready in time (meanwhile the others wait in TF's start-up barrier)."""
    who = ", ".join(workers) if workers else "the workers"
    return Cause(NEVER_STARTED, f"never started: {who} did not start within {seconds:g}s (--start-timeout)")


def never_joined(workers: list[str], seconds: float) -> Cause:
    """JAX processes that did not reach jax.distributed.initialize() while the others waited there (launch/process/joins.py)."""
    return Cause(
        NEVER_STARTED,
        f"never joined: {', '.join(workers)} did not reach jax.distributed.initialize() within {seconds:g}s of the first "
        "process waiting there (every process of a JAX cluster, every host of a TPU slice, must run the script at once)",
    )


def stopped(workers: list[str]) -> Cause:
    """Peers that are stopped (SIGSTOP, Ctrl-Z): they stopped sending heartbeats and print nothing, so their logs say nothing."""
    who, verb = " and ".join(workers), "is" if len(workers) == 1 else "are"
    return Cause(
        PEER_LOST,
        f"peer lost: {who} {verb} stopped (process state T: SIGSTOP or Ctrl-Z) and stopped answering TensorFlow's heartbeats; "
        "its log says nothing after that (`kill -CONT` resumes a stopped process)",
    )


def hang(seconds: float, workers: Comparison) -> Cause:
    """No progress for `seconds`; `workers`: the stacks view's own comparison (stack_view.compare), so that
    the cause line never says other than the view above it."""
    off = list(workers.off)
    if off:
        where = f"{', '.join(off)} {'differs' if len(off) == 1 else 'differ'} from the others: look there first"
    elif workers.places > 1:
        where = f"the workers are at {workers.places} different places and no majority shows which is off: compare their stacks"
    elif not workers.readable:
        where = "no worker's stack could be read, so nothing shows where they wait"
    elif workers.workers == 1:
        where = "its stack shows where it waits"
    elif workers.readable < workers.workers:
        alike = " and they look alike" if workers.readable > 1 else ""
        where = f"only {workers.readable} of {workers.workers} workers' stacks could be read{alike}"
    else:
        where = "all workers look alike"
    return Cause(HANG, f"hang: no progress for {seconds:g}s; {where}")


def _signal(name: str, lines: list[str], killed_by_tpuctl: bool) -> Cause:
    if killed_by_tpuctl:
        return Cause(SIGNAL, f"killed by {name}, sent by tpuctl")
    if name == "SIGKILL":
        return Cause(OOM, _OOM_SUSPECTED)
    if name == "SIGABRT":  # TF aborts itself (LOG(FATAL)) after some peer errors: the error is the news
        return _peer_lost(lines) or Cause(SIGNAL, "killed by SIGABRT: it aborted itself (a failed check in native code; see its last lines)")
    if name in _CRASHES:
        return Cause(SIGNAL, f"killed by {name}: it crashed in native code (TensorFlow, a driver or an extension)")
    return Cause(SIGNAL, f"killed by {name}, which tpuctl did not send (a scheduler, a preemption, a shutdown or a `kill`)")


def _fix(lines: list[str]) -> str:
    text = "\n".join(lines)
    return next((f"; {fix}" for sign, fix in _FIXES if sign.search(text)), "")


def _exception_at(lines: list[str]) -> int | None:
    """Where the last `SomeError: message` line of a traceback is: a name that says so, or any
    dotted name with a message right after a frame line (a custom exception)."""
    for at in range(len(lines) - 1, -1, -1):
        name, _ = split_exception(lines[at])
        after_frame = at > 0 and lines[at - 1].startswith("  ") and ": " in lines[at]
        if name is not None and (name.endswith(NAME_ENDS) or after_frame):
            return at
    return None


def _exception_text(lines: list[str], at: int) -> str:
    """The exception line without TF's module path; where its message only announces what follows
    (TF's "Graph execution error:", autograph's "in user code:"), what follows."""
    line = _TF_NODE.sub("", _TF_MODULE.sub("", lines[at], count=1))
    if not line.endswith(":"):
        return _clip(line)
    rest = lines[at + 1 :]
    nested = [s for s in (x.strip() for x in rest) if split_exception(s)[1]]  # autograph's inner error
    if nested:
        return _clip(_TF_NODE.sub("", nested[-1]))
    # TF's graph-execution error: frames of where the node was defined, then what went wrong.
    node = next((m[1] for x in rest if (m := _TF_DETECTED.match(x) or _TF_NODE_LINE.match(x))), None)
    message = next((x for x in map(_tf_message, rest) if x), None)
    if message is None:
        return _clip(line)
    if node is None:
        return _clip(f"{line} {message}")
    name = line.partition(": ")[0]
    return _clip(f"{name} at node {node.rsplit('/', 1)[-1]}: {message}")


def _tf_message(line: str) -> str | None:
    """A line of TF's error text that says what went wrong, without its status code; None for a
    frame, a node or a count."""
    text = line.strip()
    if _TF_CODE.match(text):  # one of several root errors, indented
        return _TF_CODE.sub("", text, count=1)
    if not text or line[0].isspace() or line.startswith("Detected at node") or _TF_NOT_MESSAGE.match(text):
        return None
    return text


def _peer_lost(lines: list[str]) -> Cause | None:
    """TF's words for a peer that died, froze or cannot be reached, anywhere in these lines."""
    text = "\n".join(lines)
    distributed = any(word in text for word in _DISTRIBUTED)
    for sign, phrase, grpc in _PEER_SIGNS:
        if sign in text and (not grpc or distributed or _LOST_CODES.search(text)):
            tasks = _stale_tasks(lines) if "heartbeat" in sign else []
            if tasks:  # TF named them: say who; the quote would add nothing
                who, whose = " and ".join(tasks), "its" if len(tasks) == 1 else "their"
                return Cause(PEER_LOST, f"peer lost: {who} {phrase.removeprefix('a task ')}; {whose} own log holds the root cause")
            quote = next(x for x in lines if sign in x).strip().removeprefix(_TF_PREFIX)
            return Cause(PEER_LOST, f"peer lost: {phrase} ({_clip(quote)}); {_LOOK}")
    if distributed and _LOST_CODES.search(text):
        at = _exception_at(lines)
        quote = _exception_text(lines, at) if at is not None else _clip(next(x for x in lines if _LOST_CODES.search(x)))
        return Cause(PEER_LOST, f"peer lost: TensorFlow lost contact with another task ({quote}); {_LOOK}")
    return None


def _stale_tasks(lines: list[str]) -> list[str]:
    """The tasks a heartbeat error names, as tpuctl names workers (`worker:1`)."""
    found: list[str] = []
    for at, line in enumerate(lines):
        if "heartbeat timeout" in line:  # "Task /job:worker/replica:0/task:1 heartbeat timeout"
            found += [f"{job}:{task}" for job, task in _TASK.findall(line.partition(" heartbeat timeout")[0])[-1:]]
        elif "stopped sending heartbeats" in line:  # then one task a line
            for listed in lines[at + 1 :]:
                if not (match := _TASK.fullmatch(listed.strip())):
                    break
                found.append(f"{match[1]}:{match[2]}")
    return list(dict.fromkeys(found))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"

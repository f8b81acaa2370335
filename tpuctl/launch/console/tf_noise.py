"""TensorFlow's C++ start-up chatter, folded out of the console (it stays in the log files).

Every TensorFlow process prints a dozen lines from its C++ core before the user's script says
anything: oneDNN, the CUDA stubs on a machine without a GPU, the CPU feature guard, the
coordination service greeting every peer. Multiplied by the workers they bury the lines the user
launched the run to see. The rule, meant to be simple enough to predict:

- an absl / TF C++ INFO line (``I0000 00:00:1763… 123 file.cc:45] …`` or the older
  ``2025-01-01 12:00:00.123456: I tensorflow/….cc:45] …``) is folded;
- a C++ WARNING line is folded only when it is on `_KNOWN_WARNINGS`: start-up chatter that asks
  nothing of the user;
- the un-prefixed lines that continue a folded line fold with it, while they keep the shape it
  announced (a list of tasks, a protobuf message in text format);
- a C++ ERROR line shows, unless it is on `_KNOWN_ERRORS`: the few errors TensorFlow prints on
  every start of a healthy run (see there); FATAL lines always show;
- everything else shows: Python output (print, logging, warnings, tracebacks, Keras progress,
  absl-py lines, whose source file is a ``.py``), tpuctl's own ``tpuctl: …`` lines, and any line
  this module is unsure about.

``--verbose`` turns folding off. The pumps still write every line to the worker's log file.

A JAX run (Keras 3 on JAX) prints the same absl-prefixed C++ lines from JAX's XLA runtime (jaxlib is built on the
same absl and XLA code as TensorFlow), besides TensorFlow's own where the script loads it (Keras' TensorBoard
callback does): the rule is the same, and the run's end names them as what they are there, C++ lines of XLA and
absl, not TensorFlow's.
"""

from __future__ import annotations

import re
import threading

from tpuctl.cluster import worker_contract as contract

# absl's C++ prefix: severity, MMDD, time, thread id, file:line]. Before absl::InitializeLog() TF
# prints a zero date and the Unix time in seconds ("I0000 00:00:1763450000.123456   4242 port.cc:153]").
_ABSL = re.compile(r"([IWEF])\d{4} \d+:\d+:\d+(?:\.\d+)?\s+\d+ ([^\s\]]+):\d+\] ?(.*)")
# TensorFlow's own prefix before 2.16 ("2025-01-01 12:00:00.123456: I tensorflow/core/….cc:182] …").
_TF_OLD = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?: ([IWEF]) ([^\s\]]+):\d+\] ?(.*)")
# Only a C++ source counts: absl-py writes the very same prefix for Python code (train.py:12]).
_CPP_SOURCE = re.compile(r"\.(?:cc|cpp|cxx|c|h|hh|hpp|cu|inc)$")

# Warnings with nothing for the user to do: said at every start or by Keras' own input pipeline.
_KNOWN_WARNINGS = re.compile(
    "|".join(
        (
            # tf.data's note on every generator-backed dataset, including those Keras and the
            # distribution strategies build internally around an ordinary dataset.
            r"Input of GeneratorDatasetOp::Dataset will not be optimized",
            # The normal end of an iterator at the end of an epoch, logged as if it went wrong.
            r"Local rendezvous is aborting with status: OUT_OF_RANGE: End of sequence",
            # Linking chatter inside the TF wheel (tensorflow/tensorflow#62075 and kin).
            r"computation placer already registered",
            r"TF-TRT Warning: Could not find TensorRT",
            # Grappler explaining an optimisation it skipped.
            r"Skipping loop optimization for Merge node with control input",
        )
    )
)

# Errors a healthy run prints at every start: not the user's to fix, and each repeats what the
# strategy line ("tpuctl: worker:0: …, devices: …") already says.
_KNOWN_ERRORS = re.compile(
    "|".join(
        (
            # The CUDA plugins registering twice inside one TF wheel (tensorflow/tensorflow#62075).
            r"Unable to register cu(?:DNN|FFT|BLAS) factory: Attempting to register factory for plugin \S+ when one has already been registered",
            # cuInit through the stub when no CUDA driver is installed: status 303
            # (CUDA_ERROR_SHARED_OBJECT_INIT_FAILED) is the "no libcuda here" case only; a GPU whose
            # driver is present but broken fails with another status, and that line shows.
            r"failed call to cuInit: .*\(303\)$",
        )
    )
)

# Lines that are noise without any prefix: absl's and glog's first-line notice.
_BARE_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|WARNING: Logging before InitGoogleLogging\(\) is written to STDERR"
    # The CPU feature guard's second line (its first is an INFO line).
    r"|To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\."
)

# Folded lines that announce un-prefixed follow-up lines, each with the shape those take: the
# coordination service's straggler list (one task a line), and a protobuf message dumped with
# DebugString() after a label (TFRT's "SessionOptions: " + a ConfigProto, "... with config: ", some
# 100 lines of protobuf text format: `field: value`, `message {`, `}`, indented by two). Protobuf 30+
# starts that dump with a marker, a random goo.gle/debug* link and random whitespace, alone on the
# label's line: every parameter-server task's eager_service_impl.cc prints "SessionOptions: goo.gle/debugproto"
# and its ConfigProto below (tests/data/tf_console/ps_*_session_options.log).
_FOLLOW_UPS = (
    (re.compile(r"Example stragglers:\s*$"), re.compile(r"/job:[^/\s]+/replica:\d+/task:\d+")),
    (re.compile(r"(?:Options|config): (?:goo\.gle/\S+\s*|\w+ \{|\w+: \S.*)?$"), re.compile(r"(?:  )*(?:\w+ \{|\}|\w+: \S.*)")),
)

# A task that outlives the first worker (which runs the coordination service) loses it at shutdown:
# "E0000 … base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to
# send RPC to coordination service. …", then gRPC's detail on two lines of its own
# (tests/data/tf_console/shutdown_after_leader.log). Noise only once that worker has ended well.
_LEADER_GONE = re.compile(r"Failed to send RPC to coordination service")
_GRPC_DETAIL = re.compile(r"Additional GRPC error information from remote target .*|:?UNKNOWN:Error received from peer .*")


class Fold:
    """Decides, line by line, what of a worker's output the console skips; counts what it skipped.

    One Fold serves every pump of a launch (one thread per worker). The count is shared behind a
    lock; the only per-worker state, "the lines before were a folded announcement" (and the shape
    its follow-up lines take), lives in a
    thread-local, so one worker's lines never change how another's are judged.
    """

    def __init__(self, verbose: bool, framework: str = contract.TENSORFLOW) -> None:
        self.verbose = verbose
        self.source = "C++ (XLA, absl)" if framework == contract.JAX else "TensorFlow"  # whose lines the note names
        self._folded = 0
        self._after_leader = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def hides(self, line: str) -> bool:
        """True when `line` (as the terminal would show it, no worker tag) stays off the console."""
        if self.verbose:
            return False
        shape: re.Pattern[str] | None = getattr(self._local, "following", None)
        follow_up = shape is not None and shape.fullmatch(line) is not None
        hidden = follow_up or is_noise(line)
        if not follow_up:
            shape = next((then for announces, then in _FOLLOW_UPS if announces.search(line)), None) if hidden else None
        self._local.following = shape
        if hidden:
            with self._lock:
                self._folded += 1
        return hidden

    def hides_after_leader(self, line: str) -> bool:
        """True for TensorFlow's complaint that the coordination service is gone, and gRPC's detail
        lines after it; the caller asks only once the worker running that service ended with status 0.
        Counted apart: `shutdown_note` explains it."""
        if self.verbose:
            return False
        detail = getattr(self._local, "leader_gone", False) and _GRPC_DETAIL.fullmatch(line) is not None
        gone = detail or (_LEADER_GONE.search(line) is not None and (_ABSL.fullmatch(line) or _TF_OLD.fullmatch(line)) is not None)
        self._local.leader_gone = gone
        if gone:
            with self._lock:
                self._after_leader += 1
        return gone

    def shutdown_note(self) -> str | None:
        """One line for the end of a run whose later tasks lost the coordination service as the first task finished."""
        with self._lock:
            count = self._after_leader
        if count == 0:
            return None
        return (
            f"{count} TensorFlow error line(s) folded (\"Failed to send RPC to coordination service\" and its detail): they came after "
            "the first task, which runs TensorFlow's coordination service, had ended well; tasks that outlive it say so at shutdown (in the log files)"
        )

    @property
    def folded(self) -> int:
        with self._lock:
            return self._folded

    def note(self) -> str | None:
        """One line for the end of a run; None when nothing was folded (or --verbose showed it all)."""
        count = self.folded
        if self.verbose or count == 0:
            return None
        lines = "line" if count == 1 else "lines"
        return f"{count} {self.source} log {lines} folded from the console (they are in the log files; --verbose shows them)"


def is_noise(line: str) -> bool:
    """The stateless part of the rule (see the module docstring): one line on its own."""
    if _BARE_NOISE.fullmatch(line):
        return True
    match = _ABSL.fullmatch(line) or _TF_OLD.fullmatch(line)
    if match is None:
        return False
    severity, source, message = match.groups()
    if not _CPP_SOURCE.search(source):
        return False
    if severity == "I":
        return True
    if severity == "W":
        return _KNOWN_WARNINGS.search(message) is not None
    if severity == "E":
        return _KNOWN_ERRORS.search(message) is not None
    return False

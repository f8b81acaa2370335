"""The worker's profiling: `tpuctl profile`'s captures and `launch --profile START-END`'s window, both taken inside
the worker at its training steps' boundaries, step markers where Keras fit sets none, and (with --profiler-server)
the profiler server for tools that capture through it. TensorFlow's profiler on a TensorFlow run, JAX's on a JAX run
(tracers.py says why the run's framework chooses, not what is imported).

No script needs a line for any of it. A capture starts (`tf.profiler.experimental.start`, `jax.profiler.start_trace`)
between two steps, on the thread that runs them, and stops the same way: at the step boundary where its last step (a
window's) ended, or the first one once its seconds passed (`tpuctl profile`'s, asked through the worker's reaper:
tpuctl/runtime/profile_capture/requests.py). Both kinds go through the same start and stop below. Where stopping a
profile can crash the worker (TensorFlow's fault with several processes' collectives, profile_capture/tracefix.py)
and tpuctl's fix for it could not be loaded, nothing is captured: the window's warning or the request's answer says why.

Steps are counted from 0 across epochs and fits, in this process. Keras 3's fit marks no steps, so a
capture would have no step times (xprof: "No step marker observed"): on Keras 3 each batch recorded is wrapped
in a `Trace("train", step_num=N, _r=1)` (on JAX its StepTraceAnnotation, the same marker), the marker tf-keras and
Keras 2 put around their own steps.
Keras 3 runs on_train_batch_end on a thread of its own (asynchronous dispatch, kept for speed), and a
marker must begin and end on one thread, so a Keras 3 step runs from one on_train_batch_begin to the
next (or to the epoch's end): what the step really costs, the callbacks between steps included.

A capture writes through a private folder: TensorFlow and JAX name the file after the host and its session folder
after the second it stopped, so two workers on one machine would overwrite each other's file, and workers stopping a
second apart would land in two sessions. Each worker's file is copied into PROFILE_DIR/plugins/profile/<session>/ as
<host>_<task>.xplane.pb, <session> named by the run and the steps (a window) or by the launcher (`tpuctl profile`),
the same on every worker.

The server starts the moment the run's framework (TensorFlow, or JAX) has been imported (after_import.py), before
the script runs, whoever imports it. Until then the launch's bound socket (PROFILER_FD) holds the port, as
RESERVED_FD holds the TensorFlow server's. A server that cannot start costs the run nothing but one warning line
(from the chief).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import after_import
from tpuctl.runtime.timeline import tracers

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any

    from tpuctl.runtime.timeline.tracers import Tracer

SESSION_PREFIX = "tpuctl-"  # a window's session folder: tpuctl-<run id>-attempt-<N>-steps-<START>-<END>
FAULT = "stopping a profile can crash a worker of a multi-worker run in TensorFlow (docs/profile.md, Known TensorFlow fault)"


def _say(message: str) -> None:
    print(f"tpuctl: {message}", file=sys.stderr, flush=True)


def _chief() -> bool:
    """The worker that speaks for all: TensorFlow's chief; on a JAX run (no TF_CONFIG to read) process 0."""
    if tracers.jax_run(os.environ):
        return os.environ.get(contract.WORKER_INDEX, "0") == "0"
    try:
        from tpuctl.runtime import worker_env

        return worker_env.current().is_chief
    except (TpuctlError, ValueError):
        return True


def install_server(environ: Mapping[str, str]) -> None:
    """Start the run's profiler server (tracers.py: TensorFlow's, or JAX's on a JAX run) once its framework is imported,
    where the launch gave this worker a port."""
    try:
        port = contract.profiler_port(environ)
    except TpuctlError as err:
        if _chief():
            _say(f"warning: no profiler server: {err.message}")
        return
    if port is None:
        return
    held = environ.get(contract.PROFILER_FD)
    tracer = tracers.for_run(environ)

    def start(framework: ModuleType) -> None:
        if held is not None:
            try:  # noqa: SIM105 - contextlib is one more import before every worker's script
                os.close(int(held))  # only now: from here to the server's bind the launch's lock keeps other launches away
            except (OSError, ValueError):
                pass
        try:
            tracer.serve(framework, port)
        except Exception as err:  # noqa: BLE001 - a profiler that cannot start is no reason for training to stop
            if _chief():
                _say(f"warning: the profiler server did not start on port {port} ({_first(err)})")
            return
        if _listening_here(port) is False:  # TensorFlow and JAX only log a port they could not bind, and go on without a server
            _say(f"warning: this worker's profiler server could not take port {port} (another process holds it)")

    after_import.when_imported(tracer.module, start)


def _listening_here(port: int) -> bool | None:
    """Does this process hold a listening socket on the port (its sockets in /proc/self/fd matched against the
    kernel's TCP tables)? A connect would not tell: the process that took the port answers too. None: no /proc."""
    mine = set()
    try:
        rows = []
        for table in ("tcp", "tcp6"):
            with open(f"/proc/self/net/{table}") as lines:
                rows += [line.split() for line in lines.read().splitlines()[1:]]
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            mine.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile (listdir's own, another thread's)
            continue
    wanted = f":{port:04X}"
    return any(len(row) > 9 and row[1].endswith(wanted) and row[3] == "0A" and f"socket:[{row[9]}]" in mine for row in rows)


class Window:
    """One profile to record: its session, and when it begins and ends. A window (`launch --profile`) has its steps;
    a capture (`tpuctl profile`) its seconds, the time by which it must have begun and ended, and whom to answer."""

    def __init__(
        self,
        session: str,
        *,
        steps: tuple[int, int] | None = None,
        seconds: float = 0.0,
        begin_by: float = 0.0,
        end_by: float = 0.0,
        answer: Callable[..., None] | None = None,
    ) -> None:
        self.session = session
        self.steps = steps
        self.seconds = seconds
        self.begin_by = begin_by  # time.monotonic(): a capture not begun by then is not taken (requests.py answers)
        self.end_by = end_by  # time.monotonic(): past it, the launcher no longer waits for the file
        self.answer = answer
        self.began = 0.0
        self.first_step = 0

    def refuse(self, why: str) -> None:
        if self.answer is not None:
            self.answer("not_taken", session=self.session, why=why)
        elif self.steps is not None:
            _say(f"warning: --profile {self.steps[0]}-{self.steps[1]} not captured: {why}")

    def over(self, done: int) -> bool:
        """Whether the step `done` that just ended is the window's last, or ends a capture's seconds."""
        if self.steps is not None:
            return done >= self.steps[1]
        return time.monotonic() - self.began >= self.seconds


class Steps:
    """This process's training steps as Keras' callbacks see them: the count, Keras 3's markers, the profiles."""

    def __init__(self, window: tuple[int, int] | None, logdir: str | None, session: str, tracer: Tracer | None = None) -> None:
        self.logdir = logdir or ""
        self.tracer: Tracer = tracer or tracers.TensorFlowTracer()
        self.window = Window(session, steps=window) if window is not None and logdir else None
        self.unsafe: str | None = None  # why a profile is not safe to stop in this process; None: it is
        self.next = 0  # the number of the step to come
        self._open = False  # a step has begun and not ended
        self._trace: Any = None
        self._asked: Window | None = None  # a capture waiting for a step boundary (requests.py puts it here)
        self._lock = threading.Lock()  # between requests.py's thread and the training thread, over `_asked`
        self._recording: Window | None = None
        self._scratch: str | None = None  # the private folder the profiler writes the profile into
        self._stop_due = False  # the profile's last step has ended

    # what requests.py asks, from its own thread

    def ask(self, capture: Window) -> str | None:
        """Take `capture` at the next step boundary; why not, where it cannot be."""
        if not self.logdir:
            return "the worker has no folder to write a profile to"
        with self._lock:
            if self._asked is not None or self._recording is not None:
                return "its profiler is busy with another capture (a --profile window, or another tpuctl profile)"
            self._asked = capture
        return None

    def withdraw(self, capture: Window) -> bool:
        """Take back `capture` if no step boundary took it: True when it was still waiting."""
        with self._lock:
            if self._asked is not capture:
                return False
            self._asked = None
            return True

    # the training thread's, from the fit callback (hooks.py)

    def train_begins(self) -> None:
        self._start_if_due()

    def step_begins(self, markers: bool) -> None:
        """markers: Keras 3, whose previous step ends here and whose step gets its Trace while a profile records."""
        if markers:
            self.step_ends()
        if self._stop_due:
            self._stop()
        self._open = True
        if markers and self._recording is not None:
            self._trace = self.tracer.step(self.next)
            self._trace.__enter__()

    def step_ends(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._trace is not None:
            trace, self._trace = self._trace, None
            trace.__exit__(None, None, None)
        done, self.next = self.next, self.next + 1
        if self._recording is not None:
            # Stopped once the step is over: tf-keras calls on_train_batch_end inside its step's marker, which a
            # session stopped there would lose.
            self._stop_due = self._recording.over(done)
        else:
            self._start_if_due()  # before the next step begins: tf-keras opens its marker before on_train_batch_begin

    def epoch_ends(self) -> None:
        self.step_ends()
        if self._stop_due:
            self._stop()

    def train_ends(self) -> None:
        """Training ended (or left fit) while a profile recorded: what was captured is kept."""
        self.step_ends()
        if self._recording is not None:
            self._stop()

    def _start_if_due(self) -> None:
        window = self.window
        if window is not None and window.steps is not None and self.next >= window.steps[0]:
            self.window = None  # once per process
            if self.next == window.steps[0]:
                self._start(window)
            else:  # its first step came while a `tpuctl profile` capture recorded
                window.refuse("a tpuctl profile capture was recording at its first step")
            return
        if self._asked is None:
            return  # the training thread's cost of a boundary with nothing asked: this attribute's read
        with self._lock:
            asked = self._asked
            if asked is None or time.monotonic() > asked.begin_by:
                return  # late (the worker was stopped meanwhile): requests.py withdraws it and says so
            self._asked = None
        self._start(asked)

    def _start(self, window: Window) -> None:
        if self.unsafe is not None:
            window.refuse(f"{FAULT}, and {self.unsafe}")
            return
        import shutil
        import tempfile

        scratch = tempfile.mkdtemp(prefix="tpuctl-profile-")
        try:
            self.tracer.start(scratch)
        except Exception as err:  # noqa: BLE001 - e.g. another profiler session active: the profile is lost, not the run
            shutil.rmtree(scratch, ignore_errors=True)
            window.refuse(f"{self.tracer.name}'s profiler did not start: {_first(err)}")
            return
        window.began, window.first_step = time.monotonic(), self.next
        self._recording, self._scratch = window, scratch
        if window.answer is not None:
            window.answer("began", session=window.session)  # the launcher now waits for the file, not for a start

    def _stop(self) -> None:
        self._stop_due = False
        window, scratch = self._recording, self._scratch
        self._recording = self._scratch = None
        if window is None or scratch is None:
            return
        import shutil

        try:
            self.tracer.stop()
            target = f"{self.logdir.rstrip('/')}/plugins/profile/{window.session}"
            written = []
            for folder, _, files in os.walk(scratch):
                written += [os.path.join(folder, name) for name in files if name.endswith(".xplane.pb")]
            if not written:
                raise RuntimeError(f"{self.tracer.name} wrote no trace")
            if window.answer is not None and time.monotonic() > window.end_by:
                return  # the launcher stopped waiting for it (the worker was stopped meanwhile): no file it did not name
            file = tracers.save(written[0], target, _file_name())
            if window.answer is not None:
                window.answer("taken", session=window.session, file=file, steps=self.next - window.first_step)
            elif window.steps is not None and _chief():
                _say(f"profiled steps {window.steps[0]}-{window.steps[1]} into {target}")
        except Exception as err:  # noqa: BLE001 - a full disk or a refused bucket loses the profile, not the run
            window.refuse(f"the profile was not saved: {_first(err)}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _first(err: BaseException) -> str:
    return ((str(err).strip().splitlines() or [type(err).__name__])[0])[:200]


def _file_name() -> str:
    """<host>_<task>.xplane.pb: two workers of one host in one session keep a file each."""
    import socket

    task = f"{os.environ.get(contract.TASK_TYPE, 'worker')}-{os.environ.get(contract.WORKER_INDEX, '0')}"
    host = "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname()) or "host"
    return f"{host}_{task}.xplane.pb"


def steps_from(environ: Mapping[str, str], on_demand: bool) -> Steps | None:
    """The Steps a worker keeps, or None where nothing needs them (no window, no `tpuctl profile` to answer).
    `on_demand`: the launcher can ask this worker for captures (a local or ssh worker, reached through its reaper)."""
    try:
        window = contract.profile_steps(environ)
    except TpuctlError as err:
        if _chief():
            _say(f"warning: --profile ignored: {err.message}")
        window = None
    if window is None and not on_demand:
        return None
    logdir = contract.profile_dir(environ)
    if window is not None and not logdir and _chief():
        _say("warning: --profile ignored: the run has no --model-dir to write the profile to")
    run = environ.get(contract.RUN_ID) or "run"
    start, end = window or (0, 0)
    session = f"{SESSION_PREFIX}{run}-attempt-{environ.get(contract.ATTEMPT, '1')}-steps-{start}-{end}"
    steps = Steps(window, logdir, session, tracers.for_run(environ))
    if "TF_CONFIG" in environ:  # several processes: their collectives are what makes TensorFlow's stop crash
        _guard(steps, environ)
    return steps


def _guard(steps: Steps, environ: Mapping[str, str]) -> None:
    """Load tpuctl's fix for TensorFlow's crash before TensorFlow is imported, and see that it took once it is."""
    from tpuctl.runtime.profile_capture import tracefix

    steps.unsafe = tracefix.load(environ)
    if steps.unsafe is not None:
        return

    def check(tf: ModuleType) -> None:
        if not tracefix.active():
            steps.unsafe = "tpuctl's fix for it did not take effect in this process"

    after_import.when_imported("tensorflow", check)

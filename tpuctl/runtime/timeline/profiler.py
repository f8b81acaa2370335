"""The worker's profiling: TensorFlow's profiler server on the port tpuctl reserved (`tpuctl profile` captures
from it), step markers where Keras fit sets none, and `launch --profile START-END`'s window.

No script needs a line for any of it. The server starts the moment TensorFlow has been imported
(after_import.py), before the script runs, whoever imports it: tpuctl building the strategy, or the
script building its own. Until then the launch's bound socket (PROFILER_FD) holds the port, as
RESERVED_FD holds the TensorFlow server's. A server that cannot start costs the run nothing but one
warning line (from the chief, as every worker's would say the same).

Steps are counted from 0 across epochs and fits, in this process. Keras 3's fit marks no steps, so a
capture would have no step times (xprof: "No step marker observed"): on Keras 3 each batch is wrapped
in a `Trace("train", step_num=N, _r=1)`, the marker tf-keras and Keras 2 put around their own steps.
Keras 3 runs on_train_batch_end on a thread of its own (asynchronous dispatch, kept for speed), and a
marker must begin and end on one thread, so a Keras 3 step runs from one on_train_batch_begin to the
next (or to the epoch's end): what the step really costs, the callbacks between steps included.

The window writes through a private folder: TensorFlow names its file after the host and its
session folder after the second it stopped, so two workers on one machine would overwrite each
other's file, and workers stopping a second apart would land in two sessions. Each worker's file is
copied into PROFILE_DIR/plugins/profile/<session>/ as <host>_<task>.xplane.pb, <session> named by
the run and the steps, the same on every worker.
"""

from __future__ import annotations

import os
import sys

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import after_import

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any

SESSION_PREFIX = "tpuctl-"  # a window's session folder: tpuctl-<run id>-attempt-<N>-steps-<START>-<END>


def _say(message: str) -> None:
    print(f"tpuctl: {message}", file=sys.stderr, flush=True)


def _chief() -> bool:
    try:
        from tpuctl.runtime import worker_env

        return worker_env.current().is_chief
    except (TpuctlError, ValueError):
        return True


def install_server(environ: Mapping[str, str]) -> None:
    """Start the profiler server once TensorFlow is imported, where the launch gave this worker a port."""
    try:
        port = contract.profiler_port(environ)
    except TpuctlError as err:
        if _chief():
            _say(f"warning: no profiler server: {err.message}")
        return
    if port is None:
        return
    held = environ.get(contract.PROFILER_FD)

    def start(tf: ModuleType) -> None:
        if held is not None:
            try:  # noqa: SIM105 - contextlib is one more import before every worker's script
                os.close(int(held))  # only now: from here to TensorFlow's bind the launch's lock keeps other launches away
            except (OSError, ValueError):
                pass
        try:
            tf.profiler.experimental.server.start(port)
        except Exception as err:  # noqa: BLE001 - a profiler that cannot start is no reason for training to stop
            if _chief():
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                _say(f"warning: the profiler server did not start on port {port} ({first[:200]}); `tpuctl profile` cannot capture this run")
            return
        if _listening_here(port) is False:  # TensorFlow only logs a port it could not bind, and goes on without a server
            _say(f"warning: this worker's profiler server could not take port {port} (another process holds it): `tpuctl profile` names it missing")

    after_import.when_imported("tensorflow", start)


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


class Steps:
    """This process's training steps as Keras' callbacks see them: the count, Keras 3's markers, the window."""

    def __init__(self, window: tuple[int, int] | None, logdir: str | None, session: str) -> None:
        self.window = window if logdir else None
        self.logdir = logdir or ""
        self.session = session
        self.next = 0  # the number of the step to come
        self._open = False  # a step has begun and not ended
        self._trace: Any = None
        self._scratch: str | None = None  # the private folder TensorFlow writes the window into
        self._stop_due = False  # the window's last step has ended

    def train_begins(self) -> None:
        self._start_if_due()

    def step_begins(self, markers: bool) -> None:
        """markers: Keras 3, whose previous step ends here and whose step gets its Trace."""
        if markers:
            self.step_ends()
        if self._stop_due:
            self._stop()
        self._open = True
        if markers:
            import tensorflow as tf

            self._trace = tf.profiler.experimental.Trace("train", step_num=self.next, _r=1)
            self._trace.__enter__()

    def step_ends(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._trace is not None:
            trace, self._trace = self._trace, None
            trace.__exit__(None, None, None)
        done, self.next = self.next, self.next + 1
        if self.window is not None and done == self.window[1]:
            # Stopped once the step is over: tf-keras calls on_train_batch_end inside its step's marker, which a
            # session stopped there would lose.
            self._stop_due = True
        else:
            self._start_if_due()  # before the next step begins: tf-keras opens its marker before on_train_batch_begin

    def epoch_ends(self) -> None:
        self.step_ends()
        if self._stop_due:
            self._stop()

    def train_ends(self) -> None:
        """Training ended (or left fit) inside the window: what was captured is kept."""
        self.step_ends()
        if self._scratch is not None:
            self._stop()

    def _start_if_due(self) -> None:
        window = self.window
        if window is None or self.next != window[0] or self._scratch is not None:
            return
        import tempfile

        import tensorflow as tf

        try:
            self._scratch = tempfile.mkdtemp(prefix="tpuctl-profile-")
            tf.profiler.experimental.start(self._scratch)
        except Exception as err:  # noqa: BLE001 - e.g. `tpuctl profile` capturing right now: the window is lost, not the run
            self._scratch = None
            self.window = None
            _say(f"warning: --profile {window[0]}-{window[1]} not captured: {_first(err)}")

    def _stop(self) -> None:
        self._stop_due = False
        scratch, self._scratch = self._scratch, None
        window, self.window = self.window, None  # once per process
        if scratch is None or window is None:
            return
        import shutil

        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
            target = f"{self.logdir.rstrip('/')}/plugins/profile/{self.session}"
            written = []
            for folder, _, files in os.walk(scratch):
                written += [os.path.join(folder, name) for name in files if name.endswith(".xplane.pb")]
            tf.io.gfile.makedirs(target)
            for path in written:
                tf.io.gfile.copy(path, f"{target}/{_file_name()}", overwrite=True)
            if _chief():
                _say(f"profiled steps {window[0]}-{window[1]} into {target}")
        except Exception as err:  # noqa: BLE001 - a full disk or a refused bucket loses the profile, not the run
            _say(f"warning: the --profile window was not saved: {_first(err)}")
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


def steps_from(environ: Mapping[str, str]) -> Steps | None:
    """The Steps a worker keeps, or None where nothing needs them (no server, no window)."""
    try:
        window = contract.profile_steps(environ)
    except TpuctlError as err:
        if _chief():
            _say(f"warning: --profile ignored: {err.message}")
        window = None
    if window is None and not environ.get(contract.PROFILER_PORT):
        return None
    logdir = contract.profile_dir(environ)
    if window is not None and not logdir and _chief():
        _say("warning: --profile ignored: the run has no --model-dir to write the profile to")
    run = environ.get(contract.RUN_ID) or "run"
    start, end = window or (0, 0)
    session = f"{SESSION_PREFIX}{run}-attempt-{environ.get(contract.ATTEMPT, '1')}-steps-{start}-{end}"
    return Steps(window, logdir, session)

"""The run's view (tpuctl/runs/view.py), published into its model dir for the TensorBoard plugin: MODEL_DIR/tpuctl/<run_id>/view.json.

TensorBoard often runs elsewhere than the launcher and reads the model dir (a local path, or gs:// that every host
reaches); the run folder stays private. The view is written whole each time: locally to a temporary name then renamed
(a reader never sees half a file), on gs:// as one object upload. When: at the run's start, at each attempt's end (the
timeline's attempt_end wakes the publisher), every PUBLISH_EVERY_S while it runs and at its end.

Publishing is a view of the run, never part of it: it runs on its own thread, never raises into the launch, and a
failure is one warning line (then retried at the next turn, silently until it works again; a symlink where the view's
folders go is said once and never written through: it leads out of the model dir). Nor does it hold the run's
end: each gs:// upload is one try (retry=None: the next turn is the retry) with a bounded timeout, `stop` waits at most
STOP_WAIT_S for an upload in flight and the final view is one short try (FINAL_TIMEOUT_S); a silent endpoint costs the
launcher's end seconds and one warning line, never the client's own 60 s timeouts and 120 s retries. A week of 64 workers in
10 attempts takes ~5 s to build (benchmarks/report_big_timeline.py), so the next turn waits COST_FACTOR
times the last build's cost when that is longer than PUBLISH_EVERY_S (there: every ~4 min): the launcher's CPU spent
on the view stays under 1/COST_FACTOR, 2% of a core.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.inputs.private_files import replace_in
from tpuctl.runs import timeline as tl
from tpuctl.runs import view
from tpuctl.runs.folder import RunFolder

PUBLISH_EVERY_S = 60.0
UPLOAD_TIMEOUT_S = 30.0  # a turn's upload, one try
STOP_WAIT_S = 5.0  # how long the run's end waits for a turn's upload in flight
FINAL_TIMEOUT_S = 5.0  # the final view's upload, one try
COST_FACTOR = 50.0
FILE_NAME = "view.json"


def reachable(model_dir: str, *, shares_disk: bool) -> bool:
    """Whether this machine writes the model dir the workers write: gs:// always; a path only where the workers write
    this machine's disk (a local run). An ssh run's path is on the hosts (runner.py moves it under their work dir), a
    Kubernetes run's in its pods: written here, it would be a stray folder no TensorBoard by the model dir ever reads."""
    return model_dir.startswith("gs://") or (shares_disk and "://" not in model_dir)


def target(model_dir: str, run_id: str) -> str:
    """Where a run's view lives in its model dir."""
    return f"{model_dir.rstrip('/')}/tpuctl/{run_id}/{FILE_NAME}"


class Publisher:
    """Builds and writes the view on a thread of its own; `start`, then `stop` (which publishes the run's end)."""

    def __init__(self, folder: RunFolder, run_id: str, model_dir: str, warn: Callable[[str], None], every_s: float = PUBLISH_EVERY_S) -> None:
        self.folder = folder
        self.model_dir = model_dir
        self.uri = target(model_dir, run_id)
        self._warn = warn
        self._every_s = every_s
        self._wake = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()  # one publish at a time (the thread's, and stop's last one)
        self._thread = threading.Thread(target=self._loop, name="tpuctl-view", daemon=True)
        self._failing = False
        self._refused = False
        self.cost_s = 0.0  # the last build's seconds
        self.published = 0

    def start(self, timeline: tl.Timeline | None) -> None:
        if timeline is not None:
            timeline.listen(self._on_event)
        self._thread.start()

    def stop(self) -> None:
        """The run ended (its run_end is written): stop the thread and publish the final view, here."""
        self._done.set()
        self._wake.set()
        self._thread.join(STOP_WAIT_S)
        if self._thread.is_alive():  # a daemon thread: its upload ends with the launcher, whatever the endpoint does
            self._warn(f"warning: the run's final view is not published to {self.uri}: an upload there has not answered in {STOP_WAIT_S:.0f} s")
            return
        self.publish(live=False, final=True)

    def publish(self, *, live: bool, final: bool = False) -> bool:
        """Build and write the view now; False (after one warning for a new streak of failures) where it could not.
        `final`: the run's last, one short try (the launcher's end waits for it) and a warning whatever came before."""
        with self._lock:
            if self._refused:
                return False
            started = time.monotonic()
            try:
                body = json.dumps(view.build(self.folder, live=live, model_dir=self.model_dir), allow_nan=False)
                self.cost_s = time.monotonic() - started
                write(self.uri, body, timeout_s=FINAL_TIMEOUT_S if final else UPLOAD_TIMEOUT_S)
            except Exception as err:  # noqa: BLE001 - a view that cannot be published never stops the run
                self.cost_s = max(self.cost_s, time.monotonic() - started)
                if final or not self._failing:
                    words = err.message if isinstance(err, TpuctlError) else f"{type(err).__name__}: {err}"
                    later = "" if final or isinstance(err, Refused) else " (tried again later)"
                    self._warn(f"warning: cannot publish the run's view to {self.uri}: {one_line(words, 200)}{later}")
                self._failing = True
                self._refused = isinstance(err, Refused)  # a link the user put there: said once, not tried again
                return False
            self._failing = False
            self.published += 1
            return True

    def _on_event(self, name: str) -> None:
        if name == tl.ATTEMPT_END:
            self._wake.set()

    def _loop(self) -> None:
        self.publish(live=True)
        while not self._done.is_set():
            self._wake.wait(max(self._every_s, COST_FACTOR * self.cost_s))
            self._wake.clear()
            if not self._done.is_set():
                self.publish(live=True)


def write(uri: str, body: str, *, timeout_s: float = UPLOAD_TIMEOUT_S) -> None:
    """The whole file at `uri`: local, to a temporary name in the same folder then renamed; gs://, one object upload,
    one try of at most `timeout_s` a request (the storage client's default retries wait up to 120 s)."""
    if uri.startswith("gs://"):
        from tpuctl.cloud.plumbing import storage

        bucket, _, name = uri[len("gs://") :].partition("/")
        blob = storage.client().bucket(bucket).blob(name)
        blob.upload_from_string(body, content_type="application/json", timeout=timeout_s, retry=None)
        return
    _write_local(Path(uri), body)


class Refused(TpuctlError):
    """A link where the view's folders go: not written through (it leaves the model dir), and not tried again."""


def _write_local(path: Path, body: str) -> None:
    """MODEL_DIR/tpuctl/RUN/view.json, its two folders made where missing and entered one by one without following a
    symlink (Refused: one there leads out of the model dir, and TensorBoard's tab, which follows none, would never read
    what lands there), then written to a temporary name in the last one and renamed over view.json (a rename replaces
    a link at view.json, never follows it). The model dir itself is the user's to name, a link of theirs included."""
    model_dir = path.parent.parent.parent
    model_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as opened:
        folder = os.open(model_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        opened.callback(os.close, folder)
        for name, shown in ((path.parent.parent.name, path.parent.parent), (path.parent.name, path.parent)):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=folder)
            try:
                folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode):
                    raise Refused(f"{shown} is a symlink: tpuctl writes no view through a link out of the model dir") from None
                raise
            opened.callback(os.close, folder)
        replace_in(folder, FILE_NAME, body, 0o644)  # TensorBoard may read it as another user: the view holds nothing private

"""`tpuctl profile` on the launcher's side: a request left in the run's folder, handed to every worker, answered there.

The command (tpuctl/runs/profiling.py) writes LOG_DIR/profile-requests/ID.json (`{"seconds": S}`). The launcher
looks for requests every POLL_S (one stat while the folder is absent), takes the oldest by renaming it ID.taken,
names the session, and asks every live worker of the current attempt through its Handle: the worker's reaper hands
the request to the worker (tpuctl/safety/reaper.py), which captures at its own step boundaries
(tpuctl/runtime/timeline/profiler.py) and says `profile {json}` among its messages: "began" once it records, then
"taken" (its file) or "not_taken" (why). Once every worker asked has answered or ended, or has passed its own
deadline (PROFILE_BEGIN_S to begin: a worker stopped or hung in native code says nothing; then S + PROFILE_SAVE_S to
write its file), the launcher writes ID.answer.json: `{"session", "attempt", "files": {worker: file}, "missing":
{worker: why}}`, or `{"error"}`.

No process is signalled: a launcher that does not look (one that ended, an older tpuctl's) never takes the request,
and the command sees its file still there. One request at a time: another waits in its file.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.parse import read_small_bytes
from tpuctl.inputs.private_files import check_private, write_private
from tpuctl.launch.process.starter import Handle
from tpuctl.runs.folder import RunFolder

POLL_S = 0.2
PREFIX = "profile "
REQUEST = ".json"
TAKEN = ".taken"
ANSWER = ".answer.json"
MAX_SECONDS = contract.PROFILE_MAX_MS / 1000
SLACK_S = 5.0  # beyond the workers' own deadline: their answers' way back
ENDED = "its process ended during the capture (`tpuctl logs` shows how)"
SERVER = "a parameter-server task trains no steps of its own"


@dataclass
class _Asked:
    """One request being served: the workers asked, and what each answered."""

    attempt: int
    session: str
    asked: set[int]
    seconds: float
    since: float = field(default_factory=time.monotonic)
    began: dict[int, float] = field(default_factory=dict)  # worker -> when it said it records (time.monotonic())
    answers: dict[int, dict[str, object]] = field(default_factory=dict)  # worker -> its last word: taken, not_taken

    def due(self, position: int) -> float:
        """When the launcher stops waiting for this worker's word."""
        began = self.began.get(position)
        if began is None:
            return self.since + contract.PROFILE_BEGIN_S + SLACK_S
        return began + self.seconds + contract.PROFILE_SAVE_S + SLACK_S


class Desk:
    """Serves the run's profile requests, one at a time, on a thread of its own; the attempt attaches its workers."""

    def __init__(self, folder: RunFolder, warn: Callable[[str], None]) -> None:
        self.folder = folder
        self._warn = warn
        self._changed = threading.Condition()
        self._workers: tuple[int, Sequence[Handle], Callable[[int], bool]] | None = None
        self._serving: _Asked | None = None
        self._sessions: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="tpuctl-profile-desk", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=SLACK_S)

    def attach(self, attempt: int, handles: Sequence[Handle], live: Callable[[int], bool]) -> None:
        """The attempt's workers, from when they have all started; `live(position)`: not ended as far as tpuctl knows."""
        with self._changed:
            self._workers = (attempt, handles, live)

    def detach(self) -> None:
        with self._changed:
            self._workers = None
            self._changed.notify_all()

    def offer(self, attempt: int, position: int, message: str) -> bool:
        """Keep a worker's `profile {json}` answer for the request being served; False for any other message."""
        if not message.startswith(PREFIX):
            return False
        try:
            said = json.loads(message[len(PREFIX) :])
        except (ValueError, RecursionError):
            return True
        with self._changed:
            serving = self._serving
            if serving is not None and serving.attempt == attempt and isinstance(said, dict) and said.get("session") == serving.session:
                if said.get("event") == "began":
                    serving.began[position] = time.monotonic()
                else:
                    serving.answers[position] = said
                self._changed.notify_all()
        return True

    def changed(self) -> None:
        """A worker's state changed (it ended): the request being served stops waiting for it."""
        with self._changed:
            self._changed.notify_all()

    # the desk's own thread ---------------------------------------------------------------------------

    def _watch(self) -> None:
        place = self.folder.profile_requests
        while not self._stop.wait(POLL_S):
            try:
                check_private(place)  # never served through a link, nor from a folder someone else can write into
                waiting = sorted((p for p in place.iterdir() if p.name.endswith(REQUEST) and not p.name.endswith(ANSWER)), key=_mtime)[:8]
            except (OSError, TpuctlError):
                continue  # absent, mostly: no request was ever left
            for request in waiting:
                if self._stop.is_set():
                    return
                self._take(request)

    def _take(self, request: Path) -> None:
        ident = request.name[: -len(REQUEST)]
        taken = request.with_name(ident + TAKEN)
        try:
            os.rename(request, taken)  # the command sees its request taken; a second launcher could not take it too
        except OSError:
            return
        try:
            answer = self._serve(taken)
        except TpuctlError as err:
            answer = {"error": err.message}
        try:
            write_private(request.with_name(ident + ANSWER), json.dumps(answer) + "\n")
        except OSError as err:
            self._warn(f"warning: cannot answer the profile request {taken}: {err.strerror or err}")
        with contextlib.suppress(OSError):
            os.unlink(taken)

    def _serve(self, taken: Path) -> dict[str, object]:
        seconds = _seconds(taken)
        with self._changed:
            workers = self._workers
        if workers is None:
            return {"error": "the run has no workers running now (between attempts, or stopping)"}
        attempt, handles, live = workers
        session = self._name()
        milliseconds = max(1, round(seconds * 1000))
        missing: dict[int, str] = {}
        serving = _Asked(attempt, session, set(), seconds)
        with self._changed:
            self._serving = serving  # before any worker is asked: an answer can come at once
        try:
            for position, handle in enumerate(handles):
                if handle.spec.server:
                    missing[position] = SERVER
                elif not live(position):
                    missing[position] = "it had ended before the capture"
                elif not handle.request_profile(session, milliseconds):
                    missing[position] = "its worker cannot be asked (its reaper or agent is gone)"
                else:
                    serving.asked.add(position)
            self._wait(serving, live)
        finally:
            with self._changed:
                self._serving = None
        files = {}
        for position in sorted(serving.asked):
            said = serving.answers.get(position)
            if said is None and not live(position):
                missing[position] = ENDED
            elif said is None:
                waited = "began and wrote no file in time" if position in serving.began else f"said nothing within {contract.PROFILE_BEGIN_S + SLACK_S:g}s"
                missing[position] = f"it {waited} (stopped, or hung in native code?)"
            elif said.get("event") == "taken" and isinstance(said.get("file"), str):
                files[position] = str(said["file"])
            else:
                missing[position] = str(said.get("why") or "it sent no profile (no reason given)")[:300]
        names = [handle.spec.name for handle in handles]
        return {
            "session": session,
            "attempt": attempt,
            "files": {names[p]: files[p] for p in sorted(files)},
            "missing": {names[p]: missing[p] for p in sorted(missing)},
        }

    def _wait(self, serving: _Asked, live: Callable[[int], bool]) -> None:
        with self._changed:
            while not self._stop.is_set() and self._workers is not None:
                now = time.monotonic()
                waiting = [serving.due(p) for p in serving.asked if p not in serving.answers and live(p) and serving.due(p) > now]
                if not waiting:
                    return
                self._changed.wait(min(min(waiting) - now, 1.0))

    def _name(self) -> str:
        """The session's folder: the second the request was served, as TensorFlow's own captures name theirs, and a
        count after it where this launch named that one already."""
        base = time.strftime("%Y_%m_%d_%H_%M_%S")
        name, count = base, 1
        while name in self._sessions:
            count += 1
            name = f"{base}_{count}"
        self._sessions.add(name)
        return name


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _seconds(taken: Path) -> float:
    data = read_small_bytes(taken, "profile request", limit=4096)
    try:
        seconds = json.loads(data or b"")["seconds"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise TpuctlError("the request is not one `tpuctl profile` wrote") from None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_SECONDS:
        raise TpuctlError(f"the request's seconds are not within (0, {MAX_SECONDS:g}]")
    return float(seconds)

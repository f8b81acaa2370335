"""The runs under a TensorBoard logdir: every MODEL_DIR/tpuctl/<run_id>/view.json, local or gs://, and its bytes.

The logdir is often a model dir full of checkpoints and event files, or a bucket shared by many jobs, and
TensorBoard asks whether the plugin has data on every page load: so a local walk is bounded in depth and in
folders seen and never follows a symbolic link (a link out of the logdir would serve files the user did not
point TensorBoard at), a bucket is one bounded prefix listing of the view objects only (the server filters),
the answer comes from a cached listing refreshed in the background, and a view is read only up to a limit,
refused from its size before any byte is read.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tpuctl.inputs.errors import one_line

VIEW_NAME = "view.json"
FOLDER = "tpuctl"  # MODEL_DIR/tpuctl/<run_id>/view.json: the launcher's place for it (docs/report.md)
MAX_DEPTH = 8  # folders below the logdir where a model dir's tpuctl/ may sit
MAX_FOLDERS = 20_000  # folders a local walk looks into before it stops
MAX_VIEWS = 10_000  # view.json objects one bucket listing takes before it stops (the server sends only those)
VIEW_LIMIT = 8 << 20  # bytes: a 64-worker week-long run's view is < 2 MB (docs/report.md, benchmarks/report_big_timeline.py); a bigger file is not one we wrote
LISTING_TTL_S = 10.0
ACTIVE_WAIT_S = 2.0  # how long is_active waits for a listing under way before it answers from the last one
_log = logging.getLogger(__name__)
_IN_BUCKET = re.compile(rf"(?:^|/){FOLDER}/([^/]+)/{re.escape(VIEW_NAME)}\Z")


class Unreadable(Exception):
    """A view that cannot be served, with the one line the page shows instead."""


@dataclass(frozen=True)
class Found:
    """One run: `key` names it to the page (its folder relative to the logdir); `where` is its view.json."""

    key: str
    run_id: str
    where: str


def _gs(logdir: str) -> tuple[str, str] | None:
    if not logdir.startswith("gs://"):
        return None
    bucket, _, prefix = logdir[len("gs://") :].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def find(logdir: str) -> list[Found]:
    """The runs under `logdir`, sorted by key; none for an empty or missing logdir."""
    return scan(logdir)[0]


def scan(logdir: str) -> tuple[list[Found], str | None]:
    """The runs under `logdir`, sorted by key, and the line saying the listing stopped at its bound (None when it
    saw everything): a run beyond the bound is not listed, and the page must not let that pass for "no runs"."""
    if not logdir:
        return [], None
    gs = _gs(logdir)
    found, cut = _in_bucket(*gs) if gs else _on_disk(logdir)
    return sorted(found, key=lambda f: f.key), cut


def _on_disk(logdir: str) -> tuple[list[Found], str | None]:
    top = os.path.abspath(logdir)
    found: list[Found] = []
    for seen, (here, folders, _) in enumerate(os.walk(top, followlinks=False)):
        if seen >= MAX_FOLDERS:
            return found, (
                f"the walk of {top} stopped after {MAX_FOLDERS:,} folders, so runs in the folders after them are not listed: "
                "point --logdir at the folder of the experiments you want to see"
            )
        depth = 0 if here == top else os.path.relpath(here, top).count(os.sep) + 1
        if depth >= MAX_DEPTH:
            folders[:] = []
        if os.path.basename(here) == FOLDER and here != top:
            runs = _runs_in(top, here, folders)
            found += runs
            # A run folder holds only its view: nothing below it to look for. A folder named tpuctl whose children hold
            # no view is no model dir's (a checkout of tpuctl, a project named so): the walk goes on below it.
            taken = {os.path.basename(os.path.dirname(run.where)) for run in runs}
            folders[:] = [name for name in folders if name not in taken]
    return found, None


def _runs_in(top: str, tpuctl_dir: str, folders: list[str]) -> list[Found]:
    """The children of a folder named tpuctl that hold a view.json (regular file, no link): the runs published there."""
    found = []
    for name in sorted(folders):
        view = os.path.join(tpuctl_dir, name, VIEW_NAME)
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(tpuctl_dir, name)).st_mode) or not stat.S_ISREG(os.lstat(view).st_mode):
                continue
        except OSError:
            continue
        key = os.path.relpath(os.path.join(tpuctl_dir, name), top).replace(os.sep, "/")
        found.append(Found(key, name, view))
    return found


def _in_bucket(bucket: str, prefix: str) -> tuple[list[Found], str | None]:
    """The views under the prefix, filtered by the server (objects.list matchGlob, matched against the whole name:
    `*` stops at a slash, `**/` is any number of folders), so a model dir's thousands of checkpoints, events and
    traces never cross the network. The prefix narrows by itself and stays out of the glob (it may hold glob
    characters of its own); the regular expression here keeps the check of the names."""
    from tpuctl.cloud.plumbing import storage

    found: list[Found] = []
    views = storage.client().list_blobs(bucket, prefix=prefix, match_glob=f"**/{FOLDER}/*/{VIEW_NAME}", max_results=MAX_VIEWS + 1)
    for seen, blob in enumerate(views):
        if seen == MAX_VIEWS:  # one more than the bound: the listing was cut
            return found, (
                f"the listing of gs://{bucket}/{prefix} stopped after {MAX_VIEWS:,} views, so the runs after them are not listed: "
                "point --logdir at the folder of the experiments you want to see"
            )
        name = str(blob.name)
        match = _IN_BUCKET.search(name[len(prefix) :])
        if match:
            found.append(Found(name[len(prefix) : -len(VIEW_NAME) - 1], match.group(1), f"gs://{bucket}/{name}"))
    return found, None


def read(where: str, limit: int = VIEW_LIMIT) -> bytes:
    """A view's bytes, refused (Unreadable) when it is bigger than `limit`, is not a regular file, or is gone."""
    gs = _gs(where)
    data = _read_object(gs[0], gs[1].rstrip("/"), limit) if gs else _read_file(where, limit)
    if len(data) > limit:  # it grew between the size and the read, or the bucket gave no size
        raise Unreadable(f"view.json is over the {limit >> 20} MiB a view can be: not a view tpuctl wrote")
    return data


def _too_big(size: int, limit: int) -> Unreadable:
    return Unreadable(f"view.json is {size:,} bytes, over the {limit >> 20} MiB a view can be: not a view tpuctl wrote")


def _read_file(path: str, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise Unreadable(f"view.json cannot be read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("view.json is not a regular file")
        if info.st_size > limit:
            raise _too_big(info.st_size, limit)
        return file.read(limit + 1)


def _read_object(bucket: str, name: str, limit: int) -> bytes:
    from tpuctl.cloud.plumbing import storage

    blob = storage.client().bucket(bucket).get_blob(name)
    if blob is None:
        raise Unreadable("view.json is gone from the bucket")
    if blob.size is not None and blob.size > limit:
        raise _too_big(int(blob.size), limit)
    return bytes(blob.download_as_bytes(start=0, end=limit))


class Listing:
    """`scan(logdir)` remembered for a few seconds, refreshed by one thread at a time. TensorBoard asks is_active on
    every page load, on its own request thread, so `active` answers from the last listing and waits at most a moment
    for one under way (a slow bucket never holds the whole UI); the routes wait for a fresh one. Lookups by key go
    through it, so a page can only ask for runs it was shown."""

    def __init__(self, logdir: str | Mapping[str, str | None], ttl_s: float = LISTING_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        # A logdir, or --logdir_spec's folders each with its name (None for none): TensorBoard names a run under a
        # named folder NAME/RELATIVE_PATH (plugin_event_multiplexer.py AddRunsFromDirectory), and so do the keys here.
        self._roots = {logdir: None} if isinstance(logdir, str) else dict(logdir)
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: list[Found] = []
        self._at: float | None = None
        self._pending: threading.Event | None = None  # set when the listing under way is done
        self.error: str | None = None  # why the last listing failed (no credentials, no such bucket) or was cut, one line

    def runs(self, wait_s: float | None = None) -> list[Found]:
        """The runs, listed afresh where the last listing is older than the TTL: waited for up to `wait_s` (no bound by
        default), else the last listing's runs while the new one goes on in the background."""
        with self._lock:
            pending = self._pending
            if pending is None and (self._at is None or self._clock() - self._at >= self._ttl_s):
                pending = self._pending = threading.Event()
                threading.Thread(target=self._refresh, args=(pending,), name="tpuctl-listing", daemon=True).start()
        if pending is not None:
            pending.wait(wait_s)
        with self._lock:
            return self._runs

    def active(self) -> bool:
        """Whether the logdir holds a run, for is_active: cheap, at most ACTIVE_WAIT_S."""
        return bool(self.runs(wait_s=ACTIVE_WAIT_S))

    def _refresh(self, done: threading.Event) -> None:
        started = self._clock()
        runs: list[Found] = []
        errors = []
        for root, name in self._roots.items():
            try:
                found, cut = scan(root)
            except Exception as e:  # noqa: BLE001 - the storage client's, google-auth's or the OS's: each means no runs, said in a line
                _log.warning("tpuctl: cannot list %s", root, exc_info=True)
                found, cut = [], f"cannot list {root}: " + one_line(str(e) or type(e).__name__)
            runs += [Found(f"{name}/{run.key}", run.run_id, run.where) for run in found] if name else found
            errors += [cut] if cut else []
        with self._lock:
            self._runs, self.error, self._at, self._pending = sorted(runs, key=lambda f: f.key), "; ".join(errors) or None, started, None
        done.set()

    def get(self, key: str) -> Found | None:
        return next((run for run in self.runs() if run.key == key), None)

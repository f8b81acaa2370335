"""One poll of a model directory: new scalars, other summaries, checkpoints and damage, each once.

Event files are found by name (`*.tfevents*`) anywhere below the root, so
train/, validation/ and run folders that appear later are all picked up.
Checkpoints are announced from TensorFlow's `checkpoint` state files once
their `.index` exists (before that the checkpoint is still being written),
and Keras `.weights.h5` / `.keras` files when they appear or change.
"""

from __future__ import annotations

import fnmatch
import gc
import posixpath
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from tpuctl.watch.events import Decoder, Scalar
from tpuctl.watch.records import HEADER, HEADER_SIZE, MAX_RECORD, RecordBuffer, masked_crc
from tpuctl.watch.sources import FileInfo, Source

READ_CHUNK = 4 << 20  # bytes per read (and per update): bounded memory, however large the file
# Bytes read of a `checkpoint` state file, its start: TensorFlow writes the newest checkpoint's line first, then one
# line (~60 bytes) and a timestamp line a kept checkpoint: 4 MiB is tens of thousands kept (max_to_keep=None). A file
# by that name that is larger (a stranger's, in a shared model dir) is read no further.
STATE_LIMIT = 4 << 20
_STATE_ENTRY = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths):\s*"((?:[^"\\]|\\.)*)"', re.M)
_STEP = re.compile(r"(\d+)(?!.*\d)")
KERAS_SUFFIXES = (".weights.h5", ".keras")
# Keras writes .weights.h5 in place, with no marker like a TF checkpoint's .index:
# a file is announced once it has not changed for this long.
KERAS_SETTLE_S = 1.0


def is_event_file(path: str) -> bool:
    return ".tfevents" in posixpath.basename(path)


def run_of(path: str) -> str:
    """The run an event file belongs to: its folder below the root ("." for the root itself)."""
    return posixpath.dirname(path) or "."


@dataclass(frozen=True)
class Checkpoint:
    run: str
    path: str  # relative to the root
    step: int | None
    wall_time: float
    kind: str  # "checkpoint", "backup" (BackupAndRestore) or "keras"


@dataclass(frozen=True)
class Damage:
    file: str
    offset: int
    reason: str


@dataclass
class Update:
    # (run, file, scalars in file order): one batch per chunk read, no per-event wrapping
    batches: list[tuple[str, str, list[Scalar]]] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    others: Counter[str] = field(default_factory=Counter)  # plugin or kind -> new count
    bytes_read: int = 0
    records: int = 0

    def __bool__(self) -> bool:
        return bool(self.batches or self.checkpoints or self.damage or self.others)

    def scalars(self) -> Iterator[tuple[str, str, Scalar]]:
        for run, file, scalars in self.batches:
            for scalar in scalars:
                yield run, file, scalar

    def merge(self, other: Update) -> None:
        self.batches += other.batches
        self.checkpoints += other.checkpoints
        self.damage += other.damage
        self.others.update(other.others)
        self.bytes_read += other.bytes_read
        self.records += other.records


@dataclass
class _FileState:
    buffer: RecordBuffer = field(default_factory=RecordBuffer)
    decoder: Decoder = field(default_factory=Decoder)
    reported: int = 0  # damage entries already handed out
    not_events: bool = False


class Tailer:
    def __init__(self, source: Source, tags: tuple[str, ...] = ()) -> None:
        self.source = source
        self.tags = tags
        self.files: dict[str, _FileState] = {}
        self._seen_checkpoints: set[str] = set()
        self._wanted: dict[str, bool] = {}
        self._keras: dict[str, tuple[int, float]] = {}

    @property
    def event_files(self) -> int:
        return len(self.files)

    def wanted(self, tag: str) -> bool:
        """Tag filter, decided once per tag: it is asked for every event."""
        known = self._wanted.get(tag)
        if known is None:
            known = self._wanted[tag] = not self.tags or any(fnmatch.fnmatchcase(tag, p) for p in self.tags)
        return known

    def poll(self, *, last: bool = False) -> Update:
        """Everything new, as one update (for small polls; `updates` keeps memory bounded)."""
        whole = Update()
        for update in self.updates(last=last):
            whole.merge(update)
        return whole

    def updates(self, *, last: bool = False) -> Iterator[Update]:
        """Everything new, one update per chunk read, then one with the checkpoints.

        `last`: no later poll will come (--once, the end of a launch), so files
        that may still be settling are announced now rather than never.
        """
        listing = self.source.list()
        for info in sorted(listing, key=lambda i: i.path):
            if is_event_file(info.path):
                yield from self._read_events(info)
        checkpoints = Update()
        self._checkpoints({info.path: info for info in listing}, checkpoints, last)
        yield checkpoints

    def _read_events(self, info: FileInfo) -> Iterator[Update]:
        state = self.files.setdefault(info.path, _FileState())
        if state.not_events:
            return
        if info.size < state.buffer.offset:
            yield Update(damage=[Damage(info.path, info.size, "file shrank (replaced?); reading it again from the start")])
            state = self.files[info.path] = _FileState()
        run = run_of(info.path)
        while state.buffer.offset < info.size:
            end = min(info.size, state.buffer.offset + READ_CHUNK)
            try:
                chunk = self.source.read(info.path, state.buffer.offset, end)
            except FileNotFoundError:
                return
            if not chunk:
                return
            update = Update(bytes_read=len(chunk))
            if state.buffer.offset == 0 and not _starts_like_records(chunk):
                if len(chunk) < HEADER_SIZE:
                    return  # too little written yet to tell
                state.not_events = True
                update.damage.append(Damage(info.path, 0, "not an event file (its first bytes are no record header); ignored"))
                yield update
                return
            scalars, update.records = _scan(state.decoder, state.buffer, chunk)
            if self.tags:
                scalars = [scalar for scalar in scalars if self.wanted(scalar[0])]
            if scalars:
                update.batches.append((run, info.path, scalars))
            update.others.update(state.decoder.others)
            state.decoder.others.clear()
            for found in state.buffer.damage[state.reported :]:
                update.damage.append(Damage(info.path, found.offset, found.reason))
            state.reported = len(state.buffer.damage)
            yield update

    def _checkpoints(self, by_path: dict[str, FileInfo], update: Update, last: bool) -> None:
        for path, info in by_path.items():
            name = posixpath.basename(path)
            if name == "checkpoint":
                self._state_file(path, by_path, update)
            elif name.endswith(KERAS_SUFFIXES):
                mark = (info.size, info.mtime)
                if not last and time.time() - info.mtime < KERAS_SETTLE_S:
                    continue  # probably still being written; a later poll sees it finished
                if self._keras.get(path) != mark:
                    self._keras[path] = mark
                    update.checkpoints.append(Checkpoint(run_of(path), path, _step(name), info.mtime, "keras"))
        # By step, as training wrote them: a listing's order puts epoch-10 before epoch-02, and files
        # copied or restored together share one mtime. Without a step, by time, after those with one.
        update.checkpoints.sort(key=lambda c: (c.step is None, c.step or 0, c.wall_time, c.path))

    def _state_file(self, path: str, by_path: dict[str, FileInfo], update: Update) -> None:
        try:
            text = self.source.read(path, 0, min(by_path[path].size, STATE_LIMIT)).decode("utf-8", "replace")
        except FileNotFoundError:
            return
        folder = posixpath.dirname(path)
        kind = "backup" if _is_backup(folder) else "checkpoint"
        for _, raw in _STATE_ENTRY.findall(text):
            prefix = raw.replace('\\"', '"')
            relative = posixpath.normpath(posixpath.join(folder, prefix)) if not posixpath.isabs(prefix) else prefix
            key = _relative_to_root(relative, by_path)
            if key is None or key in self._seen_checkpoints:
                continue
            index = by_path.get(key + ".index")
            if index is None:
                continue  # still being written; the .index comes last
            self._seen_checkpoints.add(key)
            update.checkpoints.append(Checkpoint(folder or ".", key, _step(posixpath.basename(key)), index.mtime, kind))


def _scan(decoder: Decoder, buffer: RecordBuffer, chunk: bytes) -> tuple[list[Scalar], int]:
    """Scan with the cyclic garbage collector paused: the loop makes no cycles, only many
    small tuples, and collections triggered by them cost about 15% of the tail's time."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return decoder.scan(buffer, chunk)
    finally:
        if paused:
            gc.enable()


def _starts_like_records(chunk: bytes) -> bool:
    """Whether a file's first 12 bytes are a valid record header (checked once, at offset 0)."""
    if len(chunk) < HEADER_SIZE:
        return False
    length: int
    crc: int
    length, crc = HEADER.unpack_from(chunk, 0)
    return length <= MAX_RECORD and masked_crc(chunk[:8]) == crc


def _relative_to_root(path: str, by_path: dict[str, FileInfo]) -> str | None:
    """State files may hold absolute paths (TF1, some writers); match them to our listing by suffix."""
    if not posixpath.isabs(path):
        return path
    for candidate in by_path:
        if candidate.endswith(".index") and path.endswith("/" + candidate[: -len(".index")]):
            return candidate[: -len(".index")]
    return None


def _is_backup(folder: str) -> bool:
    """tf-keras BackupAndRestore keeps its checkpoints in BACKUP_DIR/chief (and workertemp_N)."""
    parts = folder.split("/")
    return "backup" in parts or (parts[-1] == "chief" and len(parts) > 1)


def _step(name: str) -> int | None:
    found = _STEP.search(name.replace(".weights.h5", "").replace(".keras", ""))
    return int(found.group(1)) if found else None

"""Where a model directory lives: a local folder or a gs:// prefix, listed and read by byte range.

A tail polls every second or so; each poll lists the tree (names and sizes)
and reads only the byte ranges that grew, so a 50 MB event file is never
fetched twice. Non-chief workers' scratch folders are never entered:
`workertemp_*` (tf-keras callbacks, tpuctl.runtime.write_dir) and
`tmp_worker_*` (Estimator's multi-worker training).
"""

from __future__ import annotations

import builtins
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError
from tpuctl.inputs.parse import shown

SKIPPED_PREFIXES = ("workertemp_", "tmp_worker_")


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the source's root, with "/" separators
    size: int
    mtime: float


class Source(Protocol):
    root: str

    def list(self) -> list[FileInfo]: ...
    def read(self, path: str, start: int, end: int) -> bytes: ...


def open_source(location: str) -> Source:
    if location.startswith("gs://"):
        return GcsSource(location)
    if "://" in location:
        scheme = location.split("://", 1)[0]
        raise TpuctlError(f"cannot tail {scheme}:// paths", hint="tpuctl tail reads local folders and gs://BUCKET/PATH")
    return LocalSource(location)


class LocalSource:
    def __init__(self, root: str) -> None:
        self.root = root
        self._base = Path(root)
        try:
            mode = self._base.stat().st_mode
        except FileNotFoundError:
            raise TpuctlError(f"{root} does not exist", hint="give the --model-dir of a run", exit_code=FAILED) from None
        except PermissionError:
            raise TpuctlError(f"{root}: permission denied", exit_code=FAILED) from None
        except OSError as err:
            # A name too long for the OS (ENAMETOOLONG) or a symlink loop (ELOOP) is bad input, not a crash.
            bad_input = err.errno in (errno.ENAMETOOLONG, errno.ELOOP)
            reason = err.strerror or err.__class__.__name__
            raise TpuctlError(f"cannot tail {shown(root)}: {reason}", exit_code=USAGE if bad_input else FAILED) from None
        self._single = stat.S_ISREG(mode)  # a single event file may be tailed by itself

    def list(self) -> list[FileInfo]:
        if self._single:
            info = self._base.stat()
            return [FileInfo(self._base.name, info.st_size, info.st_mtime)]
        found: list[FileInfo] = []
        self._walk(found)
        return found

    def _walk(self, found: builtins.list[FileInfo]) -> None:  # `list` is a method here
        """Every regular file below the model dir, into `found`: a folder at a time from a stack of its own, not a
        call a level (a model dir 1,200 deep would end in RecursionError)."""
        folders = [(self._base, "")]
        while folders:
            folder, prefix = folders.pop()
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue  # removed between listing and reading: it simply has nothing now
            except PermissionError:
                if not prefix:
                    raise TpuctlError(f"{self.root}: permission denied", exit_code=FAILED) from None
                continue
            for entry in entries:
                name = prefix + entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not entry.name.startswith(SKIPPED_PREFIXES):
                            folders.append((Path(entry.path), name + "/"))
                    elif entry.is_file():
                        info = entry.stat()
                        found.append(FileInfo(name, info.st_size, info.st_mtime))
                except OSError:
                    continue  # vanished or unreadable entry: skip it this round

    def read(self, path: str, start: int, end: int) -> bytes:
        target = self._base if self._single else self._base / path
        with open(target, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)


class StorageUnreachable(ConnectionError):
    """Storage did not answer within RETRY_S (refused, unreachable, timing out, 5xx).

    A ConnectionError, so the follow loop treats it as passing: following, the
    next poll tries again; with --once it is the one-line error, exit 1."""


# google-cloud-storage retries a failed call for up to 120 s by default (98 s was seen
# before a RetryError traceback). A tail retries for a few seconds per poll: following,
# the next poll is the next retry; once, the user learns in seconds, not minutes.
RETRY_S = 5.0
TIMEOUT_S = (5.0, 60.0)  # connect, read: the whole reply (a listing page, a range of tailer.READ_CHUNK at most) within it


class GcsSource:
    """google-cloud-storage: a prefix listing per poll, ranged GETs for what grew.

    Honours STORAGE_EMULATOR_HOST (how tests reach a local emulator). Every call
    is bounded: RETRY_S of retries, TIMEOUT_S per request (docs/tail.md).
    """

    def __init__(self, location: str) -> None:
        from google.cloud.storage.retry import DEFAULT_RETRY

        from tpuctl.cloud.plumbing import storage

        self.root = location
        bucket, _, prefix = location[len("gs://") :].partition("/")
        if not bucket:
            raise TpuctlError(f"{location} names no bucket", hint="gs://BUCKET/PATH")
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._bucket = storage.client(small_replies=True).bucket(bucket)  # each reply whole within TIMEOUT_S's read time
        self._checked = False
        self._retry = DEFAULT_RETRY.with_timeout(RETRY_S).with_delay(initial=0.25, maximum=2.0)

    def list(self) -> list[FileInfo]:
        from google.api_core import exceptions as api

        try:
            if not self._checked:
                if not self._bucket.exists(timeout=TIMEOUT_S, retry=self._retry):
                    raise TpuctlError(f"bucket gs://{self._bucket.name} does not exist", exit_code=FAILED)
                self._checked = True
            blobs = list(self._bucket.list_blobs(prefix=self._prefix, timeout=TIMEOUT_S, retry=self._retry))
        except api.Forbidden:
            raise TpuctlError(f"permission denied listing {self.root}", hint="the account needs storage.objects.list", exit_code=FAILED) from None
        except api.RetryError as err:
            raise _unreachable(err) from None
        found = []
        for blob in blobs:
            name = blob.name[len(self._prefix) :]
            if not name or name.endswith("/") or any(part.startswith(SKIPPED_PREFIXES) for part in name.split("/")[:-1]):
                continue
            found.append(FileInfo(name, int(blob.size or 0), blob.updated.timestamp() if blob.updated else 0.0))
        return found

    def read(self, path: str, start: int, end: int) -> bytes:
        from google.api_core import exceptions as api

        blob = self._bucket.blob(self._prefix + path)
        try:
            data: bytes = blob.download_as_bytes(start=start, end=end - 1, checksum=None, timeout=TIMEOUT_S, retry=self._retry)
        except api.NotFound:
            raise FileNotFoundError(path) from None  # removed since the listing: nothing to read now
        except api.RequestRangeNotSatisfiable:
            return b""  # rewritten shorter since the listing; the next poll sees its new size
        except api.RetryError as err:
            raise _unreachable(err) from None
        return data


def _unreachable(err: Exception) -> StorageUnreachable:
    """One short reason out of a RetryError, whose text nests urllib3's whole story."""
    from tpuctl.inputs.errors import one_line

    cause = getattr(err, "cause", None) or err.__cause__ or err
    text = str(cause)
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    reason = errno.group(0) if errno else one_line(text, 160) or type(cause).__name__
    return StorageUnreachable(f"no answer from storage after {RETRY_S:g} s of retries: {reason}")

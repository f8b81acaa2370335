"""The worker files of one captured session: `<dir>/plugins/profile/<session>/*.xplane.pb`, TensorBoard's layout.

A dir is the run's model dir (or log dir), local or gs://. Sessions are named by TensorFlow after the time the
capture began (YYYY_MM_DD_HH_MM_SS), so the newest is the greatest name. gs:// files are downloaded, because
xprof's converters read local files only; they keep the session's name as their folder, which the verdict shows.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tpuctl.inputs.errors import FAILED, TpuctlError

PROFILE_PATH = "plugins/profile"
SUFFIX = ".xplane.pb"
# One-shot reads: a few tries over seconds, not google-cloud-storage's default two minutes of retries.
_RETRY_S = 30.0
_TIMEOUT_S = (5.0, 120.0)  # connect, read (per socket read, not per download)


def session_files(profile_dir: str, session: str | None = None) -> list[Path]:
    """The `.xplane.pb` files of the newest session under `profile_dir` (or the one named), one per worker, sorted.
    A TpuctlError (one line) where there is no such session or it holds no worker file."""
    if profile_dir.startswith("gs://"):
        return _from_bucket(profile_dir, session)
    root = Path(profile_dir) / PROFILE_PATH
    names = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    chosen = _choose(names, session, str(root))
    files = sorted((root / chosen).glob("*" + SUFFIX))
    if not files:
        raise TpuctlError(f"profile session {chosen} holds no {SUFFIX} files", hint=f"look in {root / chosen}", exit_code=FAILED)
    return files


def _choose(names: list[str], session: str | None, where: str) -> str:
    if not names:
        raise TpuctlError(f"no profile sessions in {where}", hint="capture one with tpuctl profile", exit_code=FAILED)
    if session is None:
        return names[-1]
    if session not in names:
        raise TpuctlError(f"no profile session {session} in {where}", hint="sessions there: " + ", ".join(names[-5:]), exit_code=FAILED)
    return session


def _from_bucket(profile_dir: str, session: str | None) -> list[Path]:
    """Lists the sessions in the bucket and downloads the chosen one's worker files into a folder removed at exit."""
    from google.api_core import exceptions as api
    from google.cloud.storage.retry import DEFAULT_RETRY

    from tpuctl.cloud.plumbing import storage

    bucket_name, _, prefix = profile_dir[len("gs://") :].partition("/")
    if not bucket_name:
        raise TpuctlError(f"{profile_dir} names no bucket", hint="gs://BUCKET/PATH")
    root = "/".join(p for p in (prefix.strip("/"), PROFILE_PATH) if p) + "/"
    retry = DEFAULT_RETRY.with_timeout(_RETRY_S)
    bucket = storage.client().bucket(bucket_name)
    try:
        blobs: list[Any] = list(bucket.list_blobs(prefix=root, timeout=_TIMEOUT_S, retry=retry))
        by_session: dict[str, list[Any]] = {}
        for blob in blobs:
            parts = blob.name[len(root) :].split("/")
            if len(parts) == 2 and parts[1]:
                by_session.setdefault(parts[0], []).append(blob)
        chosen = _choose(sorted(by_session), session, f"gs://{bucket_name}/{root}")
        workers = sorted((b for b in by_session[chosen] if b.name.endswith(SUFFIX)), key=lambda b: b.name)
        if not workers:
            raise TpuctlError(f"profile session {chosen} holds no {SUFFIX} files", hint=f"look in gs://{bucket_name}/{root}{chosen}/", exit_code=FAILED)
        folder = Path(tempfile.mkdtemp(prefix="tpuctl-profile-")) / chosen
        atexit.register(shutil.rmtree, folder.parent, ignore_errors=True)
        folder.mkdir()
        files = []
        for blob in workers:
            files.append(folder / blob.name.rsplit("/", 1)[-1])
            blob.download_to_filename(str(files[-1]), timeout=_TIMEOUT_S, retry=retry)
    except api.NotFound:
        raise TpuctlError(f"bucket gs://{bucket_name} does not exist", exit_code=FAILED) from None
    except api.Forbidden:
        raise TpuctlError(f"permission denied reading {profile_dir}", hint="the account needs storage.objects.list and get", exit_code=FAILED) from None
    except api.RetryError as err:
        raise TpuctlError(f"no answer from storage after {_RETRY_S:g} s of retries reading {profile_dir}", exit_code=FAILED) from err
    return files

"""The script's folder as a pip-installable bundle, uploaded to a staging bucket for a Vertex job.

Vertex installs every `packageUris` entry with pip before it runs
`python -m <pythonModule>`. The bundle is a source distribution holding two
packages: tpuctl's worker runtime (tpuctl/launch/runtime_files.py: the runtime and
what it imports, as ssh hosts get it; it must match this launcher) and
`tpuctl_job`, the script's folder as it is here, less what the ignore file
(`.tpuctlignore`, else `.gitignore`) and the usual caches leave out. Inside
the job, tpuctl/runtime/bundle.py finds that folder and runs the script in it.

The launch's --requirements go in as the bundle's `install_requires`: pip installs a package's
install_requires with it, so Vertex's own install of the bundle installs them, before the script
runs (Vertex's guide to a training application for a prebuilt container declares a package's
dependencies there: https://cloud.google.com/vertex-ai/docs/training/create-python-pre-built-container;
AI Platform's said pip installs them with the package: https://cloud.google.com/ai-platform/training/docs/packaging-trainer).

Symlinks are followed only where they stay inside the folder: a link to
~/.ssh must not end up in a bucket.
"""

from __future__ import annotations

import fnmatch
import io
import os
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.launch import runtime_files

PACKAGE = "tpuctl_job"
DIST = "tpuctl-job-0.0.0"
FILE_NAME = f"{DIST}.tar.gz"
IGNORE_FILES = (".tpuctlignore", ".gitignore")
# Never worth shipping: version control, virtualenvs, caches.
ALWAYS_IGNORED = (".git/", ".hg/", ".svn/", ".venv/", "venv/", "__pycache__/", "*.pyc", ".mypy_cache/", ".pytest_cache/", ".ipynb_checkpoints/")
MAX_BYTES = 256 * 1024 * 1024  # data belongs in a bucket of its own, not in the code bundle
MAX_FILES = 20_000
# Folders below the script's folder a bundle may nest: past any package's layout. os.walk recurses once a level before
# Python 3.12, so a folder 1,000 deep would end in RecursionError; a deeper one is refused in one line instead.
MAX_DEPTH = 100
_SETUP = '''from setuptools import setup

setup(
    name="tpuctl-job",
    version="0.0.0",
    description="A training script's folder and the tpuctl runtime that runs it (made by tpuctl launch --backend vertex)",
    packages={packages!r},
    package_data={{"": ["**/*"]}},
    install_requires={requires!r},
)
'''


@dataclass(frozen=True)
class Bundle:
    data: bytes
    files: int  # of the script's folder
    skipped_links: tuple[str, ...]  # symlinks leading out of the folder, left out


def _patterns(folder: Path) -> list[str]:
    for name in IGNORE_FILES:
        path = folder / name
        if path.is_file():
            data = inputs.read_small_bytes(path, "ignore file") or b""
            text = data.decode("utf-8", errors="replace")
            lines = [line.strip() for line in text.splitlines()]
            return [*ALWAYS_IGNORED, *(line for line in lines if line and not line.startswith(("#", "!")))]
    return list(ALWAYS_IGNORED)


def ignored(relative: str, is_dir: bool, patterns: list[str]) -> bool:
    """gitignore's common forms: `name`, `*.ext`, `dir/`, `/anchored` and `a/b` paths (no `!` re-includes)."""
    name = relative.rsplit("/", 1)[-1]
    for pattern in patterns:
        if pattern.endswith("/"):
            if not is_dir:
                continue
            pattern = pattern.rstrip("/")
        if pattern.startswith("/") or "/" in pattern.strip("/"):
            if fnmatch.fnmatchcase(relative, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def _walk(folder: Path, patterns: list[str], skipped: list[str]) -> Iterator[tuple[str, Path]]:
    """(path in the bundle, file) for every file to ship, in a stable order."""
    root = folder.resolve()
    for current, dirs, files in os.walk(folder):
        here = Path(current)
        relative_dir = here.relative_to(folder).as_posix()
        prefix = "" if relative_dir == "." else relative_dir + "/"
        kept = []
        for name in sorted(dirs):
            path = here / name
            if path.is_symlink():
                skipped.append(prefix + name)  # a linked folder could be anything, even the folder itself
            elif not ignored(prefix + name, True, patterns):
                kept.append(name)
        dirs[:] = kept
        if dirs and prefix.count("/") >= MAX_DEPTH:
            where = f"{one_line(str(folder))} nests folders deeper than {MAX_DEPTH} levels (at {one_line(prefix, 120)})"
            raise TpuctlError(where, hint="ship the code alone: data belongs in a bucket")
        for name in sorted(files):
            path = here / name
            if ignored(prefix + name, False, patterns):
                continue
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(root) or not target.is_file():
                    skipped.append(prefix + name)
                    continue
            elif not path.is_file():
                continue  # a FIFO or socket: nothing to ship
            yield prefix + name, path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(f"{DIST}/{name}")
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(data))


def build(script: str, requires: tuple[str, ...] = ()) -> Bundle:
    """The bundle of SCRIPT's folder, checked against the limits, in memory; `requires` (PEP 508 requirements, the
    launch's --requirements) are what pip installs with it."""
    # The folder the script is run from here (its link's, for a symlinked script), as `python SCRIPT` puts it on sys.path.
    folder = Path(os.path.abspath(script)).parent
    patterns = _patterns(folder)
    skipped: list[str] = []
    shipped = list(_walk(folder, patterns, skipped))
    name = os.path.basename(script)
    if name in skipped and os.path.isfile(script):  # a script linked from elsewhere: the user asked for it, its text goes
        skipped.remove(name)
        shipped.append((name, Path(script)))
    if name not in {shipped_name for shipped_name, _ in shipped}:
        raise TpuctlError(f"{script} is left out of the bundle by {folder}'s ignore file", hint="remove its pattern from .tpuctlignore")
    if len(shipped) > MAX_FILES:
        raise TpuctlError(f"{folder} has {len(shipped)} files to ship, more than {MAX_FILES}", hint="list data folders in .tpuctlignore")
    sizes = [(_stat_size(path), name) for name, path in shipped]
    total = sum(size for size, _ in sizes)
    if total > MAX_BYTES:
        largest = ", ".join(f"{name} ({inputs.format_size(size)})" for size, name in sorted(sizes, reverse=True)[:3])
        raise TpuctlError(
            f"{folder} holds {inputs.format_size(total)} to ship, more than {inputs.format_size(MAX_BYTES)} (largest: {largest})",
            hint="keep data in a bucket and list it in .tpuctlignore",
        )
    runtime = runtime_files.files()  # what the job's workers import of tpuctl, as ssh hosts get it
    packages = sorted(".".join(Path(name).parent.parts) for name, _ in runtime if name.endswith("/__init__.py"))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        _add(tar, "setup.py", _SETUP.format(packages=[*packages, PACKAGE], requires=list(requires)).encode())
        _add(tar, "PKG-INFO", b"Metadata-Version: 2.1\nName: tpuctl-job\nVersion: 0.0.0\n")
        for name, data in runtime:
            _add(tar, name, data)
        _add(tar, f"{PACKAGE}/__init__.py", b"")
        left = MAX_BYTES  # the total, held on the reads too: a file may have grown since its size was taken
        for name, path in shipped:
            if name != "__init__.py":
                data = _read(path, left)
                left -= len(data)
                _add(tar, f"{PACKAGE}/{name}", data)
    return Bundle(out.getvalue(), len(shipped), tuple(skipped))


def _stat_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as err:
        raise TpuctlError(f"cannot read {path}: {err.strerror or err.__class__.__name__}", exit_code=FAILED) from None


def _read(path: Path, left: int) -> bytes:
    """The file's bytes, at most `left` (what the bundle's limit leaves), from a descriptor on a regular file:
    the sizes were checked by stat, but the file may have grown, or become a FIFO, since."""
    data = inputs.read_small_bytes(path, "file to ship", limit=MAX_BYTES, exit_code=FAILED)
    if data is None:
        raise TpuctlError(f"cannot read {path}: it went away while the bundle was made", exit_code=FAILED)
    if len(data) > left:
        raise TpuctlError(f"{path} grew while the bundle was made, past its limit of {inputs.format_size(MAX_BYTES)}", exit_code=FAILED)
    return data


def staged_uri(staging: str, run_id: str) -> str:
    """Where a run's bundle goes: gs://BUCKET/PATH/tpuctl-staging/RUN_ID/tpuctl-job-0.0.0.tar.gz."""
    return f"{staging.rstrip('/')}/tpuctl-staging/{run_id}/{FILE_NAME}"


def upload(bundle: Bundle, uri: str) -> None:
    """Write the bundle once (never over another object); a missing bucket or a refusal is one line."""
    from google.api_core import exceptions as api

    from tpuctl.cloud.plumbing import api_errors, storage

    bucket_name, _, name = uri[len("gs://") :].partition("/")
    blob = storage.client().bucket(bucket_name).blob(name)
    try:
        blob.upload_from_string(bundle.data, content_type="application/gzip", if_generation_match=0, timeout=120)
    except api.NotFound:
        raise TpuctlError(
            f"staging bucket gs://{bucket_name} does not exist", hint="create it in the job's region, or pass another --staging-bucket", exit_code=FAILED
        ) from None
    except api.Forbidden as err:
        raise TpuctlError(
            f"cannot write {uri}: {one_line(str(err.message), 160)}",
            hint="the account needs storage.objects.create there (tpuctl auth --vertex)",
            exit_code=FAILED,
        ) from None
    except api.PreconditionFailed:
        raise TpuctlError(f"{uri} already exists", hint="each launch stages under its own run id; was this one started twice?", exit_code=FAILED) from None
    except Exception as exc:
        if api_errors.is_api_failure(exc):  # a refused name, an outage after retries, lost credentials
            raise TpuctlError(f"cannot write {uri}: {one_line(str(getattr(exc, 'message', '') or exc), 200)}", exit_code=FAILED) from None
        raise

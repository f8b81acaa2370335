"""Where a lock's wheels are kept, so that one resolution feeds every host, and every host a preemption brings back.

The first host resolves and downloads the wheels (the only host that asks the package index). The launcher then
pulls them from it once (a tar over the ssh connection it already has) into its own cache, and:

* with a model dir on Cloud Storage, uploads them to the run's bucket (gs://BUCKET/tpuctl/wheels/LOCK/), once per
  lock, with tpuctl's storage client (the user's credentials, STORAGE_EMULATOR_HOST honoured); every other host
  fetches them from there itself (the JSON API, the VM's own token from its metadata server), in parallel: the
  launcher's uplink carries them once, however many hosts a slice has;
* otherwise sends them, from its cache, to the one host of each Python that builds the environment and lacks them
  (the others of that Python get a copy of the built environment instead: copies.py).

Why the launcher, not host to host: the hosts of a --hosts list need not reach each other over ssh, and a TPU VM's
workers have no keys for one another; the launcher reaches all of them already. Why its own cache: a VM recreated
after a preemption has lost host 0's copy with the rest of its disk, and must not ask the index again (the index
may have moved, or be down). Every wheel is checked against the lock's SHA-256 wherever it lands.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from tpuctl.backends.ssh.environment import remote
from tpuctl.backends.ssh.environment.host_env import CHUNK, COMPLETE
from tpuctl.backends.ssh.environment.lock import Lock, Wheel
from tpuctl.backends.ssh.environment.setup_output import started, stopped
from tpuctl.backends.ssh.environment.spec import BUCKET_FOLDER
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.parse import read_small_bytes
from tpuctl.inputs.private_files import private_dir, write_private
from tpuctl.safety import reaper
from tpuctl.ssh.client_args import SshOptions

PULL_TIMEOUT_S = 1800.0  # the lock's wheels from a host, whatever their size


def launcher_cache() -> Path:
    """This machine's copy of every lock's wheels (platformdirs' user cache: XDG_CACHE_HOME/tpuctl/wheels)."""
    from platformdirs import user_cache_path

    return user_cache_path("tpuctl") / "wheels"


class WheelStore:
    """A lock's wheels: this machine's copy, the run's bucket, and how hosts get them."""

    def __init__(self, ssh: SshOptions, python: str, bucket: str | None, scrub: Callable[[str], str]) -> None:
        self.ssh = ssh
        self.python = python
        self.bucket = bucket
        self.scrub = scrub
        self._in_bucket: set[str] = set()

    def folder(self, lock: Lock) -> Path:
        return launcher_cache() / lock.digest

    def kept(self, lock: Lock) -> bool:
        """This machine has the lock's wheels (each was checked against the lock as it was written)."""
        folder = self.folder(lock)
        return (folder / COMPLETE).is_file() and all((folder / wheel.file).is_file() for wheel in lock.wheels)

    def remember(self, request: str, lock: Lock, warn: Callable[[str], None]) -> None:
        """The lock a request resolved to on hosts of one Python and platform (`request`: a digest of both), so that a
        later launch whose hosts are all new (each `--new-tpu` run's VM is) installs it without resolving again. A
        failure is a warning: the launch has its environment; only a later one resolves again."""
        folder = launcher_cache() / "requests"
        try:
            private_dir(folder)
            write_private(folder / request, json.dumps(lock.to_json()))
        except (OSError, TpuctlError) as err:
            warn(f"warning: cannot remember the resolved lock in {folder}: {err.strerror if isinstance(err, OSError) else err}")

    def recalled(self, request: str) -> Lock | None:
        """The lock `request` resolved to last, where this machine still keeps its wheels; else None."""
        try:
            lock = Lock.of(json.loads(read_small_bytes(launcher_cache() / "requests" / request, "lock", limit=16 << 20) or b"null"))
        except (TpuctlError, ValueError):
            return None
        return lock if self.kept(lock) else None

    def pull(self, host: str, lock: Lock) -> None:
        """The lock's wheels from `host` (which has them) into this machine's cache, each checked."""
        if self.kept(lock):
            return
        root = launcher_cache()
        with cache_writes(root, "keep the environment's wheels"):
            private_dir(root)
            fresh = Path(tempfile.mkdtemp(prefix=".new-", dir=root))
            try:
                with tempfile.TemporaryFile(dir=root) as stream:
                    argv = remote.command(self.python, "pack", lock.digest)
                    pull(self.ssh, host, argv, stream, "the environment's wheels", self.scrub, limit=tar_bound(lock))
                    stream.seek(0)
                    _untar(stream, lock, fresh, host)
                (fresh / COMPLETE).write_text(lock.digest + "\n")
                target = self.folder(lock)
                if target.exists():
                    _remove(target)
                fresh.rename(target)
            finally:
                _remove(fresh)

    def payload(self, lock: Lock, header: bytes) -> IO[bytes]:
        """What a host that gets the wheels from this machine reads on its stdin: the header, then the wheels' tar. A
        named file, so that each host's ssh reads it through a descriptor of its own."""
        with cache_writes(launcher_cache(), "write the wheels to send"):
            stream = tempfile.NamedTemporaryFile(dir=launcher_cache(), prefix=".send-")  # noqa: SIM115 - the caller closes it
            try:
                stream.write(header)
                with tarfile.open(fileobj=stream, mode="w|") as tar:
                    for wheel in lock.wheels:
                        tar.add(self.folder(lock) / wheel.file, arcname=wheel.file, recursive=False)
                stream.flush()
            except BaseException:
                stream.close()
                raise
        return stream

    # ---- the run's bucket --------------------------------------------------------------------------

    def prefix(self, lock: Lock) -> str:
        return f"{BUCKET_FOLDER}{lock.digest}/"

    def in_bucket(self, lock: Lock) -> bool:
        """Every wheel of the lock is in the run's bucket, at its size (a run before this one put them there)."""
        if self.bucket is None:
            return False
        if lock.digest in self._in_bucket:
            return True
        with self._calling(f"cannot list gs://{self.bucket}/{self.prefix(lock)}"):
            found = {blob.name: blob.size for blob in self._bucket().list_blobs(prefix=self.prefix(lock), timeout=60)}
        if all(found.get(self.prefix(lock) + wheel.file) == wheel.size for wheel in lock.wheels):
            self._in_bucket.add(lock.digest)
            return True
        return False

    def upload(self, lock: Lock) -> None:
        """This machine's copy of the lock's wheels into the run's bucket, each one not there yet."""
        assert self.bucket is not None
        from google.api_core import exceptions

        with self._calling(f"cannot keep the wheels in gs://{self.bucket}"):
            bucket = self._bucket()
            for wheel in lock.wheels:
                blob = bucket.blob(self.prefix(lock) + wheel.file)
                with contextlib.suppress(exceptions.PreconditionFailed):  # there already (another run of the same lock): its name is its content's hash's
                    blob.upload_from_filename(str(self.folder(lock) / wheel.file), if_generation_match=0, timeout=600)
        self._in_bucket.add(lock.digest)

    @contextlib.contextmanager
    def _calling(self, doing: str) -> Iterator[None]:
        """The bucket's failures in one line (a refusal, a missing bucket, an outage after retries, lost credentials,
        no connection: tpuctl.cloud.plumbing.api_errors.is_api_failure); anything else as it is (a bug)."""
        from google.api_core import exceptions

        from tpuctl.cloud.plumbing import api_errors

        try:
            yield
        except exceptions.NotFound:
            raise TpuctlError(f"bucket gs://{self.bucket} does not exist", hint="the model dir's bucket keeps the wheels", exit_code=FAILED) from None
        except Exception as err:
            if not (isinstance(err, exceptions.GoogleAPIError) or api_errors.is_api_failure(err)):  # RetryError is no GoogleAPICallError
                raise
            raise TpuctlError(f"{doing}: {one_line(str(getattr(err, 'message', '') or err), 200)}", exit_code=FAILED) from None

    def from_bucket(self, lock: Lock) -> dict[str, Any]:
        """How a host reads the wheels from the bucket: the endpoint this launch uses (an emulator's, with no token;
        else the storage-endpoint setting, with the VM's own token from its metadata server)."""
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator:
            endpoint, token = emulator if "://" in emulator else f"http://{emulator}", "none"
        else:
            from tpuctl.settings import cloud as settings

            endpoint, token = settings.resolve().require("storage-endpoint"), "metadata"
        return {"endpoint": endpoint, "bucket": self.bucket, "prefix": self.prefix(lock), "token": token}

    def _bucket(self) -> Any:
        from tpuctl.cloud.plumbing import storage

        return storage.client(small_replies=True).bucket(self.bucket)


@contextlib.contextmanager
def cache_writes(folder: Path, doing: str) -> Iterator[None]:
    """This machine's cache failing to take a file (a full disk, a read-only or missing folder) as one line naming it."""
    try:
        yield
    except OSError as err:
        raise TpuctlError(f"cannot {doing} in {folder}: {err.strerror or err}", hint="tpuctl keeps them in XDG_CACHE_HOME/tpuctl", exit_code=FAILED) from None


def tar_bound(lock: Lock) -> int:
    """The most bytes the lock's wheels take as the host's tar (host_build.py's `pack`, Python's tarfile, pax): each
    member's 512-byte header, a pax header (512 bytes, and its records: the name, the mtime, which is a float, owners:
    under the name's length and 1 KiB, in 512-byte blocks), its data in 512-byte blocks; then the two zero blocks at the
    end, and the padding of the whole to tarfile's 10 KiB record."""

    def blocks(size: int) -> int:
        return -(-size // 512) * 512

    members = sum(2 * 512 + blocks(len(wheel.file.encode()) + 1024) + blocks(wheel.size) for wheel in lock.wheels)
    return members + 2 * 512 + tarfile.RECORDSIZE


def _run(argv: list[str], *, stdin: IO[bytes] | None, stdout: IO[bytes], stderr: IO[bytes] | int, timeout: float) -> int:
    """A command whose input and output are files, not memory (a lock's wheels may be GiBs); its status, 124 when its
    deadline passed (it is killed then)."""
    try:
        given = stdin if stdin is not None else subprocess.DEVNULL
        return reaper.run(argv, timeout=timeout, stdin=given, stdout=stdout, stderr=stderr, start_new_session=True).returncode
    except subprocess.TimeoutExpired:
        return 124


def pull(ssh: SshOptions, host: str, argv: list[str], into: IO[bytes], what: str, scrub: Callable[[str], str], *, limit: int) -> None:
    """`argv` on `host`, its output (a tar: GiBs, maybe, at most `limit` bytes) written to the file `into`; a failure
    in one line naming the host, in the program's words where it answered, else ssh's."""
    with tempfile.TemporaryFile() as errors:
        status = _capture(ssh.command(host, argv), into, errors, limit)
        if status is None:
            raise TpuctlError(f"{host}: sent more than {limit} bytes for {what}; stopped", exit_code=FAILED)
        if status == 0:
            return
        try:
            error = remote.answer(_tail(into, 1 << 16).decode("utf-8", "replace")).get("error")
            said = str(error.get("message")) if isinstance(error, dict) else f"status {status}"
        except remote.NoAnswer:
            said = one_line(_tail(errors).decode("utf-8", "replace"), last=True) or f"status {status}"
        raise TpuctlError(f"{host}: cannot send {what}: {scrub(one_line(said))}", exit_code=FAILED)


def _capture(argv: list[str], into: IO[bytes], errors: IO[bytes], limit: int) -> int | None:
    """A command's output copied to the file `into` as it comes, until PULL_TIMEOUT_S has passed (status 124) or
    `limit` bytes (None): the command is killed then. Else its status."""
    proc = started(argv, subprocess.DEVNULL, errors)
    assert proc.stdout is not None
    deadline, written = time.monotonic() + PULL_TIMEOUT_S, 0
    try:
        while chunk := _read(proc.stdout.fileno(), deadline):
            written += len(chunk)
            if written > limit:
                return None
            into.write(chunk)
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, TimeoutError):
        return 124
    finally:
        stopped(proc)


def _read(fd: int, deadline: float) -> bytes:
    """What the pipe `fd` has, once it has something (b"" at its end); TimeoutError past `deadline`."""
    while not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
        if time.monotonic() >= deadline:
            raise TimeoutError
    return os.read(fd, CHUNK)


def send(ssh: SshOptions, host: str, argv: list[str], payload: str, timeout: float) -> tuple[int, str]:
    """A host's command with the file `payload` on its stdin (the wheels' tar); its status and its output's tail."""
    with tempfile.TemporaryFile() as output, open(payload, "rb") as stdin:
        status = _run(ssh.command(host, argv), stdin=stdin, stdout=output, stderr=subprocess.STDOUT, timeout=timeout)
        return status, _tail(output).decode("utf-8", "replace")


def _tail(stream: IO[bytes], limit: int = remote.ANSWER_LIMIT) -> bytes:
    stream.seek(0, os.SEEK_END)
    stream.seek(max(0, stream.tell() - limit))
    return stream.read()


def _untar(stream: IO[bytes], lock: Lock, folder: Path, host: str) -> None:
    """The lock's wheels out of a host's tar: only its files, regular, each of the lock's size and hash."""
    import hashlib

    wanted: dict[str, Wheel] = {wheel.file: wheel for wheel in lock.wheels}
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                wheel = wanted.get(member.name)
                if wheel is None or not member.isfile() or member.size != wheel.size:
                    raise TpuctlError(f"{host} sent {one_line(member.name, 100)}, which is not one of the lock's wheels", exit_code=FAILED)
                source = tar.extractfile(member)
                assert source is not None
                digest = hashlib.sha256()
                with open(folder / wheel.file, "xb") as out:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                if digest.hexdigest() != wheel.sha256:
                    raise TpuctlError(f"{host} sent {wheel.file}, which does not match the lock's hash", exit_code=FAILED)
    except (tarfile.TarError, OSError) as err:
        raise TpuctlError(f"{host}: the environment's wheels did not come whole: {err}", exit_code=FAILED) from None
    missing = sorted(set(wanted) - {path.name for path in folder.iterdir()})
    if missing:
        raise TpuctlError(f"{host} did not send {', '.join(missing)}", exit_code=FAILED)


def _remove(path: Path) -> None:
    import shutil

    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)

"""The launcher's own keeping of a lock's wheels and environments (tpuctl/backends/ssh/environment/wheels.py,
copies.py) when what it writes to or reads from fails: the run's bucket (a GCS emulator), its cache folder, a host that
writes without end. Each is one line naming what failed, never a traceback, and never an unbounded file."""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.fixtures import standin_env, write_authorized_user
from tests.standins.gcs_emulator import serve
from tests.standins.google_apis import GoogleStandin
from tpuctl.backends.ssh.environment import copies, wheels
from tpuctl.backends.ssh.environment.lock import Lock
from tpuctl.backends.ssh.environment.wheels import WheelStore, tar_bound
from tpuctl.inputs.errors import TpuctlError
from tpuctl.ssh.client_args import SshOptions

DATA = b"a wheel's bytes"


def lock() -> Lock:
    return Lock.of([{"name": "x", "version": "1.0", "file": "x-1.0-py3-none-any.whl", "sha256": hashlib.sha256(DATA).hexdigest(), "size": len(DATA)}])


def store(tmp_path: Path, bucket: str | None = None) -> WheelStore:
    return WheelStore(SshOptions(control_path=str(tmp_path / "c"), attempts=1), "python3", bucket, lambda text: text)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A GCS emulator (gcp-storage-emulator) the storage client reaches through STORAGE_EMULATOR_HOST, with no buckets."""
    for url in serve():
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        yield url


def test_a_missing_bucket_when_listing_the_wheels_is_one_line(emulator: str) -> None:
    with pytest.raises(TpuctlError, match="bucket gs://no-such-bucket does not exist"):
        store(Path("/nonexistent"), "no-such-bucket").in_bucket(lock())


def test_the_cache_under_a_file_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """XDG_CACHE_HOME under a regular file (ENOTDIR; chmod stops no root): every write of the cache says so in one line,
    but a failure to remember a lock only warns: the launch has its environment."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file" / "cache"))
    kept = store(tmp_path)
    with pytest.raises(TpuctlError, match=r"cannot keep the environment's wheels in .*/file/cache/tpuctl/wheels: Not a directory"):
        kept.pull("host1", lock())
    with pytest.raises(TpuctlError, match=r"cannot write the wheels to send in .*/file/cache/tpuctl/wheels: Not a directory"):
        kept.payload(lock(), b"{}\n")
    with pytest.raises(TpuctlError, match=r"cannot keep an environment to copy in .*/file/cache/tpuctl/wheels: Not a directory"):
        copies.payload(kept.ssh, "python3", "host1", "ab" * 16, b"{}\n", kept.scrub)
    warnings: list[str] = []
    kept.remember("cd" * 16, lock(), warnings.append)
    assert len(warnings) == 1 and "cannot remember the resolved lock in" in warnings[0] and "Not a directory" in warnings[0]


def test_a_host_that_sends_more_than_the_wheels_tar_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host (here a stand-in ssh) that writes without end is cut off at the lock's tar's size, not at the deadline."""
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text(f"#!{sys.executable}\nimport os, time\nfor _ in range(64):\n    os.write(1, b'x' * (1 << 20))\ntime.sleep(60)\n")
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "PULL_TIMEOUT_S", 5.0)
    started = time.monotonic()
    with pytest.raises(TpuctlError, match=rf"^host1: sent more than {tar_bound(lock())} bytes for the environment's wheels; stopped$"):
        store(tmp_path).pull("host1", lock())
    assert time.monotonic() - started < 4
    assert not any(path.is_file() and path.stat().st_size > tar_bound(lock()) for path in (tmp_path / "cache").rglob("*"))


def test_the_bound_holds_a_real_tar_of_long_names(tmp_path: Path) -> None:
    """tar_bound is no smaller than what Python's tarfile writes for the wheels (pax headers for long names, float mtimes)."""
    import io
    import tarfile

    name = "a_" + "long" * 55 + "-1.0-py3-none-any.whl"
    (tmp_path / name).write_bytes(b"z" * 1000)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w|") as tar:
        tar.add(tmp_path / name, arcname=name, recursive=False)
    made = Lock.of([{"name": "a", "version": "1.0", "file": name, "sha256": "a" * 64, "size": 1000}])
    assert len(out.getvalue()) <= tar_bound(made)


def test_lost_credentials_when_listing_or_uploading_the_wheels_are_one_line(
    google_standin: GoogleStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh token Google no longer takes (google.auth's RefreshError, no GoogleAPIError): one line, for the listing
    and for the upload alike."""
    for name, value in standin_env(google_standin, tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TPUCTL_ACCESS_TOKEN_FILE")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("TPUCTL_STORAGE_ENDPOINT", google_standin.url)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(write_authorized_user(google_standin, tmp_path / "adc.json")))
    google_standin.refresh_token = "another"  # the file's is revoked
    kept = store(tmp_path, "my-bucket")
    with pytest.raises(TpuctlError, match=r"^cannot list gs://my-bucket/tpuctl/wheels/.*invalid_grant"):
        kept.in_bucket(lock())
    kept.folder(lock()).mkdir(parents=True)
    (kept.folder(lock()) / lock().wheels[0].file).write_bytes(DATA)
    with pytest.raises(TpuctlError, match=r"^cannot keep the wheels in gs://my-bucket: .*invalid_grant"):
        kept.upload(lock())

"""`launch --requirements` at the environment program's edges (tpuctl/backends/ssh/environment/host_build.py), over
real sshd hosts (tests/integration/sshd.py), with the real pip against a local package index of real wheels
(tests/standins/package_index.py):

* the run's bucket on real Cloud Storage: the launcher keeps the lock's wheels there with its own credentials, and a
  host reads them with its VM's token from the metadata server (tests/standins/metadata_server.py), through a gate
  that lets in only bearer tokens it knows (tests/standins/gcs_proxy.py, BearerGate, before the GCS emulator); a
  host with no metadata server says so;
* a host whose pip predates `pip install --report` (22.2): a Python 3.8 venv with pip 22.0 (Ubuntu 22.04's is 22.0.2);
* a disk that fills up under pip although the room check before it passed.

The workers are plain Python scripts (`--strategy none`: no TensorFlow).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.integration.sshd import SshCluster, free_port, running_cluster
from tests.standins.gcs_proxy import BearerGate
from tests.standins.metadata_server import MetadataServer
from tests.standins.package_index import PackageIndex, Source, Wheels
from tests.standins.tiny_wheels import make_wheel

LAUNCHER_TOKEN = "ya29.the-launcher-s-own"
BUCKET = "env-edges"
# A wheel of 100 KiB that installs 80 MiB (zeros, deflated): the room check (3x the wheel, plus 64 MiB) passes on a
# 72 MiB disk, and the install fills it.
BULKY_MIB, SMALL_DISK = 80, "72m"
WORKER = """\
import json, os, sys
from pathlib import Path
import tpuctl_test_alpha
found = {"alpha": tpuctl_test_alpha.VERSION, "python": list(sys.version_info[:2]), "prefix": sys.prefix}
(Path(os.environ["VERSIONS_OUT"]) / (os.environ["TPUCTL_WORKER_INDEX"] + ".json")).write_text(json.dumps(found))
"""


@pytest.fixture(scope="module")
def metadata() -> Iterator[MetadataServer]:
    with MetadataServer() as server:
        yield server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, metadata: MetadataServer) -> Iterator[SshCluster]:
    """host1 and host2: VMs whose metadata server answers; host3: one with none (nothing listens there); host4: its
    environments folder a disk of its own, SMALL_DISK, and a Python that reports another platform (sysconfig's
    _PYTHON_HOST_PLATFORM), so that it builds its environment with pip instead of getting host1's copy. None reads a
    pip configuration of this machine's."""
    quiet = {"PIP_CONFIG_FILE": os.devnull}
    env = {"host1": {**quiet, "GCE_METADATA_HOST": metadata.host}, "host2": {**quiet, "GCE_METADATA_HOST": metadata.host}}
    env |= {"host3": {**quiet, "GCE_METADATA_HOST": f"127.0.0.1:{free_port()}"}, "host4": {**quiet, "_PYTHON_HOST_PLATFORM": "linux-x86_64-other"}}
    yield from running_cluster(tmp_path_factory, 4, env=env, small_disks={"host4": SMALL_DISK})


def newer_pip() -> Path | None:
    """A wheel of pip 22.2 or later on this machine (Debian's, or an interpreter's bundled one): what the index serves a
    host whose pip must be made newer. None where there is none: the tests download nothing."""
    found = glob.glob("/usr/share/python-wheels/pip-*.whl") + glob.glob(f"{Path.home()}/.pyenv/versions/*/lib/python3*/ensurepip/_bundled/pip-*.whl")
    return next((Path(path) for path in sorted(found) if _version(path) >= (22, 2)), None)


def _version(wheel: str) -> tuple[int, ...]:
    return tuple(int(part) for part in Path(wheel).name.split("-")[1].split(".")[:2])


@pytest.fixture(scope="module")
def index(package_wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    """The tests' packages, tpuctl-test-bulky (BULKY_MIB of zeros) and, where this machine has one, a newer pip."""
    folder = package_wheels.folder(tmp_path_factory.mktemp("index"))
    bulky = Source("tpuctl-test-bulky", "1.0")
    make_wheel(folder, bulky.name, bulky.version, {**bulky.files(), f"{bulky.module}/blob.bin": bytes(BULKY_MIB << 20)})
    if (pip := newer_pip()) is not None:
        shutil.copyfile(pip, folder / pip.name)
    with PackageIndex(folder) as served:
        yield served


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The project: the worker, and the folder it writes what it found into (the hosts share this machine's disk)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "train.py").write_text(WORKER)
    return tmp_path


def launch(cluster: SshCluster, work: Path, hosts: str, *args: str, python: str = sys.executable, env: dict[str, str] | None = None) -> tuple[int, str]:
    """A launch of the worker from `work` (this machine's cache its own, work/cache, unless `env` says otherwise), its
    log folder a new one under work/logs; its exit status and stderr."""
    given = env if env is not None else {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}
    logs = work / "logs" / str(len(list(work.glob("logs/*"))))
    done = run_tpuctl(
        "launch", str(work / "train.py"), "--hosts", hosts, "--ssh-config", str(cluster.config), "--python", python, "--strategy", "none",
        "--log-dir", str(logs), "--env", f"VERSIONS_OUT={work / 'out'}", *args, cwd=work, env=given, timeout=300,
    )  # fmt: skip
    return done.returncode, done.stderr


def seen(work: Path) -> dict[int, dict[str, object]]:
    return {int(p.stem): json.loads(p.read_text()) for p in (work / "out").glob("*.json")}


def error_line(err: str) -> str:
    [line] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert "Traceback" not in err, err
    return line


def test_a_vm_reads_the_run_s_bucket_with_its_metadata_server_s_token_and_one_without_says_so(
    cluster: SshCluster, index: PackageIndex, metadata: MetadataServer, module_gcs_emulator: str, work: Path
) -> None:
    """As on Cloud Storage (no emulator for the launcher: the storage-endpoint setting, its own token): host1 resolves,
    the launcher keeps the lock's wheels in the bucket with its token, host2 reads them with the token its metadata
    server gives, which the gate checks. Then host3, whose metadata server does not answer, fails in one line that
    names it; host1's environment is reused."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    os.environ["STORAGE_EMULATOR_HOST"] = module_gcs_emulator
    try:
        storage.Client(project="tpuctl-emulator", credentials=AnonymousCredentials()).create_bucket(BUCKET)
    finally:
        del os.environ["STORAGE_EMULATOR_HOST"]
    (work / "token").write_text(LAUNCHER_TOKEN + "\n")
    with BearerGate(module_gcs_emulator, {LAUNCHER_TOKEN, metadata.access_token}) as gate:
        env = {key: value for key, value in os.environ.items() if key != "STORAGE_EMULATOR_HOST"}
        env |= {"XDG_CACHE_HOME": str(work / "cache"), "TPUCTL_STORAGE_ENDPOINT": gate.url, "TPUCTL_ACCESS_TOKEN_FILE": str(work / "token")}
        env |= {"TPUCTL_PROJECT": "tpuctl-test"}
        args = ["--requirements", str(work / "requirements.txt"), "--index-url", index.url, "--model-dir", f"gs://{BUCKET}/runs/one"]
        (work / "requirements.txt").write_text("tpuctl-test-alpha==1.0\n")
        code, err = launch(cluster, work, "host1,host2", *args, env=env)
        assert code == 0, err
        assert "built on host1, host2" in err and f"gs://{BUCKET}/tpuctl/wheels/" in err, err
        assert [seen(work)[i]["alpha"] for i in (0, 1)] == ["1.0", "1.0"]
        reads = [(path, token) for method, path, token in gate.seen if method == "GET" and "alt=media" in path]
        assert reads and all(token == metadata.access_token for _, token in reads), gate.seen  # host2's reads, its VM's token
        assert any(method == "POST" and token == LAUNCHER_TOKEN for method, _, token in gate.seen), gate.seen  # the upload, this machine's
        assert ("GET", "/computeMetadata/v1/instance/service-accounts/default/token", 200) in metadata.requests

        for found in (work / "out").iterdir():
            found.unlink()
        code, err = launch(cluster, work, "host1,host3", *args, env=env)
    assert code == 1, err
    line = error_line(err)
    assert line.startswith("Error: host3: cannot build its environment: no token from the metadata server to read the bucket: "), line
    assert seen(work) == {}  # no worker started


def python_with_old_pip(folder: Path) -> Path:
    """A Python 3.8 venv whose pip is older than 22.2 (this machine's 3.8 bundles pip 22.0.4 beside 23.0.1), made
    offline; a skip that says why where this machine has no Python 3.8 or no such pip."""
    bases = [*sorted(glob.glob(f"{Path.home()}/.pyenv/versions/3.8*/bin/python3.8")), shutil.which("python3.8") or ""]
    base = next((b for b in bases if b and os.access(b, os.X_OK)), None)
    if base is None:
        pytest.skip("no Python 3.8 on this machine (a TPU VM image of TensorFlow 2.12 and older runs 3.8)")
    prefix = subprocess.run([base, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    olds = [path for path in glob.glob(f"{prefix}/lib/python3.8/ensurepip/_bundled/pip-*.whl") if _version(path) < (22, 2)]
    if not olds:
        pytest.skip(f"{base} bundles no pip older than 22.2")
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    install = [str(python), f"{olds[0]}/pip", "install", "--quiet", "--no-index", "--no-deps", "--disable-pip-version-check", olds[0]]
    subprocess.run(install, check=True, capture_output=True, timeout=300, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    version = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True, check=True, timeout=60).stdout
    assert version.startswith("pip 22.") and _version(f"pip-{version.split()[1]}") < (22, 2), version
    return python


def test_a_host_whose_pip_has_no_report_gets_a_newer_one_for_the_resolution_and_runs_on_python_3_8(
    cluster: SshCluster, index: PackageIndex, work: Path
) -> None:
    """The hosts' Python is 3.8 with pip 22.0 (no `--report`, no `--dry-run`): the resolution makes its scratch venv's
    pip newer from the same index, the environment is built with the host's own pip, and the worker runs in it, on 3.8.
    The host program (and the agent, and tpuctl's runtime) run on Python 3.8."""
    if newer_pip() is None:
        pytest.skip("no wheel of pip 22.2 or later on this machine for the index to serve (the tests download nothing)")
    python = python_with_old_pip(work / "py38")
    (work / "requirements.txt").write_text("tpuctl-test-alpha==1.0\n")
    code, err = launch(cluster, work, "host1", "--requirements", str(work / "requirements.txt"), "--index-url", index.url, python=str(python))
    assert code == 0, err
    found = seen(work)[0]
    assert found["alpha"] == "1.0" and found["python"] == [3, 8] and str(found["prefix"]).startswith(str(cluster.cache(1))), found
    assert index.asked["pip"] >= 1  # the newer pip came from the index


def test_a_disk_that_fills_up_under_pip_fails_in_one_line_and_leaves_nothing(cluster: SshCluster, index: PackageIndex, work: Path) -> None:
    """host4's environments folder is a 72 MiB disk; tpuctl-test-bulky is a 100 KiB wheel that installs 80 MiB: the room
    check passes (about 64 MiB needed), pip fills the disk. One line names the host and the disk, exit 2, no worker
    started, and nothing is left on that disk: no environment (ready or not), no scratch folder, no log. (host1
    resolves: its disk holds its wheels folder too.)"""
    (work / "requirements.txt").write_text("tpuctl-test-bulky==1.0\n")
    try:
        code, err = launch(cluster, work, "host1,host4", "--requirements", str(work / "requirements.txt"), "--index-url", index.url)
    finally:
        for ready in (cluster.cache(1) / "tpuctl" / "envs").glob("*/.ready"):  # host1's 80 MiB of zeros, no use to later tests
            if "tpuctl-test-bulky" in (ready.parent / "tpuctl-lock.json").read_text():
                shutil.rmtree(ready.parent)
    assert code == 2, err
    line = error_line(err)
    envs = cluster.cache(4) / "tpuctl" / "envs"
    assert line.startswith(f"Error: host4: cannot build its environment: out of disk space in {envs} ("), line
    [pip_words] = (work / "logs").glob("*/attempt-1/environment@host4.log")  # pip itself ran out, not a check before it
    assert "No space left on device" in pip_words.read_text()
    assert seen(work) == {}
    assert list(cluster.inside(4, envs).iterdir()) == []


def test_a_host_whose_environments_folder_is_another_disk_than_its_wheels_resolves_and_keeps_its_wheels(
    cluster: SshCluster, index: PackageIndex, work: Path
) -> None:
    """host4's environments folder is a disk of its own (a cache split over mounts): its resolution downloads into a
    scratch folder there and keeps the wheels in the wheels folder, on the other disk, whole."""
    (work / "requirements.txt").write_text("tpuctl-test-alpha==1.0\n")
    code, err = launch(cluster, work, "host4", "--requirements", str(work / "requirements.txt"), "--index-url", index.url)
    assert code == 0, err
    assert seen(work)[0]["alpha"] == "1.0"
    kept = [path.name for path in cluster.inside(4, cluster.cache(4) / "tpuctl" / "wheels").glob("[!.]*/*.whl")]
    assert any(name.startswith("tpuctl_test_alpha-1.0-") for name in kept), kept

"""The hosts' environment program (tpuctl/backends/ssh/environment/host_env.py, host_build.py), run here as a host runs
it (`python -S -c SOURCE COMMAND`, a cache folder of its own for each "host", no pip configuration of this machine's),
with the real pip against a local package index of real wheels (tests/standins/package_index.py). The launch over
sshd hosts that uses it is tests/integration/test_host_environments.py."""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import alive, wait_for
from tests.standins.package_index import PackageIndex, Wheels
from tpuctl.backends.ssh.environment import remote
from tpuctl.backends.ssh.environment.host_env import REPLY, env_key, lock_digest
from tpuctl.backends.ssh.environment.lock import Lock


@pytest.fixture(scope="module")
def index(package_wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    with PackageIndex(package_wheels.folder(tmp_path_factory.mktemp("index"))) as served:
        yield served


def host_env(cache: Path) -> dict[str, str]:
    """A host's environment: its own cache folder, and no pip.conf of this machine's (its extra indexes)."""
    return {"PATH": os.environ["PATH"], "HOME": str(cache.parent), "XDG_CACHE_HOME": str(cache), "PIP_CONFIG_FILE": os.devnull}


def run(cache: Path, command: str, *args: str, header: dict[str, Any] | None = None, stdin: bytes = b"", timeout: float = 240) -> tuple[dict[str, Any], str]:
    """One command of the program, as a host runs it; its answer and its whole output."""
    given = (remote.header(header) if header is not None else b"") + stdin
    done = subprocess.run(
        [sys.executable, "-S", "-c", remote.source(), command, *args], input=given, capture_output=True, env=host_env(cache), timeout=timeout
    )
    output = done.stdout.decode(errors="replace")
    return remote.answer(output), output + done.stderr.decode(errors="replace")


def resolve(cache: Path, index: PackageIndex, requirements: str) -> dict[str, Any]:
    return run(cache, "resolve", header={"requirements": requirements, "index_url": index.url, "deadline_s": 200})[0]


def facts(cache: Path) -> dict[str, Any]:
    return run(cache, "probe", "0" * 32, "", "")[0]["facts"]


def build(cache: Path, lock: list[dict[str, Any]], *, request: str = "ab" * 16, source: str = "local", stdin: bytes = b"") -> tuple[dict[str, Any], str]:
    key = env_key(lock_digest(lock), facts(cache))
    header = {"request": request, "lock": lock, "lock_hash": lock_digest(lock), "source": source, "deadline_s": 200}
    return run(cache, "build", key, header=header, stdin=stdin)


def in_env(python: str, code: str) -> str:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=60, check=True)
    return done.stdout.strip()


def leftovers(cache: Path) -> list[str]:
    """What a build left beside the environments it finished: scratch folders, logs."""
    envs = cache / "tpuctl" / "envs"
    return sorted(p.name for p in envs.iterdir() if p.name.startswith(".")) if envs.is_dir() else []


def test_the_program_ships_as_old_python_with_no_backslash_or_comment() -> None:
    source = remote.source()
    assert "\\" not in source and not any(line.lstrip().startswith("#") for line in source.splitlines())
    ast.parse(source, feature_version=(3, 5))  # TPU VM images run Python 3.8 (TF 2.12 and older) or 3.10
    assert len(source) < 64 << 10  # one argument of the remote command line: Linux takes up to 128 KiB


@pytest.fixture(scope="module")
def resolved(index: PackageIndex, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The first host, once a module: tpuctl-test-gamma resolved there (its cache folder, the answer)."""
    host = tmp_path_factory.mktemp("first") / "host0"
    return host, resolve(host, index, "tpuctl-test-gamma\n")


def test_one_resolution_locks_exact_wheels_and_the_environment_imports_them(resolved: tuple[Path, dict[str, Any]]) -> None:
    """On the first host: the dry run's choice (the newest alpha that beta allows), downloaded and checked; the
    environment built from those wheels alone sees them over the host's own site-packages, and its console script runs
    though the venv was made in a scratch folder and moved; the probe then finds it ready, as the warm path does."""
    host, answer = resolved
    lock = Lock.of(answer["lock"], answer["needs"])
    assert [(w.name, w.version) for w in lock.wheels] == [("tpuctl-test-alpha", "2.0"), ("tpuctl-test-beta", "1.0"), ("tpuctl-test-gamma", "1.0")]
    assert lock.pulled_in_by("tpuctl-test-alpha") == ["tpuctl-test-beta"]
    assert (host / "tpuctl" / "wheels" / lock.digest / ".complete").is_file()
    built, _ = build(host, lock.to_json())
    python = built["python"]
    assert built["built"] and python.startswith(str(host / "tpuctl" / "envs"))
    code = "import tpuctl_test_alpha as a, tpuctl_test_gamma, numpy, sys; print(a.VERSION, sys.prefix != sys.base_prefix)"
    assert in_env(python, code) == "2.0 True"  # numpy: the host's own site-packages, seen through
    script = subprocess.run([str(Path(python).parent / "tpuctl-test-beta")], capture_output=True, text=True, timeout=60, check=True)
    assert script.stdout.strip() == "tpuctl-test-beta 1.0"
    found, _ = run(host, "probe", "ab" * 16, "", "")
    assert found["python"] == python and Lock.of(found["lock"]) == lock and lock.digest in found["wheels"]
    again, _ = build(host, lock.to_json())
    assert not again["built"] and again["python"] == python
    assert leftovers(host) == []


def test_a_host_given_the_wheels_on_stdin_installs_exactly_the_lock_without_the_index(
    tmp_path: Path, index: PackageIndex, package_wheels: Wheels, resolved: tuple[Path, dict[str, Any]]
) -> None:
    """The launcher's copy as a tar after the header: the same versions on a second host, even once the index offers a
    newer alpha (nothing asks it); a tar holding anything but the lock's files is refused and leaves nothing."""
    host, answer = resolved
    lock = answer["lock"]
    wheels = host / "tpuctl" / "wheels" / lock_digest(lock)
    tar_path = tmp_path / "wheels.tar"
    with tarfile.open(tar_path, "w") as tar:
        for item in lock:
            tar.add(wheels / item["file"], arcname=item["file"])
    asked = sum(index.asked.values())
    built, _ = build(tmp_path / "host1", lock, source="stdin", stdin=tar_path.read_bytes())
    assert in_env(built["python"], "import tpuctl_test_alpha as a; print(a.VERSION)") == "2.0"
    assert sum(index.asked.values()) == asked
    with tarfile.open(tar_path, "a") as tar:
        tar.add(package_wheels.later, arcname=package_wheels.later.name)
    refused, _ = build(tmp_path / "host2", lock, source="stdin", stdin=tar_path.read_bytes())
    assert refused["error"]["kind"] == "wheels" and package_wheels.later.name in refused["error"]["message"]
    assert built_here(tmp_path / "host2") == []


def built_here(cache: Path) -> list[str]:
    """The environments and scratch folders a host's cache holds."""
    envs = cache / "tpuctl" / "envs"
    return sorted(p.name for p in envs.iterdir() if p.name != "requests") if envs.is_dir() else []


@pytest.mark.parametrize(
    ("requirements", "kind", "named"),
    [
        ("tpuctl-test-nosuch==1.0\n", "unresolvable", "tpuctl-test-nosuch==1.0"),
        ("tpuctl-test-winonly\n", "unresolvable", "tpuctl-test-winonly"),
        ("tpuctl-test-alpha>=2\ntpuctl-test-pinned\n", "conflict", "tpuctl-test-pinned"),
    ],
    ids=["no-such-package", "no-wheel-for-this-platform", "conflicting-pins"],
)
def test_a_resolution_that_cannot_be_made_says_why_naming_the_requirement(
    tmp_path: Path, index: PackageIndex, requirements: str, kind: str, named: str
) -> None:
    answer = resolve(tmp_path / "host0", index, requirements)
    assert answer["error"]["kind"] == kind and named in answer["error"]["message"], answer["error"]
    assert leftovers(tmp_path / "host0") == []


def test_an_index_that_does_not_answer_is_said_so(tmp_path: Path, index: PackageIndex) -> None:
    stopped = PackageIndex(tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    stopped.start().stop()  # a port nobody listens on now
    answer = resolve(tmp_path / "host0", stopped, "tpuctl-test-alpha\n")
    assert answer["error"]["kind"] == "index", answer["error"]


def test_a_wheel_that_is_not_the_locks_fails_the_build_and_leaves_nothing(tmp_path: Path, resolved: tuple[Path, dict[str, Any]]) -> None:
    """A wheel changed after the lock (its hash no longer the lock's): pip refuses it, and the scratch environment
    goes; no environment is found at the key's path, so the next launch builds it again."""
    first, answer = resolved
    lock = answer["lock"]
    host = tmp_path / "host3"
    kept = host / "tpuctl" / "wheels" / lock_digest(lock)
    shutil.copytree(first / "tpuctl" / "wheels" / lock_digest(lock), kept)
    wheel = kept / lock[0]["file"]
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    answer, _ = build(host, lock)
    assert answer["error"]["kind"] == "hashes", answer["error"]
    assert built_here(host) == []


def test_setup_runs_once_in_the_environment_and_its_failure_and_hang_are_answers(
    tmp_path: Path, resolved: tuple[Path, dict[str, Any]], pid_dir: Path
) -> None:
    """--setup: the environment's bin first on PATH, in the workers' directory; its output is the command's own; once
    it succeeded it is not run again. A failing one answers its status; one past its deadline has its group killed."""
    host, answer = resolved
    lock = answer["lock"]
    key = env_key(lock_digest(lock), facts(host))
    build(host, lock)
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = "echo setting up in $(pwd); tpuctl-test-beta; command -v python"
    answer, output = run(host, "setup", header={"key": key, "hash": "1" * 16, "command": command, "workdir": str(workdir), "deadline_s": 60})
    assert answer == {"ran": True}
    assert f"setting up in {workdir}" in output and "tpuctl-test-beta 1.0" in output and f"envs/{key}/bin/python" in output
    again, output = run(host, "setup", header={"key": key, "hash": "1" * 16, "command": command, "workdir": str(workdir), "deadline_s": 60})
    assert again == {"ran": False} and "setting up" not in output
    failed, _ = run(host, "setup", header={"key": key, "hash": "2" * 16, "command": "exit 7", "workdir": "", "deadline_s": 60})
    assert failed["error"]["kind"] == "setup" and failed["error"]["status"] == 7
    hang = f"sleep 300 & echo $! > {pid_dir}/child.pid; wait"
    started = time.monotonic()
    hung, _ = run(host, "setup", header={"key": key, "hash": "3" * 16, "command": hang, "workdir": "", "deadline_s": 1.5})
    assert hung["error"]["kind"] == "timeout" and time.monotonic() - started < 30
    child = int((pid_dir / "child.pid").read_text())
    wait_for(lambda: not alive(child), timeout=10)
    assert not (host / "tpuctl" / "envs" / key / ".setup-3333333333333333").exists()


def test_the_wheels_go_back_as_a_tar_of_exactly_the_lock(tmp_path: Path, resolved: tuple[Path, dict[str, Any]]) -> None:
    host, answer = resolved
    lock = answer["lock"]
    done = subprocess.run([sys.executable, "-S", "-c", remote.source(), "pack", lock_digest(lock)], capture_output=True, env=host_env(host), timeout=60)
    out = tmp_path / "out.tar"
    out.write_bytes(done.stdout)
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == sorted(item["file"] for item in lock)
    missing = subprocess.run([sys.executable, "-S", "-c", remote.source(), "pack", "f" * 32], capture_output=True, env=host_env(host), timeout=60)
    assert missing.returncode == 3 and json.loads(missing.stdout.decode().split(REPLY)[1])["error"]["kind"] == "wheels"


def test_setup_alone_gets_an_environment_with_no_package_of_its_own(tmp_path: Path) -> None:
    """--setup without --requirements: an empty lock, no index, no wheels; the venv over the host's Python all the same."""
    host = tmp_path / "host0"
    built, _ = build(host, [])
    assert built["built"] and in_env(built["python"], "import numpy, sys; print(sys.prefix != sys.base_prefix)") == "True"
    assert not (host / "tpuctl" / "wheels").exists()


def test_a_full_disk_is_said_so_naming_where_and_what_may_go_and_leaves_nothing(tmp_path: Path, index: PackageIndex) -> None:
    """The host's cache on a disk with no byte free (a tmpfs, filled, in a mount namespace of its own): the resolution's
    venv cannot be written, nor even its error kept in the log; the answer says the disk is full, where, and where
    tpuctl's own environments are (not "no venv module"), and nothing is left in the cache."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a disk of its own needs root and unshare (util-linux)")
    cache = tmp_path / "host0"
    cache.mkdir()
    fill = f"mount -t tmpfs -o size=256k,mode=0700 tmpfs {cache} && {{ head -c 1m /dev/zero > {cache}/filler"
    script = f'{fill}; "$@"; }}; ls -A {cache}/tpuctl/envs > {tmp_path}/left'
    header = remote.header({"requirements": "tpuctl-test-alpha\n", "index_url": index.url, "deadline_s": 60})
    argv = ["unshare", "-m", "sh", "-c", script, "sh", sys.executable, "-S", "-c", remote.source(), "resolve"]
    done = subprocess.run(argv, input=header, capture_output=True, env=host_env(cache), timeout=120)
    error = remote.answer(done.stdout.decode(errors="replace"))["error"]
    envs = cache / "tpuctl" / "envs"
    assert error["kind"] == "disk" and error["message"].startswith(f"out of disk space in {envs} (0.0 MiB free): free space on that disk"), error
    assert f"{envs} and {cache / 'tpuctl' / 'wheels'}" in error["message"]
    assert (tmp_path / "left").read_text() == ""  # the scratch folder gone


def pack_env(cache: Path, key: str) -> bytes:
    done = subprocess.run([sys.executable, "-S", "-c", remote.source(), "pack-env", key], capture_output=True, env=host_env(cache), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def copy(cache: Path, lock: list[dict[str, Any]], origin: Path, tar: bytes, size: int | None = None) -> tuple[dict[str, Any], str]:
    """The environment `origin` (another host's, packed) sent to `cache`'s host as the launcher sends it: the header,
    then the tar, whose size (`size`, else the tar's own) is on the command line."""
    key = origin.name
    header = {"request": "cd" * 16, "lock": lock, "lock_hash": lock_digest(lock), "origin": str(origin), "deadline_s": 60}
    return run(cache, "copy", key, str(len(tar) if size is None else size), header=header, stdin=tar)


def test_a_built_environment_copied_to_another_host_runs_there_naming_its_own_folder(
    tmp_path: Path, resolved: tuple[Path, dict[str, Any]]
) -> None:
    """The first host's environment, packed and unpacked on a host whose cache is elsewhere (another HOME): no wheels
    and no pip there (the host has no wheel to install from, and pip's --no-index would need them); the packages import,
    the console script's shebang names the new folder and runs, no file but a .pyc still names the first host's folder,
    and importing compiles nothing again (each .pyc's source mtime survived) while its code names the new path."""
    first, answer = resolved
    lock = answer["lock"]
    built, _ = build(first, lock)
    origin = Path(built["python"]).parents[1]
    tar = pack_env(first, origin.name)
    with tarfile.open(fileobj=io.BytesIO(tar)) as packed:
        names = packed.getnames()
    assert "bin/python" in names and ".ready" not in names and "tpuctl-lock.json" not in names
    host = tmp_path / "elsewhere" / "host1"
    copied, _ = copy(host, lock, origin, tar)
    python = Path(copied["python"])
    assert copied["built"] and "copied" not in copied and python == host / "tpuctl" / "envs" / origin.name / "bin" / "python"
    assert not (host / "tpuctl" / "wheels").exists()
    script = python.parent / "tpuctl-test-beta"
    assert script.read_text().splitlines()[0] == f"#!{python}"
    assert subprocess.run([str(script)], capture_output=True, text=True, timeout=60, check=True).stdout.strip() == "tpuctl-test-beta 1.0"
    env = python.parents[1]
    naming = [p for p in env.rglob("*") if p.is_file() and not p.is_symlink() and p.suffix != ".pyc" and str(first).encode() in p.read_bytes()]
    assert naming == []
    cached = {p: p.stat().st_mtime_ns for p in env.rglob("*.pyc")}
    code = "import tpuctl_test_alpha as a, tpuctl_test_gamma; print(a.VERSION, a.main.__code__.co_filename)"
    assert in_env(str(python), code) == f"2.0 {env / 'lib'}/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/tpuctl_test_alpha/__init__.py"
    assert {p: p.stat().st_mtime_ns for p in env.rglob("*.pyc")} == cached
    found, _ = run(host, "probe", "cd" * 16, "", "")
    assert found["python"] == str(python) and found["lock"] == lock
    assert leftovers(host) == []


def hostile_tar(kind: str, target: Path) -> tuple[bytes, int]:
    """A tar a venv's sender never makes, and the size said for it."""
    stream = io.BytesIO()

    def add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **fields: Any) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        for field, value in fields.items():
            setattr(info, field, value)
        tar.addfile(info, io.BytesIO(data) if info.isfile() else None)

    with tarfile.open(fileobj=stream, mode="w") as tar:
        add(tar, "bin", type=tarfile.DIRTYPE, mode=0o755)
        if kind == "absolute":
            add(tar, str(target / "planted"))
        elif kind == "dotdot":
            add(tar, "bin/../../../planted")
        elif kind == "through-a-link":
            add(tar, "lib64", type=tarfile.SYMTYPE, linkname=str(target))
            add(tar, "lib64/planted")
        elif kind == "through-an-allowed-link":
            add(tar, "bin/python", type=tarfile.SYMTYPE, linkname=str(target))
            add(tar, "bin/python/planted")
        elif kind == "device":
            add(tar, "bin/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        elif kind == "larger-than-said":
            add(tar, "bin/python", b"y" * 20000)
    data = stream.getvalue()
    return data, (8192 if kind == "larger-than-said" else len(data))


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "through-a-link", "through-an-allowed-link", "device", "larger-than-said"])
def test_a_hostile_environment_tar_is_refused_in_one_line_and_leaves_nothing(tmp_path: Path, kind: str) -> None:
    """What a venv's tar never holds, refused before anything of it is written where it names, nothing left in the
    host's environments folder (no scratch folder, no environment, no request recorded)."""
    target = tmp_path / "target"
    target.mkdir()
    lock: list[dict[str, Any]] = []
    tar, size = hostile_tar(kind, target)
    answer, output = copy(tmp_path / "host1", lock, tmp_path / "host0" / "tpuctl" / "envs" / ("e" * 32), tar, size)
    error = answer["error"]
    assert error["kind"] == "copy" and "\n" not in error["message"], output
    assert "Traceback" not in output
    assert list(target.iterdir()) == [] and not (tmp_path / "planted").exists()
    assert built_here(tmp_path / "host1") == [] and not (tmp_path / "host1" / "tpuctl" / "envs" / "requests").exists()


def test_the_resolution_fetches_the_chosen_files_from_the_report_s_urls_and_through_pip_where_the_index_needs_credentials(
    tmp_path: Path, package_wheels: Wheels, resolved: tuple[Path, dict[str, Any]]
) -> None:
    """The dry run reads each project's page once; its report's URLs and hashes are enough to fetch the files, so no
    second pass over the pages. An index that asks for credentials: the report's URLs have them stripped, so pip
    downloads the files (a second page read each), and the lock is the same."""
    _, first = resolved
    with PackageIndex(package_wheels.folder(tmp_path / "open")) as index:
        answer = resolve(tmp_path / "host0", index, "tpuctl-test-gamma\n")
        assert dict(index.asked) == {"tpuctl-test-alpha": 1, "tpuctl-test-beta": 1, "tpuctl-test-gamma": 1}
    assert answer["lock"] == first["lock"]
    with PackageIndex(package_wheels.folder(tmp_path / "locked"), credentials=("ci", "s3cret-x")) as locked:
        answer = resolve(tmp_path / "host1", locked, "tpuctl-test-gamma\n")
        assert dict(locked.asked) == {"tpuctl-test-alpha": 2, "tpuctl-test-beta": 2, "tpuctl-test-gamma": 2}
    assert answer["lock"] == first["lock"] and "s3cret-x" not in json.dumps(answer)

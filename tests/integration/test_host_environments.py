"""`launch --requirements/--setup` over real sshd hosts (tests/integration/sshd.py), with the real pip on each host
against a local package index of real wheels (tests/standins/package_index.py) that asks for credentials, and the GCS
emulator as the run's bucket. Each "host" keeps its own cache (XDG_CACHE_HOME), as separate machines do; the hosts read no
pip configuration of this machine's.

The workers are plain Python scripts (`--strategy none`: no TensorFlow), so the module pays for environments, not for
TensorFlow's start: what it proves is where the packages come from and which versions every host runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import alive, run_tpuctl, wait_for
from tests.integration.sshd import SshCluster, running_cluster
from tests.standins.fixtures import standin_env
from tests.standins.gcs_proxy import BearerGate
from tests.standins.google_apis import GoogleStandin
from tests.standins.new_tpu_cloud import Launch
from tests.standins.package_index import PackageIndex, Wheels
from tpuctl.runs import timeline as tl

SECRET = "idx-s3cret-9f2"
USER = "ci-robot"
ZONE = "us-central2-b"
# Prints and keeps the versions the worker imports, and where its Python runs from; on a launch's first attempt it
# may wait to be preempted (PREEMPT_FLAGS), as tests/integration/test_tpu_preemption.py's workers do.
WORKER = """\
import json, os, sys, time
from pathlib import Path

out, attempt, index = Path(os.environ["VERSIONS_OUT"]), os.environ["TPUCTL_ATTEMPT"], os.environ["TPUCTL_WORKER_INDEX"]
flags = os.environ.get("PREEMPT_FLAGS")
if flags and attempt == "1":
    (Path(flags) / f"started-{index}").write_text("")
    end = time.monotonic() + 120
    while not (Path(flags) / "preempt").exists() and time.monotonic() < end:
        time.sleep(0.05)
    sys.exit(42)
import tpuctl_test_alpha, tpuctl_test_beta
print(f"alpha {tpuctl_test_alpha.VERSION} beta {tpuctl_test_beta.VERSION}", flush=True)
found = {"alpha": tpuctl_test_alpha.VERSION, "beta": tpuctl_test_beta.VERSION, "prefix": sys.prefix, "cache": os.environ.get("XDG_CACHE_HOME")}
(out / f"{attempt}-{index}.json").write_text(json.dumps(found))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    """Four sshd hosts that read no pip.conf of this machine's (its extra indexes and find-links); host3's environments
    folder is a 1 MiB disk of its own (a host without room for an environment: only the test of that uses host3);
    host4's Python reports another platform (sysconfig's _PYTHON_HOST_PLATFORM, which a cross-build's Python sets), so
    its environment's key differs from the others' as another Python's does (only the first test uses host4)."""
    env = {host: {"PIP_CONFIG_FILE": os.devnull} for host in ("host1", "host2", "host3", "host4")}
    env["host4"]["_PYTHON_HOST_PLATFORM"] = "linux-x86_64-other"
    yield from running_cluster(tmp_path_factory, 4, env=env, small_disks={"host3": "1m"})


@pytest.fixture(scope="module")
def index(package_wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    with PackageIndex(package_wheels.folder(tmp_path_factory.mktemp("index")), credentials=(USER, SECRET)) as served:
        yield served


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(WORKER)
    (tmp_path / "out").mkdir()
    return tmp_path


def requirements(work: Path, text: str) -> str:
    path = work / "requirements.txt"
    path.write_text(text)
    return str(path)


def launch(cluster: SshCluster, work: Path, logs: str, *args: str, hosts: str = "host1,host2", env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """A launch of the worker from `work`, its log folder `work/logs`, this machine's cache its own (`work/cache`)."""
    given = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), **(env or {})}
    done = run_tpuctl(
        "launch", str(work / "train.py"), "--hosts", hosts, "--ssh-config", str(cluster.config), "--python", sys.executable,
        "--strategy", "none", "--log-dir", str(work / logs), "--env", f"VERSIONS_OUT={work / 'out'}", *args,
        cwd=work, env=given, timeout=240,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def versions(work: Path, attempt: int = 1) -> dict[int, dict[str, str]]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (work / "out").glob(f"{attempt}-*.json")}


def environment_ends(logs: Path) -> list[dict[str, object]]:
    events = tl.read((logs / "timeline.jsonl").read_text().splitlines()).events
    return [{"attempt": e.attempt, **e.fields} for e in events if e.event == tl.ENV_END]


def no_secret_anywhere(work: Path, *texts: str) -> None:
    """The index's credentials appear in no output, and in no file the launch wrote (logs, plan, timeline, outcome)."""
    for text in texts:
        assert SECRET not in text and USER not in text
    for path in work.rglob("*"):
        if path.is_file() and "cache" not in path.parts:
            assert SECRET.encode() not in path.read_bytes(), path


def test_one_resolution_feeds_every_host_even_as_the_index_moves_and_the_next_launch_reuses_it(
    cluster: SshCluster, index: PackageIndex, package_wheels: Wheels, work: Path
) -> None:
    """Launch 1: the first host resolves (tpuctl-test-gamma: alpha 2.0, the newest beta allows) and a newer alpha lands on
    the index right after; host1 builds the lock's environment and host2 (the same Python) gets a copy of it, no pip
    there; host4 (another platform) builds it from the lock's wheels, not the index's newest; --setup runs once on each
    host in its environment. Launch 2: every environment is reused (no pip, the index not asked, --setup not run
    again), though the index now offers alpha 3.0; `tpuctl report` has the time as `environment setup`. Launch 3: hosts
    that lost everything, with the index down, get the same lock from this machine's copy, built and copied again."""
    index.publish_after_downloads(package_wheels.later, 3)  # once the dry run has its three wheels (gamma, beta, alpha)
    asked = dict(index.asked)
    args = ["--requirements", requirements(work, "tpuctl-test-gamma\n"), "--index-url", index.url, "--setup", "tpuctl-test-beta"]
    code, out, err = launch(cluster, work, "logs1", *args, hosts="host1,host2,host4")
    assert code == 0, err
    assert (index.folder / package_wheels.later.name).exists()  # published while this launch resolved
    seen = versions(work)
    assert [seen[i]["alpha"] for i in (0, 1, 2)] == ["2.0", "2.0", "2.0"], seen
    for i, host in ((0, 1), (1, 2), (2, 4)):
        assert seen[i]["prefix"].startswith(str(cluster.cache(host) / "tpuctl" / "envs")), seen  # each host's own environment
    assert all(index.asked[name] - asked.get(name, 0) <= 2 for name in index.asked)  # one host's dry run and download
    assert "[setup@host1] tpuctl-test-beta 1.0" in out and "[setup@host2] tpuctl-test-beta 1.0" in out, out
    attempt = work / "logs1" / "attempt-1"
    assert "tpuctl-test-beta 1.0" in (attempt / "setup@host2.log").read_text() and (attempt / "environment@host1.log").is_file()
    copied_here(cluster, seen[1]["prefix"], 2)
    packages = [end for end in environment_ends(work / "logs1") if end["step"] == "packages"]
    assert packages[0]["attempt"] == 1 and packages[0]["built"] == 3 and packages[0]["copied"] == 1
    assert "built on host1, host4; copied to 1 host(s) in" in err and "3 wheel(s)" in err, err

    before = dict(index.asked)
    (work / "out" / "1-0.json").unlink()
    code, out, err = launch(cluster, work, "logs2", *args)
    assert code == 0, err
    assert "reused on 2 host(s)" in err and "[setup@" not in out, err + out
    assert index.asked == before  # nothing asked the index: no pip ran
    assert [end["built"] for end in environment_ends(work / "logs2")] == [0]
    assert versions(work)[0]["alpha"] == "2.0"  # the lock, not the index's alpha 3.0
    report = run_tpuctl("report", str(work / "logs2"), "--json", timeout=60)
    assert json.loads(report.stdout)["categories"]["environment setup"] > 0, report.stdout + report.stderr

    # Launch 3: new hosts (their caches gone, as each --new-tpu run's VM is new) and the index down: the lock this
    # machine resolved the request to is installed from the wheels it keeps, no resolution.
    _new_disks(cluster)
    for seen_before in (work / "out").glob("*.json"):
        seen_before.unlink()
    index.stop()
    try:
        code, out3, err3 = launch(cluster, work, "logs3", *args)
    finally:
        index.start()
    assert code == 0, err3
    assert "resolving" not in err3 and "built on host1; copied to 1 host(s) in" in err3, err3
    assert [versions(work)[i]["alpha"] for i in (0, 1)] == ["2.0", "2.0"]
    copied_here(cluster, versions(work)[1]["prefix"], 2)
    no_secret_anywhere(work, out, err, out3, err3)


def copied_here(cluster: SshCluster, prefix: str, host: int) -> None:
    """Host `host` got its environment (at `prefix`, as its worker saw it) as a copy: no pip installed it (no wheel is on
    that host to install from, and a build's pip takes none from the index), and its scripts name its own folder."""
    assert not (cluster.cache(host) / "tpuctl" / "wheels").exists()
    script = Path(prefix) / "bin" / "tpuctl-test-beta"
    assert script.read_text().splitlines()[0] == f"#!{prefix}/bin/python"


def test_the_run_s_bucket_keeps_the_wheels_for_a_host_that_never_meets_the_index(
    cluster: SshCluster, index: PackageIndex, work: Path, module_gcs_emulator: str
) -> None:
    """With a gs:// model dir the lock's wheels go to gs://BUCKET/tpuctl/wheels/LOCK/ once. A later launch from a machine
    without them in its cache, with the index down, builds the second host from the bucket alone."""
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    emulator = {"STORAGE_EMULATOR_HOST": module_gcs_emulator}
    os.environ.update(emulator)
    try:
        client = storage.Client(project="tpuctl-emulator", credentials=AnonymousCredentials())
        client.create_bucket("env-wheels")
    finally:
        del os.environ["STORAGE_EMULATOR_HOST"]
    args = ["--requirements", requirements(work, "tpuctl-test-beta==1.0\ntpuctl-test-alpha==1.0\n"), "--index-url", index.url]
    args += ["--model-dir", "gs://env-wheels/runs/one"]
    code, _, err = launch(cluster, work, "logs1", *args, hosts="host1", env=emulator)
    assert code == 0, err
    kept = sorted(blob.name for blob in client.list_blobs("env-wheels", prefix="tpuctl/wheels/"))
    assert [name.rsplit("/", 1)[1].split("-")[0] for name in kept] == ["tpuctl_test_alpha", "tpuctl_test_beta"], kept
    index.stop()
    try:
        code, _, err = launch(cluster, work, "logs2", *args, env={**emulator, "XDG_CACHE_HOME": str(work / "another-machine")})
    finally:
        index.start()
    assert code == 0, err
    assert [versions(work)[i]["alpha"] for i in (0, 1)] == ["1.0", "1.0"]
    assert "built on host2; reused on 1 host(s)" in err and "gs://env-wheels/tpuctl/wheels/" in err, err
    no_secret_anywhere(work, err)


def test_setup_that_fails_on_one_host_and_hangs_on_another_names_both_and_starts_no_worker(
    cluster: SshCluster, work: Path, pid_dir: Path
) -> None:
    """--setup alone (no requirements): host1's hangs and is killed at --start-timeout, host2's exits 3; one line
    names both, exit 2, no worker started, nothing of host1's setup left running."""
    command = f'case "$XDG_CACHE_HOME" in *cache1) sleep 300 & echo $! > {pid_dir}/sleep.pid; wait;; *) echo broken here; exit 3;; esac'
    code, out, err = launch(cluster, work, "logs", "--setup", command, "--start-timeout", "3")
    assert code == 2, err
    [error] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert "--setup did not finish on host1 within 3s (--start-timeout)" in error and "--setup failed on host2: exit status 3" in error, err
    assert "Traceback" not in err and "[setup@host2] broken here" in out
    assert "broken here" in (work / "logs" / "attempt-1" / "setup@host2.log").read_text()
    assert versions(work) == {}
    sleeper = int((pid_dir / "sleep.pid").read_text())
    wait_for(lambda: not alive(sleeper), timeout=10)


def test_setup_s_lines_reach_the_console_while_it_runs_bounded_there_and_kept_in_the_log(cluster: SshCluster, work: Path) -> None:
    """--setup prints a line, then waits for a file the test makes only once that line is on the console: the line came
    while the command ran. Then one line of 10,000 bytes (cut on the console, its start kept in the log) and 110,000
    bytes of short lines: the console shows them up to its bound, then says how many bytes more the log has."""
    (work / "train.py").write_text("print('trained')\n")
    go = work / "go"
    command = f"echo waiting for go; while [ ! -e {go} ]; do sleep 0.05; done; head -c 10000 /dev/zero | tr '\\0' L; echo; yes short-line | head -n 10000"
    args = [str(work / "train.py"), "--hosts", "host2", "--ssh-config", str(cluster.config), "--python", sys.executable, "--strategy", "none"]
    running = Launch.start([*args, "--log-dir", str(work / "logs"), "--setup", command], {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}, work)
    try:
        running.wait_line("[setup@host2] waiting for go", on_stdout=True)
        go.write_text("")
        assert running.finish() == 0, running.stderr
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
    log = work / "logs" / "attempt-1" / "setup@host2.log"
    [long] = [line for line in running.out if line.startswith("[setup@host2] LLL")]
    assert long == "[setup@host2] " + "L" * 2000 + " ... [cut: 10000 bytes in all]"
    shown = sum(line == "[setup@host2] short-line" for line in running.out)
    assert 0 < shown < 10000 and f"[setup@host2] ... {11 * (10000 - shown)} bytes more in {log}" in running.out, running.out[-3:]
    kept = log.read_text().splitlines()
    assert kept[0] == "waiting for go" and kept[1] == "L" * 8000 + " ... [cut: 10000 bytes in all]" and kept[2:] == ["short-line"] * 10000


def test_a_requirement_no_wheel_satisfies_fails_before_any_worker_naming_the_host_and_the_requirement(
    cluster: SshCluster, index: PackageIndex, work: Path
) -> None:
    args = ["--requirements", requirements(work, "tpuctl-test-beta\ntpuctl-test-winonly\n"), "--index-url", index.url]
    code, out, err = launch(cluster, work, "logs", *args)
    assert code == 2, err
    [error] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: host1: cannot resolve ") and "no wheel of tpuctl-test-winonly" in error, err
    assert error.count("requirements.txt:2)") == 1, err
    assert "Traceback" not in err and versions(work) == {}
    no_secret_anywhere(work, out, err)


def test_a_host_without_room_fails_before_any_worker_naming_it_and_leaves_the_other_host_s_environment_whole(
    cluster: SshCluster, index: PackageIndex, work: Path
) -> None:
    """host3's environments folder is a 1 MiB disk: host1 resolves and builds, host3 gets the wheels and is refused
    before it installs anything, in one line naming it, where, what is free and about how much is needed; exit 2, no
    worker started, nothing of an environment left on host3, host1's whole and usable."""
    args = ["--requirements", requirements(work, "tpuctl-test-alpha==1.0\n"), "--index-url", index.url]
    code, out, err = launch(cluster, work, "logs", *args, hosts="host1,host3")
    assert code == 2, err
    [error] = [line for line in err.splitlines() if line.startswith("Error:")]
    envs = cluster.cache(3) / "tpuctl" / "envs"
    assert error.startswith("Error: host3: cannot build its environment: out of disk space in " + str(envs) + " (1.0 MiB free, about "), err
    assert "MiB needed): free space on that disk" in error and "Traceback" not in err and versions(work) == {}, err
    assert list(cluster.inside(3, envs).iterdir()) == []  # no environment, no scratch folder, no request recorded
    lock = [{"name": "tpuctl-test-alpha", "version": "1.0"}]
    [env] = [p for p in (cluster.cache(1) / "tpuctl" / "envs").glob("*/.ready") if _names(p.parent / "tpuctl-lock.json") == lock]
    code = "import tpuctl_test_alpha as a; print(a.VERSION)"
    done = subprocess.run([str(env.parent / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "1.0", done.stderr
    no_secret_anywhere(work, out, err)


def _names(lock: Path) -> list[dict[str, str]]:
    return [{"name": item["name"], "version": item["version"]} for item in json.loads(lock.read_text())]


@pytest.mark.parametrize(
    ("bucket", "earlier"),
    [(None, False), ("recreated-vm", False), ("reused-vm", True)],
    ids=["this-machine-s-copy", "the-run-s-bucket", "the-run-s-bucket-after-another-machine-s-launch"],
)
def test_a_recreated_tpu_vm_builds_its_hosts_again_from_the_kept_wheels_with_the_index_down(
    cluster: SshCluster, index: PackageIndex, google_standin: GoogleStandin, work: Path, module_gcs_emulator: str, bucket: str | None, earlier: bool
) -> None:
    """--tpu: attempt 1 runs in the environments, then the VM is preempted and comes back bare (its hosts' caches gone)
    while the index is down (its port only counts who knocks: nobody does). Before attempt 2's workers start, the hosts
    get the lock again, the same versions (the lock's: alpha 2.0, or 3.0 once an earlier test of the module published
    it). Without a bucket, host1 is built from this machine's copy of the lock's wheels and host2 gets a copy of that
    build. With a gs:// --model-dir (the GCS emulator, behind a gate that records each request) this machine's copy is
    gone too, so the bucket is the only place left: every host reads each of the lock's wheels from it and builds. The
    same where a launch from another machine (no bucket) built the environments on the VM before, so that this run's
    attempt 1 reuses them: the wheels must reach the bucket all the same."""
    (name,) = google_standin.add_ready_nodes(ZONE, 1, prefix=f"env-{bucket or 'local'}", accelerator_type="v4-16")
    _new_disks(cluster)  # a new VM: attempt 1 resolves (else it reuses an earlier test's environments, keeping nothing)
    node = google_standin.node(ZONE, name)
    assert node is not None
    ips = [endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
    config = cluster.aliased(work / "ssh_config", list(zip(ips, cluster.ports[: len(ips)], strict=True)))
    flags = work / "flags"
    flags.mkdir()
    env = {**standin_env(google_standin, work), "TPUCTL_ZONE": ZONE}
    args = [str(work / "train.py"), "--tpu", name, "--ssh-config", str(config), "--python", sys.executable, "--strategy", "none"]
    args += ["--env", f"VERSIONS_OUT={work / 'out'}", "--requirements", requirements(work, "tpuctl-test-beta\n"), "--index-url", index.url]
    if earlier:
        elsewhere = {**env, "XDG_CACHE_HOME": str(work / "another-machine")}
        done = run_tpuctl("launch", *args, "--log-dir", str(work / "earlier"), cwd=work, env=elsewhere, timeout=240)
        assert done.returncode == 0, done.stderr
        for found in (work / "out").iterdir():
            found.unlink()
    args += ["--log-dir", str(work / "logs"), "--env", f"PREEMPT_FLAGS={flags}"]
    with contextlib.ExitStack() as stack:
        gate = stack.enter_context(BearerGate(module_gcs_emulator, {None}))  # the emulator's clients send no token
        if bucket:
            _bucket(module_gcs_emulator, bucket)
            env["STORAGE_EMULATOR_HOST"] = gate.url
            args += ["--model-dir", f"gs://{bucket}/runs/one"]
        running = Launch.start(args, env, work)
        try:
            wait_for(lambda: all((flags / f"started-{i}").exists() for i in (0, 1)) or running.proc.poll() is not None, timeout=120)
            assert running.proc.poll() is None, running.stderr
            knocks = stack.enter_context(_down(index))
            _new_disks(cluster)  # the recreated VM's
            if bucket:  # and this machine has lost its copy: only the bucket keeps the wheels
                _remove(Path(env["XDG_CACHE_HOME"]) / "tpuctl" / "wheels")
            recreated = len(gate.seen)
            google_standin.preempt(ZONE, name)
            (flags / "preempt").write_text("")
            running.wait_line(f"TPU VM {name} is PREEMPTED")
            google_standin.set_node_state(ZONE, name, "READY")
            assert running.finish() == 0, running.stderr
        finally:
            if running.proc.poll() is None:
                running.proc.kill()
        assert knocks == [], knocks  # nothing asked the index once it was down
    seen = [versions(work, attempt=2)[i]["alpha"] for i in (0, 1)]
    assert seen[0] == seen[1] and f"tpuctl-test-alpha {seen[0]}" in running.stderr, running.stderr  # the lock's, on both
    ends = [(end["attempt"], end["built"], end["copied"]) for end in environment_ends(work / "logs") if end["step"] == "packages"]
    assert "Traceback" not in running.stderr
    if not bucket:
        assert ends == [(1, 2, 1), (2, 2, 1)]  # host1 built, host2 a copy
        return
    assert ends == [(1, 0 if earlier else 2, 0), (2, 2, 0)]  # each host built: host2 (and, recreated, both) from the bucket
    kept = [blob.name for blob in _bucket(module_gcs_emulator, bucket).list_blobs(prefix="tpuctl/wheels/")]
    assert sorted(name.rsplit("/", 1)[1].split("-")[0] for name in kept) == ["tpuctl_test_alpha", "tpuctl_test_beta"], kept
    reads = Counter(path for method, path, _ in gate.seen[recreated:] if method == "GET" and path.endswith("?alt=media"))
    assert reads == {f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media": 2 for name in kept}, gate.seen[recreated:]  # each wheel, by each host
    assert not (Path(env["XDG_CACHE_HOME"]) / "tpuctl" / "wheels").exists()  # this machine sent none


def _bucket(emulator: str, name: str) -> Any:
    """The emulator's bucket `name`, made where it is not there yet (a client of this process: anonymous, as the
    emulator takes)."""
    import google.cloud.storage as storage
    from google.api_core.exceptions import Conflict
    from google.auth.credentials import AnonymousCredentials

    client = storage.Client(project="tpuctl-emulator", credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator})
    with contextlib.suppress(Conflict):
        client.create_bucket(name)
    return client.bucket(name)


@contextlib.contextmanager
def _down(index: PackageIndex) -> Iterator[list[str]]:
    """The index stopped, and its port a listener that only records who connects (and closes on them, as a server gone
    down would refuse them); the index serves again after."""
    index.stop()
    knocks: list[str] = []
    listener = socket.create_server(("127.0.0.1", index.port))

    def record() -> None:
        while True:
            try:
                peer, address = listener.accept()
            except OSError:
                return
            knocks.append(f"{address[0]}:{address[1]}")
            peer.close()

    threading.Thread(target=record, daemon=True).start()
    try:
        yield knocks
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept, which holds the port until it returns
        listener.close()
        index.start()


def _new_disks(cluster: SshCluster) -> None:
    """host1's and host2's caches gone, as a new VM's disks have none."""
    for host in (1, 2):
        for folder in ("envs", "wheels"):
            _remove(cluster.cache(host) / "tpuctl" / folder)


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)

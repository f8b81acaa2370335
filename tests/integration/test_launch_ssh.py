"""`tpuctl launch --hosts` against real sshd servers on loopback ports (tests/integration/sshd.py).

Every "host" is the same machine reached through its own sshd, so pid files
written by the scripts prove what ran and what survived on every host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SCRIPTS, alive, describe, read_pids, run_tpuctl, tpuctl_cmd, wait_for
from tests.integration.sshd import SshCluster, running_cluster
from tpuctl.backends.ssh.placement import RemotePaths
from tpuctl.backends.ssh.selection import select
from tpuctl.backends.ssh.starter import SshStarter
from tpuctl.cluster.hosts import parse_slot_hosts
from tpuctl.ssh.client_args import SshOptions
from tpuctl.ssh.fanout import run_everywhere

HOSTILE = [
    "a b", "it's", 'say "hi"', ";", "&& rm -rf /", "$HOME", "`id`", "$(id)", "ünïcødé ✓", "--workers", "-x", "--", "",
    "\\n", "two\nlines", "tab\there", "*", "~", "'", '"', "\\", "!", "#comment", "a=b", "{x,y}", ">out", "|",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    yield from running_cluster(tmp_path_factory, 3)


def ssh_launch(cluster: SshCluster, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return run_tpuctl("launch", "--ssh-config", str(cluster.config), *args, **kwargs)  # type: ignore[arg-type]


def assert_none_survive(pid_dir: Path, timeout: float = 5.0) -> None:
    pids = read_pids(pid_dir)
    try:
        wait_for(lambda: not any(alive(p) for p in pids), timeout=timeout)
    except AssertionError:
        raise AssertionError("survivors: " + "; ".join(describe(p) for p in pids if alive(p))) from None


@pytest.fixture(scope="module")
def tf_python_without_tpuctl(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A host's Python with TensorFlow and no tpuctl: a venv of the base interpreter whose .pth names this
    venv's site-packages as a plain folder (so the .pth files there, tpuctl's editable install among
    them, are not read)."""
    folder = tmp_path_factory.mktemp("host-python")
    subprocess.run([str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    site = folder / "venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "host-tensorflow.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(folder / "venv" / "bin" / "python")
    assert _importable(python, folder) == {"tpuctl": False, "tensorflow": True}
    return python


def _importable(python: str, cwd: Path) -> dict[str, bool]:
    probe = "import importlib.util as u, json; print(json.dumps({m: u.find_spec(m) is not None for m in ('tpuctl', 'tensorflow')}))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a checkout on PYTHONPATH is not the host's install
    return dict(json.loads(subprocess.run([python, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout))


@pytest.mark.tf
def test_two_hosts_train_in_sync_with_real_tensorflow(cluster: SshCluster, tmp_path: Path, tf_python_without_tpuctl: str) -> None:
    """The hosts' Python has TensorFlow and no tpuctl: the launch ships the runtime. (Run outside the
    checkout: `python -m` puts the working directory first on sys.path, and a tpuctl there would do.)"""
    result = ssh_launch(
        cluster, str(SCRIPTS / "single_device_keras.py"), "--hosts", "host1,host2", "--log-dir", str(tmp_path / "logs"),
        "--env", f"WEIGHTS_OUT={tmp_path}", "--env", "TF_CPP_MIN_LOG_LEVEL=2", "--python", tf_python_without_tpuctl,
        timeout=120, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker:0@host1] replicas in sync: 2" in result.stdout
    assert "[worker:1@host2] replicas in sync: 2" in result.stdout
    w0, w1 = np.load(tmp_path / "0.npy"), np.load(tmp_path / "1.npy")
    np.testing.assert_array_equal(w0, w1)
    assert np.abs(w0).sum() > 0
    logs = tmp_path / "logs" / "attempt-1"
    assert "replicas in sync: 2" in (logs / "worker-1@host2.log").read_text()
    plan = json.loads((logs / "plan.json").read_text())
    assert [w["host"] for w in plan["workers"]] == ["host1", "host2"]


def test_hostile_argv_reaches_every_remote_worker_byte_for_byte(cluster: SshCluster, tmp_path: Path) -> None:
    # host1:2 - two workers on one host: each needs its own free port there.
    result = ssh_launch(
        cluster, "--hosts", "host1:2,host2", "--strategy", "none", "--log-dir", str(tmp_path / "logs"),
        "--env", f"ARGV_OUT={tmp_path}", str(SCRIPTS / "argv_dump.py"), "--", *HOSTILE,
    )
    assert result.returncode == 0, result.stderr
    addresses = set()
    for index in ("0", "1", "2"):
        seen = json.loads((tmp_path / f"{index}.json").read_text(encoding="utf-8"))
        assert seen["argv"] == [str(SCRIPTS / "argv_dump.py"), *HOSTILE]
        assert seen["env"]["TPUCTL_WORKER_INDEX"] == index
        tf_config = json.loads(seen["env"]["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": int(index)}
        addresses.update(tf_config["cluster"]["worker"])
    assert len(addresses) == 3, addresses  # distinct ports, although all three "hosts" are one machine
    hosts = [w["host"] for w in json.loads((tmp_path / "logs" / "attempt-1" / "plan.json").read_text())["workers"]]
    assert hosts == ["host1", "host1", "host2"]


def test_crash_on_one_host_stops_the_others_and_leaves_no_process(
    cluster: SshCluster, tmp_path: Path, pid_dir: Path
) -> None:
    started = time.monotonic()
    result = ssh_launch(
        cluster, str(SCRIPTS / "crash_or_hang.py"), "--hosts", "host1,host2,host3", "--strategy", "none",
        "--log-dir", str(tmp_path / "logs"), "--env", f"PID_DIR={pid_dir}", "--env", "CRASH_STATUS=7", timeout=60,
    )
    assert time.monotonic() - started < 20
    assert result.returncode == 7, result.stderr
    assert "worker:1 on host2 failed: exit status 7" in result.stderr
    assert "worker 1 about to crash" in result.stderr  # the root-cause summary shows its last lines
    assert "[worker:1@host2] worker 1 about to crash" in result.stdout
    assert len(read_pids(pid_dir)) == 6
    assert_none_survive(pid_dir)
    logs = tmp_path / "logs" / "attempt-1"
    assert "about to crash" in (logs / "worker-1@host2.log").read_text()
    assert (logs / "worker-0@host1.log").exists() and (logs / "worker-2@host3.log").exists()
    assert f"full log: {logs / 'worker-1@host2.log'}" in result.stderr


def test_unreachable_host_fails_fast_and_starts_nothing(cluster: SshCluster, tmp_path: Path, pid_dir: Path) -> None:
    started = time.monotonic()
    result = ssh_launch(
        cluster, str(SCRIPTS / "crash_or_hang.py"), "--hosts", "host1,hostdead,host2", "--strategy", "none",
        "--log-dir", str(tmp_path / "logs"), "--env", f"PID_DIR={pid_dir}", timeout=60,
    )
    assert time.monotonic() - started < 10
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("Error: cannot reach hostdead over ssh (3 attempts): ")
    assert "Connection refused" in errors[0] and "host1" not in errors[0]
    assert read_pids(pid_dir) == []
    assert not (tmp_path / "logs" / "attempt-1" / "worker-0@host1.log").exists()


def _start_hanging_launch(cluster: SshCluster, tmp_path: Path, pid_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        tpuctl_cmd(
            "launch", "--ssh-config", str(cluster.config), str(SCRIPTS / "crash_or_hang.py"), "--hosts", "host1,host2",
            "--strategy", "none", "--log-dir", str(tmp_path / "logs"), "--env", f"PID_DIR={pid_dir}",
        ),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(lambda: len(read_pids(pid_dir)) == 4)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.communicate()[1]) from None
    return proc


def _ssh_children(parent: int, host: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and argv[0] == b"ssh" and host.encode() in argv:
            found.append(int(entry.name))
    return found


def test_dropped_connection_ends_the_launch_and_its_remote_workers(
    cluster: SshCluster, tmp_path: Path, pid_dir: Path
) -> None:
    proc = _start_hanging_launch(cluster, tmp_path, pid_dir)
    [connection] = _ssh_children(proc.pid, "host2")
    os.kill(connection, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 255, err
    assert "worker:1 on host2 failed: lost the ssh connection to host2" in err
    assert_none_survive(pid_dir)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_interrupted_or_killed_launcher_leaves_no_remote_process(
    cluster: SshCluster, tmp_path: Path, pid_dir: Path, sig: signal.Signals
) -> None:
    proc = _start_hanging_launch(cluster, tmp_path, pid_dir)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
        assert "interrupted" in err
    assert_none_survive(pid_dir, timeout=10)


def test_a_detached_launch_on_hosts_is_listed_and_stop_leaves_no_remote_worker(
    cluster: SshCluster, tmp_path: Path, pid_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`launch --detach --hosts` (issue 23): the run goes on without the command, `runs` lists it, `logs` shows
    its remote workers' lines, and `stop` ends it as Ctrl-C would: nothing left on any host."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # this test's records, for the tpuctl it starts and for here
    result = ssh_launch(
        cluster, "--detach", str(SCRIPTS / "crash_or_hang.py"), "--hosts", "host1,host2", "--strategy", "none",
        "--log-dir", str(tmp_path / "logs"), "--env", f"PID_DIR={pid_dir}", timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip()
    wait_for(lambda: len(read_pids(pid_dir)) == 4)  # a worker and its child on each host
    listed = run_tpuctl("runs", "--json", timeout=60)
    (row,) = [row for row in json.loads(listed.stdout) if row["run_id"] == run_id]
    assert (row["backend"], row["state"], row["detached"]) == ("ssh", "running", True)
    wait_for(lambda: "[worker:1@host2] worker 1 running" in run_tpuctl("logs", run_id, timeout=60).stdout.splitlines(), timeout=10)
    stop = run_tpuctl("stop", run_id, timeout=90)
    assert stop.returncode == 0, stop.stderr
    assert f"run {run_id} stopped" in stop.stdout
    assert_none_survive(pid_dir)
    (ended,) = [row for row in json.loads(run_tpuctl("runs", "--json", timeout=60).stdout) if row["run_id"] == run_id]
    assert (ended["state"], ended["exit_code"]) == ("stopped", 130)
    assert json.loads((tmp_path / "logs" / "outcome.json").read_text())["interrupted"]


def test_sync_copies_the_script_folder_and_runs_it_in_the_remote_dir(cluster: SshCluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "helper.py").write_text("VALUE = 'from the helper'\n")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "junk.pyc").write_bytes(b"x")
    # Issue 34: a git checkout whose .gitignore keeps data/ out and whose .tpuctlignore keeps out a tracked checkpoint.
    (project / "data").mkdir()
    (project / "data" / "shard-0.tfrecord").write_bytes(b"\0" * 4096)
    (project / "init.ckpt").write_bytes(b"\0" * 1024)
    (project / ".gitignore").write_text("data/\n__pycache__/\n")
    (project / ".tpuctlignore").write_text("*.ckpt\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "init.ckpt"], cwd=project, check=True)
    (project / "train.py").write_text(
        "import json, os, sys\nfrom pkg.helper import VALUE\n"
        "with open(os.path.join(os.environ['OUT'], os.environ['TPUCTL_WORKER_INDEX'] + '.json'), 'w') as f:\n"
        "    json.dump({'cwd': os.getcwd(), 'argv': sys.argv, 'value': VALUE, 'model': os.environ.get('TPUCTL_MODEL_DIR'),\n"
        "               'hostile': os.environ.get('HOSTILE')}, f)\n"
    )
    remote = tmp_path / "remote"
    out = tmp_path / "out"
    out.mkdir()
    args = (
        "train.py", "--hosts", "host1,host2", "--strategy", "none", "--sync", "--remote-dir", str(remote),
        "--model-dir", "runs/m", "--log-dir", str(tmp_path / "logs"), "--env", f"OUT={out}",
        "--env", "HOSTILE=$(id) `id` 'q' \"x\" ; a=b ünï\nline",
    )
    first = run_tpuctl("launch", "--ssh-config", str(cluster.config), *args, cwd=project)
    assert first.returncode == 0, first.stderr
    assert (remote / "pkg" / "helper.py").read_text() == "VALUE = 'from the helper'\n"
    assert not (remote / "__pycache__").exists() and not (remote / "data").exists() and not (remote / "init.ckpt").exists()
    sent = sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file() and "__pycache__" not in p.parts)  # the workers' own .pyc
    assert sent == [".gitignore", ".tpuctlignore", "pkg/helper.py", "train.py"]
    size = sum((project / name).stat().st_size for name in (".gitignore", ".tpuctlignore", "pkg/helper.py", "train.py"))
    assert f"tpuctl: sync: 4 file(s), {size} bytes to each of 2 hosts ({2 * size} bytes in all)" in first.stderr.splitlines()
    for index in ("0", "1"):
        seen = json.loads((out / f"{index}.json").read_text())
        assert seen == {
            "cwd": str(remote), "argv": ["train.py"], "value": "from the helper", "model": str(remote / "runs" / "m"),
            "hostile": "$(id) `id` 'q' \"x\" ; a=b ünï\nline",
        }
    assert "synced" in first.stderr
    # Issue 37: runs/m is on the hosts' disks (the workers' model dir above): the launcher publishes no view there nor
    # anywhere on its own disk, and says so once.
    said = [line for line in first.stderr.splitlines() if "view is not published" in line]
    where = f"{remote / 'runs' / 'm'} is on the ssh workers' own disks, not this machine's"
    assert said == [f"tpuctl: note: the run's view is not published into the model dir: {where}; a gs:// --model-dir gets it (TensorBoard's tpuctl tab)"]
    assert not list(tmp_path.rglob("view.json"))


def test_sync_without_rsync_sends_only_changed_files(
    cluster: SshCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('v1')\n")
    (source / "data.txt").write_text("same\n")
    dest = tmp_path / "dest"
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "rsync" else "/usr/bin/" + name)
    notes: list[str] = []

    def sync_once() -> None:
        paths = RemotePaths(workdir=str(dest), script="train.py", sync_source=str(source), sync_dest=str(dest))
        starter = SshStarter(
            parse_slot_hosts("host1,host2"),
            SshOptions(config=str(cluster.config)), paths, python=sys.executable, sync=select(str(source)), notice=notes.append,
        )
        try:
            starter.reserve(2)
        finally:
            starter.release()

    sync_once()
    assert (dest / "train.py").read_text() == "print('v1')\n" and (dest / "data.txt").read_text() == "same\n"
    assert "host1 (2 file(s))" in notes[-1] and "host2" in notes[-1]
    (source / "train.py").write_text("print('v2, longer')\n")
    sync_once()
    assert (dest / "train.py").read_text() == "print('v2, longer')\n"
    assert "host1 (1 file(s))" in notes[-1]
    sync_once()
    assert "host1 (unchanged)" in notes[-1]


def test_run_everywhere_reports_each_host_and_retries_only_connections(cluster: SshCluster) -> None:
    options = SshOptions(config=str(cluster.config), fanout=2)
    hosts = ["host1", "host2", "hostdead", "host3"]
    results = run_everywhere(hosts, ["sh", "-c", 'echo "$0 $1"; exit 3', "it's", "$HOME"], options)
    assert [r.host for r in results] == hosts
    for result in (results[0], results[1], results[3]):
        assert (result.exit_code, result.output, result.error, result.attempts) == (3, "it's $HOME\n", None, 1)
    dead = results[2]
    assert dead.exit_code == 255 and dead.attempts == 3 and not dead.ok
    assert dead.error is not None and "Connection refused" in dead.error
    # a command that itself exits 255 ran: it is not a connection failure and never runs twice
    [own] = run_everywhere(["host1"], ["sh", "-c", "echo once; exit 255"], options)
    assert (own.exit_code, own.output, own.error, own.attempts) == (255, "once\n", None, 1)
    [fed] = run_everywhere(["host2"], ["cat"], options, stdin=b"to stdin\n")
    assert fed.ok and fed.output == "to stdin\n"


# The runtime shipped to hosts whose Python has no tpuctl (issue 28, item 5).

WHERE = "import os, sys, tpuctl\nprint('tpuctl from', tpuctl.__file__, 'path', os.environ.get('PYTHONPATH'), sys.argv[1:])\n"


@pytest.fixture
def bare_python(tmp_path: Path) -> str:
    """A host with nothing but Python's standard library: the base interpreter under -S, so no
    site-packages at all (no tpuctl, click, rich or google)."""
    wrapper = tmp_path / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {Path(sys.base_prefix) / "bin" / "python3"} -S "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a checkout on PYTHONPATH is not the host's install
    probe = subprocess.run([str(wrapper), "-c", "import tpuctl"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "No module named 'tpuctl'" in probe.stderr
    return str(wrapper)


def _launch_where(cluster: SshCluster, cwd: Path, python: str) -> subprocess.CompletedProcess[str]:
    return ssh_launch(
        cluster, "--hosts", "host1:2,host2", "--strategy", "none", "--python", python, "--env", "PYTHONPATH=/opt/theirs",
        "where.py", "a b", cwd=cwd, timeout=60,
    )


def test_a_host_without_tpuctl_gets_the_runtime_once_and_a_damaged_copy_is_replaced(cluster: SshCluster, tmp_path: Path, bare_python: str) -> None:
    from tpuctl.ssh.shipment import shipment

    for index in (1, 2):
        shutil.rmtree(cluster.cache(index) / "tpuctl", ignore_errors=True)  # earlier tests shipped it too
    (tmp_path / "where.py").write_text(WHERE)
    digest = shipment().digest
    copies = {host: cluster.cache(index) / "tpuctl" / "runtime" / digest for index, host in ((1, "host1"), (2, "host2"))}

    first = _launch_where(cluster, tmp_path, bare_python)
    assert first.returncode == 0, first.stderr
    assert f"tpuctl: shipped tpuctl's runtime {digest[:12]} ({len(shipment().files)} files) to host1, host2;" in first.stderr
    for tag, host in (("worker:0@host1", "host1"), ("worker:1@host1", "host1"), ("worker:2@host2", "host2")):
        # The shipped copy is the worker's tpuctl, ahead of the user's own PYTHONPATH.
        assert f"[{tag}] tpuctl from {copies[host]}/tpuctl/__init__.py path {copies[host]}:/opt/theirs ['a b']" in first.stdout

    second = _launch_where(cluster, tmp_path, bare_python)
    assert second.returncode == 0, second.stderr
    assert "shipped" not in second.stderr  # the cache is used as it is

    (copies["host2"] / "tpuctl" / "inputs" / "errors.py").write_text("raise SystemExit('not the runtime tpuctl shipped')\n")
    third = _launch_where(cluster, tmp_path, bare_python)
    assert third.returncode == 0, third.stderr
    assert "to host2 (replaced: tpuctl/inputs/errors.py differs from what was shipped);" in third.stderr
    assert (copies["host2"] / "tpuctl" / "inputs" / "errors.py").read_bytes() == dict(shipment().files)["tpuctl/inputs/errors.py"]

    os.chown(copies["host1"], 65534, 65534)  # someone else's: neither used nor replaced, nothing started
    try:
        refused = _launch_where(cluster, tmp_path, bare_python)
    finally:
        os.chown(copies["host1"], os.getuid(), os.getgid())
    assert refused.returncode == 1
    errors = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: host1: {copies['host1']} belongs to another user (uid 65534); tpuctl neither uses nor replaces it there (remove it)"]
    assert "tpuctl from" not in refused.stdout

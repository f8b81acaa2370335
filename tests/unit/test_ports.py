"""Port reservations: distinct, held against other binders, and exclusive across launches."""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.process import ports


def test_reserved_ports_are_distinct_and_held() -> None:
    held = ports.reserve(8)
    try:
        assert len(set(held.ports)) == 8
        for port in held.ports:
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("0.0.0.0", port))  # what TensorFlow's gRPC server would do
    finally:
        held.release()


def test_a_port_handed_to_a_worker_stays_off_limits_to_other_launches() -> None:
    held = ports.reserve(4)
    try:
        held.close_sockets()  # the workers now own the ports; only the locks remain
        probe = textwrap.dedent(
            """
            from tpuctl.launch.process import ports
            others = ports.reserve(200)
            print(" ".join(map(str, others.ports)))
            others.release()
            """
        )
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        assert not set(map(int, out.split())) & set(held.ports)
    finally:
        held.release()


def test_release_frees_the_ports() -> None:
    held = ports.reserve(2)
    port = held.ports[0]
    held.release()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))


# The lock folder: private, this user's, and emptied by releases (issue 12, Exposure).


@pytest.fixture
def tmpdir_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path / f"tpuctl-{os.getuid()}"


def test_the_lock_folder_is_private_and_lock_files_go_with_their_release(tmpdir_base: Path) -> None:
    held = ports.reserve(3)
    folder = tmpdir_base / "ports"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(tmpdir_base.stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == sorted(map(str, held.ports))
    held.release()
    assert list(folder.iterdir()) == []


def test_a_lock_folder_left_open_by_an_older_tpuctl_is_closed_and_emptied(tmpdir_base: Path) -> None:
    folder = tmpdir_base / "ports"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    for port in range(40000, 40300):  # what the older tpuctl left behind
        (folder / str(port)).write_text("")
    held_by_a_running_launch = os.open(folder / "40001", os.O_RDWR)
    fcntl.flock(held_by_a_running_launch, fcntl.LOCK_EX)
    try:
        ports.reserve(1).release()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert [p.name for p in folder.iterdir()] == ["40001"]  # a held lock stays
    finally:
        os.close(held_by_a_running_launch)


def test_the_lock_files_of_a_launch_killed_by_sigkill_go_with_the_next_launch(tmpdir_base: Path) -> None:
    """The kernel drops a SIGKILLed launch's flocks, not its files: the next launch removes them as it starts."""
    holder = textwrap.dedent(
        """
        import os, sys, tempfile
        tempfile.gettempdir = lambda: sys.argv[1]
        from tpuctl.launch.process import ports
        held = ports.reserve(3)
        print(" ".join(map(str, held.ports)), flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    killed = subprocess.run([sys.executable, "-c", holder, str(tmpdir_base.parent)], capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9, killed.stderr
    left = sorted(killed.stdout.split())
    folder = tmpdir_base / "ports"
    assert sorted(p.name for p in folder.iterdir()) == left  # behind, locking nothing
    held = ports.reserve(1)
    try:
        assert sorted(p.name for p in folder.iterdir()) == [str(held.ports[0])]
    finally:
        held.release()


@pytest.mark.parametrize("which", ["base", "ports"])
def test_a_lock_folder_others_can_write_is_refused(tmpdir_base: Path, which: str) -> None:
    (tmpdir_base / "ports").mkdir(parents=True)
    os.chmod(tmpdir_base / "ports" if which == "ports" else tmpdir_base, 0o777)
    with pytest.raises(TpuctlError, match="writable by other users"):
        ports.reserve(1)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_lock_folder_of_another_user_is_refused_in_one_line(tmpdir_base: Path) -> None:
    (tmpdir_base / "ports").mkdir(parents=True, mode=0o700)
    os.chown(tmpdir_base / "ports", 65534, 65534)
    with pytest.raises(TpuctlError, match="belongs to uid 65534") as caught:
        ports.reserve(1)
    assert "\n" not in str(caught.value)


def test_a_symlinked_lock_folder_is_refused(tmpdir_base: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    tmpdir_base.mkdir(mode=0o700)
    (tmpdir_base / "ports").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TpuctlError, match="not a directory"):
        ports.reserve(1)


def test_a_lock_file_removed_between_open_and_flock_is_opened_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The release race: we open the file, its holder unlinks and unlocks it, then we lock
    the orphaned inode. A third launch could create and lock a new file at the same path, so
    the lock we hold must be the one the path names."""
    holder = ports._lock(tmp_path, 5000)
    assert holder is not None
    assert ports._lock(tmp_path, 5000) is None  # held: refused
    real_flock = fcntl.flock
    interleaved: list[int] = []

    def flock(fd: int, operation: int) -> None:
        if not interleaved:
            interleaved.append(fd)
            os.unlink(tmp_path / "5000")  # the holder's release, in its order: unlink, then unlock
            os.close(holder)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    fd = ports._lock(tmp_path, 5000)
    assert fd is not None
    assert os.fstat(fd).st_ino == os.stat(tmp_path / "5000").st_ino
    os.close(fd)


def test_a_real_launch_killed_by_sigkill_leaves_locks_that_the_next_launch_sweeps(tmp_path: Path) -> None:
    """docs/launch.md's promise, end to end: tpuctl SIGKILLed mid-run (no release ran) leaves its lock files,
    locking nothing; the next launch removes them as it starts. Stdlib scripts: no TensorFlow needed for ports."""
    from tests.conftest import tpuctl_cmd

    (tmp_path / "wait.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    (tmp_path / "quick.py").write_text("print('done')\n")
    env = {**os.environ, "TMPDIR": str(tmp_path), "NO_COLOR": "1"}
    folder = tmp_path / f"tpuctl-{os.getuid()}" / "ports"
    argv = ["launch", "--workers", "2", "--strategy", "none"]
    first_argv = tpuctl_cmd(*argv, "--log-dir", str(tmp_path / "a"), str(tmp_path / "wait.py"))
    first = subprocess.Popen(first_argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert first.stdout is not None
        while b"up" not in first.stdout.readline():
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
        left = sorted(p.name for p in folder.iterdir())
        assert len(left) >= 2
    finally:
        first.kill()
        first.wait()
    assert sorted(p.name for p in folder.iterdir()) == left  # behind: the kernel dropped the flocks, not the files
    second_argv = tpuctl_cmd(*argv, "--log-dir", str(tmp_path / "b"), str(tmp_path / "quick.py"))
    second = subprocess.run(second_argv, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert list(folder.iterdir()) == []  # its own released, the killed launch's swept

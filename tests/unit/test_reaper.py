"""The reaper (tpuctl/safety/reaper.py) with real processes: it reports the command's status as the command
ended, and leaves nothing behind, neither children in sessions of their own nor orphans."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tpuctl.safety import reaper

pytestmark = pytest.mark.skipif(not reaper.supported(), reason="the reaper needs Linux (/proc, PR_SET_CHILD_SUBREAPER)")

# Starts a child in its own session and a grandchild orphaned at once (its parent exits), records both, then acts.
FAMILY = """
import os, subprocess, sys, time
out = sys.argv[1]
detached = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
sleeper = "import time; time.sleep(60)"
parent = f"import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', {sleeper!r}], stdout=subprocess.DEVNULL).pid)"
orphan = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE)
orphaned = orphan.communicate()[0].decode().strip()
with open(out, "w") as f:
    f.write(f"{detached.pid} {orphaned}")
if sys.argv[2] == "exit":
    sys.exit(5)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _family(tmp_path: Path, then: str) -> tuple[reaper.Reaped, list[int]]:
    out = tmp_path / "pids"
    reaped = reaper.spawn([sys.executable, "-c", FAMILY, str(out), then])
    deadline = time.monotonic() + 20
    while not out.exists() or len(out.read_text().split()) < 2:
        assert time.monotonic() < deadline, "the family never started"
        time.sleep(0.01)
    return reaped, [int(pid) for pid in out.read_text().split()]


def _assert_gone(pids: list[int], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while left := [pid for pid in pids if _alive(pid)]:
        assert time.monotonic() < deadline, f"survivors: {left}"
        time.sleep(0.01)


@pytest.mark.parametrize(("argv", "status"), [(["sh", "-c", "exit 7"], 7), (["sh", "-c", "kill -TERM $$"], -signal.SIGTERM), (["true"], 0)])
def test_the_status_is_the_commands(argv: list[str], status: int) -> None:
    assert reaper.spawn(argv).proc.wait(timeout=20) == status


def test_when_the_command_ends_what_it_left_anywhere_is_killed(tmp_path: Path) -> None:
    reaped, pids = _family(tmp_path, "exit")
    assert reaped.proc.wait(timeout=20) == 5
    _assert_gone(pids)


def test_cutting_the_lifeline_kills_the_whole_tree(tmp_path: Path) -> None:
    reaped, pids = _family(tmp_path, "hang")
    reaped.cut()
    assert reaped.proc.wait(timeout=20) == -signal.SIGKILL
    _assert_gone([reaped.pid, *pids])


def test_the_stopping_signals_are_for_the_command_not_the_reaper(tmp_path: Path) -> None:
    reaped, pids = _family(tmp_path, "hang")
    reaped.proc.send_signal(signal.SIGTERM)  # the reaper alone: ignored
    time.sleep(0.2)
    assert reaped.proc.poll() is None
    reaped.stop(grace_s=5)  # SIGINT to the group ends the command (KeyboardInterrupt), then the rest
    assert reaped.proc.returncode in (1, -signal.SIGINT)
    _assert_gone([reaped.pid, *pids])


def test_a_stop_while_the_command_starts_is_the_commands_not_the_reapers() -> None:
    """The command signals its group the moment it runs, while its reaper may still be waiting to hear that the
    exec worked (CI once lost a reaper to KeyboardInterrupt there): the reaper lives on and the command's status
    comes back; the command gets SIGINT as its launcher left it (default: it dies of it)."""
    for _ in range(3):
        assert reaper.spawn(["sh", "-c", "trap '' INT; kill -INT 0; exit 7"]).proc.wait(timeout=20) == 7
        assert reaper.spawn(["sh", "-c", "kill -INT 0; sleep 5"]).proc.wait(timeout=20) == -signal.SIGINT


def test_a_launcher_that_ignores_sigint_passes_that_on_to_the_command() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        reaped = reaper.spawn(["sh", "-c", "kill -INT 0; exit 3"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reaped.proc.wait(timeout=20) == 3


def test_a_command_that_cannot_start_gives_127() -> None:
    assert reaper.spawn(["/nonexistent/command"], stderr=subprocess.DEVNULL).proc.wait(timeout=20) == 127


# Leaves its group and session, starts a child in a session of its own, then SIGKILLs its parent (the reaper).
ESCAPE = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.setsid()
os.kill(os.getppid(), signal.SIGKILL)
time.sleep(60)
"""


def test_a_command_that_kills_its_reaper_dies_with_it_and_its_escapees_come_to_the_launcher(tmp_path: Path) -> None:
    out = tmp_path / "pids"
    before = reaper.adopt_orphans()
    assert before is not None
    try:
        reaped = reaper.spawn([sys.executable, "-c", ESCAPE, str(out)])
        assert reaped.proc.wait(timeout=20) == -signal.SIGKILL
        pids = [int(pid) for pid in out.read_text().split()]
        _assert_gone(pids[:1])  # the command: its parent-death signal
        assert _alive(pids[1]) and pids[1] in reaper.descendants(os.getpid())  # its child: adopted by the launcher
    finally:
        killed = reaper.kill_adopted(before)
    assert pids[1] in killed
    _assert_gone(pids)


def test_a_stopped_reaper_wakes_when_its_launcher_dies(tmp_path: Path) -> None:
    # The launcher is a shell that spawns the reaper, then everything is stopped and the launcher SIGKILLed.
    out = tmp_path / "pids"
    launcher = subprocess.Popen(
        [sys.executable, "-c", f"import sys, time; sys.path.insert(0, {str(Path(reaper.__file__).parents[2])!r}); "
         f"from tpuctl.safety import reaper; r = reaper.spawn([sys.executable, '-c', {FAMILY!r}, {str(out)!r}, 'hang']); "
         "print(r.pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    assert launcher.stdout is not None
    reaper_pid = int(launcher.stdout.readline())
    deadline = time.monotonic() + 20
    while not out.exists() or len(out.read_text().split()) < 2:
        assert time.monotonic() < deadline, "the family never started"
        time.sleep(0.01)
    family = [reaper_pid, *reaper.descendants(reaper_pid)]
    try:
        for pid in family:
            os.kill(pid, signal.SIGSTOP)
        launcher.kill()
        launcher.wait()
        _assert_gone(family)
    finally:
        for pid in family:  # a failure must not leave stopped processes behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_one_shot_command_dies_with_tpuctl_even_by_sigkill(tmp_path: Path) -> None:
    """reaper.run: what tpuctl runs for a moment (kubectl, py-spy, rsync) is gone once tpuctl is, SIGKILL included,
    even while started from a thread other than the main one."""
    pid_file = tmp_path / "child.pid"
    launcher = textwrap.dedent(
        f"""
        import sys, threading, time
        from tpuctl.safety import reaper
        code = "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
        threading.Thread(target=lambda: reaper.run([sys.executable, "-c", code], timeout=600)).start()
        time.sleep(300)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", launcher])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")

"""A worker's Python stacks, taken from outside while it runs: for `tpuctl stacks`, SIGQUIT to a
launch, and --hang-timeout (docs/hangs.md).

The worker's reaper (tpuctl/safety/reaper.py), its parent, takes them on the launcher's
request. py-spy comes first where the host has it: it also sees native frames
and needs nothing from the worker. Otherwise the worker's own `faulthandler`,
registered on SIGQUIT before the script starts, writes every thread's stack to
a pipe the reaper reads; faulthandler writes from its C signal handler, so a
worker blocked inside a TensorFlow collective, or holding the GIL in C code,
still answers. Imported by every worker: only modules Python has loaded anyway.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time

SIGNAL = signal.SIGQUIT  # the JVM's and Go's "dump your stacks" signal; a TF worker has no other use for it
PY_SPY_TIMEOUT_S = 10.0
ANSWER_S = 3.0  # for the first byte of a faulthandler dump
QUIET_S = 0.2  # after the last byte: the dump is written in one go from the signal handler


def register(dumps: int) -> None:
    """In the worker: on SIGQUIT, write every thread's stack to `dumps` (the pipe to the reaper)."""
    faulthandler.register(SIGNAL, file=dumps, all_threads=True, chain=False)


def capture(pid: int, dumps: int) -> bytes:
    """In the reaper: the worker's stacks as text (py-spy's or faulthandler's format), b"" if it did not answer."""
    text = _py_spy(pid)
    if text:
        return text
    _drain(dumps)  # an earlier answer that came too late
    try:
        os.kill(pid, SIGNAL)
    except OSError:
        return b""
    return _read_answer(dumps)


def _py_spy(pid: int) -> bytes:
    """`py-spy dump --native` where py-spy is on PATH and may attach (ptrace rules: root, or ptrace_scope 0)."""
    import shutil
    import subprocess

    from tpuctl.safety import reaper
    tool = shutil.which("py-spy")
    if tool is None:
        return b""
    try:
        done = reaper.run(
            [tool, "dump", "--native", "--full-filenames", "--pid", str(pid)], capture_output=True, timeout=PY_SPY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return b""
    return done.stdout if done.returncode == 0 else b""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # BlockingIOError included: nothing (more) waiting
        pass


def _read_answer(fd: int) -> bytes:
    import select

    answer = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + ANSWER_S
    while True:
        wait_s = QUIET_S if answer else deadline - time.monotonic()
        if wait_s <= 0 or not poller.poll(wait_s * 1000):
            return bytes(answer)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        except OSError:
            return bytes(answer)
        if not chunk:
            return bytes(answer)
        answer += chunk

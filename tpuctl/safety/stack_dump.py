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
DUMP_S = 10.0  # for the whole dump, however it trickles in: as long as py-spy gets
CUT = b"\n(cut: the stacks were longer than tpuctl sends)\n"
# A worker's stacks as its reaper sends them, cut to this many bytes. CPython's faulthandler writes at most 100 threads
# of at most 100 frames, a frame a line of a file and a function name (each cut at 500 characters; ~150 bytes in a real
# one): ~1.5 MB of a real dump, under half of this. py-spy has no such limit (a thread a Python thread, a native frame a
# line): a longer dump is cut, its start kept.
STACKS_LIMIT = 4 << 20
# The longest line a worker's control channel carries: `stacks HEX` (hex doubles the dump); every other message
# ("ready", the reaper's news, a `timeline {json}` event: runs/timeline.py LINE_LIMIT) is a few kilobytes at most. A
# longer line is dropped as it is read (backends/local, the ssh agent), never held whole: the script can write there too.
MESSAGE_LIMIT = 2 * STACKS_LIMIT + 64


def register(dumps: int) -> None:
    """In the worker: on SIGQUIT, write every thread's stack to `dumps` (the pipe to the reaper)."""
    faulthandler.register(SIGNAL, file=dumps, all_threads=True, chain=False)


def capture(pid: int, dumps: int) -> bytes:
    """In the reaper: the worker's stacks as text (py-spy's or faulthandler's format), b"" if it did not answer;
    never more than STACKS_LIMIT bytes (the launcher drops a control line longer than MESSAGE_LIMIT)."""
    text = _py_spy(pid)
    if not text:
        _drain(dumps)  # an earlier answer that came too late
        try:
            os.kill(pid, SIGNAL)
        except OSError:
            return b""
        text = _read_answer(dumps)
    if len(text) <= STACKS_LIMIT:
        return text
    return text[: STACKS_LIMIT - len(CUT)].rpartition(b"\n")[0] + CUT


def _py_spy(pid: int) -> bytes:
    """`py-spy dump --native` where py-spy is on PATH and may attach (ptrace rules: root, or ptrace_scope 0)."""
    import shutil
    import subprocess

    from tpuctl.safety import child_output
    tool = shutil.which("py-spy")
    if tool is None:
        return b""
    try:  # read no further than a dump can be sent (its start is kept), not all py-spy prints until its deadline
        done = child_output.run([tool, "dump", "--native", "--full-filenames", "--pid", str(pid)], timeout=PY_SPY_TIMEOUT_S, limit=STACKS_LIMIT)
    except (OSError, subprocess.SubprocessError):
        return b""
    if done.over:  # stopped at the limit: its start, said to be cut (capture)
        return done.stdout + CUT
    return done.stdout if done.returncode == 0 else b""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # BlockingIOError included: nothing (more) waiting
        pass


def _read_answer(fd: int) -> bytes:
    """faulthandler's dump: its first byte within ANSWER_S, the rest until QUIET_S pass without a byte or DUMP_S in
    all (a script that writes on to the pipe is no dump), no more than STACKS_LIMIT kept."""
    import select

    answer = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    started = time.monotonic()
    while True:
        wait_s = min(QUIET_S, started + DUMP_S - time.monotonic()) if answer else started + ANSWER_S - time.monotonic()
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
        if len(answer) <= STACKS_LIMIT:  # past it, read and dropped: the worker's handler must not block on a full pipe
            answer += chunk

"""Many hosts at once: a small thread pool, and one command run on every host."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import one_line
from tpuctl.safety import child_output
from tpuctl.ssh.client_args import SSH_FAILED, SshOptions, remote_command

# Bytes of a command's output kept a host, its last: callers read its last line (an error, the doctor's answer), and
# a remote that prints without end (a hostile host, `yes`) is read and dropped, not held, until its deadline.
OUTPUT_LIMIT = 16 << 20

_T = TypeVar("_T")
_R = TypeVar("_R")


def parallel(function: Callable[[_T], _R], items: Iterable[_T], limit: int) -> list[_R]:
    """function(item) for every item on at most `limit` threads; results in item order.

    (concurrent.futures would do, but importing it costs a launch 5 ms of logging set-up.)
    The first exception is raised once every item has been tried.
    """
    work = list(items)
    results: list[_R | None] = [None] * len(work)
    errors: list[BaseException | None] = [None] * len(work)
    queue_ = iter(range(len(work)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                index = next(queue_, None)
            if index is None:
                return
            try:
                results[index] = function(work[index])
            except BaseException as err:  # noqa: BLE001 - not swallowed: raised in the caller's thread below
                errors[index] = err

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(limit, len(work))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results  # type: ignore[return-value]


def token() -> str:
    """A random word no worker output will contain by chance (markers, nonces)."""
    return os.urandom(8).hex()


@dataclass(frozen=True)
class HostResult:
    """What one command did on one host."""

    host: str
    exit_code: int  # the command's status; 255 with `error` set when ssh never got it running
    output: str  # stdout and stderr together, as they came (ssh's own messages included)
    error: str | None = None  # why the command did not run (in ssh's words), after every attempt
    attempts: int = 1
    dropped: int = 0  # bytes of output read and not kept: `output` is the last OUTPUT_LIMIT bytes of it

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


def run_everywhere(
    hosts: Sequence[str | HostEntry],
    argv: Sequence[str],
    options: SshOptions,
    *,
    timeout: float | None = None,
    stdin: bytes | None = None,
) -> list[HostResult]:
    """Run `argv` on every host over ssh, at most `options.fanout` at a time; results in host order.

    A connection failure is retried (`options.attempts` tries in all); a command
    that ran is never run twice. `timeout` bounds each try; on expiry the
    result has exit_code 124 and an error. Every caller in tpuctl names it (issue 29:
    every child has a deadline; tests/unit/test_architecture.py checks); None is for the
    user's own command alone (`tpuctl ssh -- CMD`), which lasts as long as they want.
    """
    if not hosts:
        return []
    remote = list(argv)
    remote_command(remote)  # empty argv fails here, before any connection
    return parallel(lambda host: _run_on(host, remote, options, timeout, stdin), hosts, options.fanout)


def marked(argv: Sequence[str], marker: str) -> list[str]:
    """The remote argv as run: the marker proves the command started, so after it a 255 is the command's own status."""
    return ["sh", "-c", f'echo {marker} >&2; exec "$@"', "sh", *argv]


def _run_on(
    host: str | HostEntry, argv: list[str], options: SshOptions, timeout: float | None, stdin: bytes | None
) -> HostResult:
    name = host.host if isinstance(host, HostEntry) else host
    marker = f"tpuctl-connected-{token()}"
    remote = marked(argv, marker)
    error = ""
    for attempt in range(1, options.attempts + 1):
        try:
            done = child_output.run(
                options.command(host, remote), input=stdin, stderr=subprocess.STDOUT, start_new_session=True,
                timeout=timeout, limit=OUTPUT_LIMIT, keep=child_output.TAIL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as expired:
            text = (expired.output or b"").decode("utf-8", "replace")
            return HostResult(name, 124, _strip_marker(text, marker)[0], f"timed out after {timeout:g}s", attempt)
        assert done.returncode is not None  # TAIL reads to the end: only a deadline stops the command
        text, connected = _strip_marker(done.stdout.decode("utf-8", "replace"), marker)
        if connected or done.dropped or done.returncode != SSH_FAILED:  # more than ssh's own words: the command ran
            return HostResult(name, done.returncode, text, None, attempt, done.dropped)
        error = one_line(text, last=True) or f"ssh {exit_words(done.returncode)}"
        if attempt < options.attempts:
            time.sleep(0.25 * 2 ** (attempt - 1))
    return HostResult(name, SSH_FAILED, "", error, options.attempts)


def _strip_marker(text: str, marker: str) -> tuple[str, bool]:
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if line.rstrip("\r\n") != marker]
    return "".join(kept), len(kept) != len(lines)

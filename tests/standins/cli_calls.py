"""`tpuctl ARGS` in this process through the real entry point (issue 12): captured streams, a time limit and a
memory cap, for tests of what a command prints and the status it ends with."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from click.testing import CliRunner

from tpuctl.cli import main

LIMIT_S = 5.0  # per command: every case here fails (or finishes) in well under a second
# Anything that tried to reach Google would fail: no credentials, endpoints nobody answers.
OFFLINE: dict[str, str | None] = {
    "TPUCTL_ACCESS_TOKEN_FILE": "/nonexistent/token",
    "TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9",
    "TPUCTL_VERTEX_ENDPOINT": "http://127.0.0.1:9",
    "TPUCTL_LOGGING_ENDPOINT": "http://127.0.0.1:9",
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9",
    "NO_GCE_CHECK": "true",
}
MEMORY_CAP = 1 << 30  # bytes of address space a command may add


class Hang(Exception):
    """Raised in the command by SIGALRM when it runs past LIMIT_S."""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str
    crash: BaseException | None  # an exception main() let escape: a traceback for the user

    @property
    def one_line_error(self) -> bool:
        lines = [line for line in self.err.splitlines() if line.strip()]
        return len(lines) == 1 and lines[0].startswith("Error:")

    def explain(self, args: list[str]) -> str:
        crash = f"{self.crash.__class__.__name__}: {self.crash}"[:300] if self.crash else None
        return f"tpuctl {' '.join(repr(a)[:80] for a in args)} -> exit {self.code}, crash {crash}, stderr {self.err[-400:]!r}"


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"still running after {LIMIT_S:g} s")


@contextlib.contextmanager
def memory_cap(extra: int = MEMORY_CAP) -> Iterator[None]:
    """Address space capped a little above what this process has: a command that reads
    /dev/zero meets MemoryError (a finding) instead of the machine's OOM killer."""
    page = os.sysconf("SC_PAGE_SIZE")
    size = int(Path("/proc/self/statm").read_text().split()[0]) * page
    previous = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, previous)


def invoke(args: list[str], env: dict[str, str | None] | None = None, limit_s: float = LIMIT_S, cap: int = MEMORY_CAP) -> Result:
    """`tpuctl ARGS` through main(), with stdout/stderr captured, a time limit and a memory cap (`cap` bytes more
    address space than this process has)."""
    with memory_cap(cap):
        return _invoke(args, env, limit_s)


def _invoke(args: list[str], env: dict[str, str | None] | None, limit_s: float) -> Result:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    crash: BaseException | None = None
    code = 0
    with CliRunner().isolation(env=env) as (out, err, _):
        try:
            main(list(args))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        except BaseException as escaped:  # noqa: BLE001 - a traceback is what this test looks for
            crash = escaped
            code = -1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            sys.stdout.flush()
    return Result(code, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace"), crash)


def assert_bad_input(args: list[str], env: dict[str, str | None] | None = None, codes: tuple[int, ...] = (2,)) -> Result:
    result = invoke(args, env)
    assert result.crash is None and result.code in codes and result.one_line_error, result.explain(args)
    assert "Traceback" not in result.out + result.err
    return result


def in_process(*args: str, env: dict[str, str | None] | None = None, limit_s: float = LIMIT_S) -> Result:
    """`tpuctl ARGS` through invoke, for a test of what a command prints and the status it ends with (not of a process:
    its streams, signals or imports); an exception main() let escape fails the test."""
    result = invoke(list(args), env, limit_s)
    assert result.crash is None, result.explain(list(args))
    return result


def launch_in_process(*args: str) -> tuple[int, str, str]:
    """`tpuctl launch ARGS` in this process, through the same entry point (and error lines) as the binary."""
    with CliRunner().isolation() as (out, err, _):
        try:
            main(["launch", *args])
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
    return code, out.getvalue().decode(), err.getvalue().decode()

"""Processes a test starts and reads: what one shows on a terminal, a stream read until some text arrives, `python -c`,
an interpreter of this machine without TensorFlow, and where a process listens."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import IO

import pytest

from tpuctl.launch import preflight


def on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    """Runs `args` with its stdout on a pseudo-terminal (stderr a pipe) and returns what it showed there, read until the
    terminal closes: what a user at a terminal sees, colours and redraws included."""
    primary, secondary = os.openpty()
    try:
        done = subprocess.run(args, stdout=secondary, stderr=subprocess.PIPE, env=env, timeout=timeout)
        os.close(secondary)
        screen = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(primary)
    return done, screen


def read_until(stream: IO[bytes], text: str, timeout: float = 30) -> str:
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"never saw {text!r}; got {seen.decode(errors='replace')!r}"
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            chunk = os.read(stream.fileno(), 4096)
            assert chunk, f"stream closed before {text!r}; got {seen.decode(errors='replace')!r}"
            seen += chunk
    return seen.decode(errors="replace")


def run_python(code: str, tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout, check=False
    )


def python_without_tensorflow() -> str:
    """A real interpreter on this machine whose sys.path has no TensorFlow (tests' own venv has it)."""
    candidates = ["/root/.pyenv/versions/3.11.7/bin/python3", str(Path(sys.base_prefix) / "bin" / "python3"), "/usr/bin/python3"]
    for python in candidates:
        if os.access(python, os.X_OK):
            done = subprocess.run([python, "-c", preflight.FIND_TENSORFLOW], capture_output=True, timeout=30)
            if done.returncode == preflight.NO_TENSORFLOW:
                return python
    pytest.skip("every interpreter here has TensorFlow")


# git as a fresh user runs it: no global or system excludes, no config of this machine's.
GIT_ENV = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": "/nonexistent", "LC_ALL": "C"}


def git(folder: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(folder), *args], env=GIT_ENV, capture_output=True, check=True, timeout=60).stdout


def git_init(folder: Path) -> None:
    """A repository only to ask git what it lists: no template copied (sample hooks, and an info/exclude of comments
    only: the same excludes): ~7 CPU-ms instead of ~11 for each generated tree."""
    git(folder, "init", "-q", "--template=")


def git_selection(folder: Path) -> set[str]:
    """What git lists, less what git says .tpuctlignore files exclude: the two calls selection.py makes, run here
    independently of it."""
    kept = {os.fsdecode(p) for p in git(folder, "ls-files", "-z", "-co", "--exclude-standard").split(b"\0") if p}
    dropped = {os.fsdecode(p) for p in git(folder, "ls-files", "-z", "-coi", "--exclude-per-directory=.tpuctlignore").split(b"\0") if p}
    return kept - dropped


# 127.0.0.1 as /proc/net/tcp writes it, and ::ffff:127.0.0.1 as /proc/net/tcp6 does (little-endian words).
LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F"}


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) of the sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found

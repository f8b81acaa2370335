"""Shared helpers: run the real CLI in a subprocess, and check for leftover processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis fails an example slower than 200 ms by default: a timing assertion, which a loaded machine (CI, a second
# suite beside this one) breaks on a parser that is fine. Speed is the benchmarks' to measure; a hang is still caught
# by each test's own bounds.
settings.register_profile("tpuctl", deadline=None)
settings.load_profile("tpuctl")

# The helpers the test modules share assert too: pytest rewrites their asserts as it does the tests' own (it must be
# told before they are imported), so a failure there shows the values as it would in the test.
pytest.register_assert_rewrite("tests.standins")

from tests.standins.fixtures import google_standin  # noqa: E402, F401

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "integration" / "scripts"

# google.auth must never probe a metadata server from a test.
os.environ.setdefault("NO_GCE_CHECK", "true")
# Every run a test starts keeps its record (and a default log folder) in a state folder of the test session's own,
# never in the user's (~/.local/state/tpuctl); a test that needs its own sets XDG_STATE_HOME again.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="tpuctl-test-state-")


def _hangup_passes(signum: int, frame: object) -> None:
    """This process goes on after a hangup, as under `nohup`; what it starts gets SIGHUP's default action back."""


# A shell without job control starts a background command (`make test &`, a second suite beside the first) with SIGINT
# ignored, and `nohup` ignores SIGHUP; every process the tests start would inherit that, and a Ctrl-C or hangup the
# tests send (to a launch, a reaper, a worker, the supervisor in this process) would do nothing: a test that waits for
# its end would wait forever. A handler of Python's here instead: exec gives each child the default action back.
for _signal, _handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGHUP, _hangup_passes)):
    if signal.getsignal(_signal) is signal.SIG_IGN:
        signal.signal(_signal, _handler)


def tpuctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpuctl", *args]


def run_tpuctl(*args: str, timeout: float = 300, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]


class Pid(int):
    """A pid with the start time its process had when the pid was read: a busy machine may
    reuse the number within seconds, and a new process under an old pid is not a survivor."""

    start: str | None


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def alive(pid: int) -> bool:
    """The same process still exists and is not a zombie waiting for a reaper."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    start = getattr(pid, "start", None)
    return start is None or fields[19] == start  # field 22 of stat: start time in clock ticks


def describe(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        command = "?"
    return f"{pid}: {command}"


def read_pids(folder: Path) -> list[int]:
    pids = []
    for path in folder.glob("*.pid"):
        text = path.read_text().strip()
        if text:
            pid = Pid(int(text))
            fields = _stat(pid)
            pid.start = fields[19] if fields else None
            pids.append(pid)
    return pids


def wait_for(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Poll until condition() is true; a test failure after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


@pytest.fixture
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """XDG data and state folders of the test's own: the node specs and run records it saves meet no other test's."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture(scope="session")
def package_wheels(tmp_path_factory: pytest.TempPathFactory) -> object:
    """The tests' package wheels (tests/standins/package_index.py), built once a session from tiny source packages with
    this environment's pip; each module serves them from an index of its own (PackageIndex(package_wheels.folder(...)))."""
    from tests.standins.package_index import wheel_set

    return wheel_set(tmp_path_factory.mktemp("package-wheels"))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on loopback that accepts TCP connections and never says a word: what makes TensorFlow's connect (and
    any client without a deadline) hang."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "pids"
    folder.mkdir()
    return folder


def documented_outcome() -> dict[str, object]:
    """The `launch --json` outcome example in docs/launch.md: every backend's record has its keys."""
    import json

    text = (ROOT / "docs" / "launch.md").read_text()
    block = text.split("<!-- outcome-schema -->\n```json\n", 1)[1].split("```", 1)[0]
    record: dict[str, object] = json.loads(block)
    return record


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that start TensorFlow workers first, then the other integration modules, then the rest, each
    group as collected (the Makefile runs xdist with --no-loadscope-reorder, so this is the order its workers take
    modules in; xdist's own order, most tests first, put the few-but-long TensorFlow modules last, where one of them
    ran alone at the end while the other workers sat idle). The many small unit modules fill the end."""
    heavy = {item.module.__name__ for item in items if item.module is not None and item.get_closest_marker("tf")}

    def rank(item: pytest.Item) -> int:
        name = item.module.__name__ if item.module is not None else ""
        return 0 if name in heavy else 1 if name.startswith("tests.integration.") else 2

    items.sort(key=rank)


def free_ports(count: int) -> list[int]:
    """Ports free on loopback a moment ago (for processes a test starts by hand, as a job backend's replicas would be)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()

"""A stopping signal at every step of `create` (one zone, a queued kind, a hunt), `delete` and `launch --new-tpu`
leaves nothing of tpuctl's making that no line names (issue 45), through the real CLI and google-cloud-tpu against
the TPU stand-in.

Each command runs once undisturbed to learn its steps (each kind of TPU API request where it first comes: a create's
look, its POST, its first poll; a hunt's tries in each zone and the clean-up between; a run's hunt, create and the
delete at its end); then once per step and signal (SIGTERM as `timeout` sends it, SIGHUP as a closed terminal does,
SIGINT as Ctrl-C; a queued create's, a hunt's and a run's steps get one signal each, the three in turn), the signal sent while that
request is in flight: the stand-in holds the request until the signal has landed, then serves it, so a create the
client gave up on may still be made (what this test found twice: a create, and a run's VM, left billing unnamed).
Afterwards every node and queued resource the stand-in holds that was not there before must be the command's
finished product (exit 0) or be named by the output with the command that deletes it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import tpuctl_cmd
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

ZONE = "us-west4-a"
ELSEWHERE = "europe-west4-a"
TYPE = "v5litepod-16"
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
Prepare = Callable[[GoogleStandin, str], None]


def _nothing(g: GoogleStandin, name: str) -> None:
    return None


def _a_stockout_first(g: GoogleStandin, name: str) -> None:
    g.faults.stockouts.clear()
    g.faults.stockout(ZONE, "capacity")


def _a_node_to_delete(g: GoogleStandin, name: str) -> None:
    with g._lock:
        g.tpu.add_ready(ZONE, name, TYPE, None)


def _new_tpu(name: str, tmp: Path) -> list[str]:
    """A managed run whose VM's hosts refuse ssh (every address a closed loopback port): it is hunted, made, found
    unusable and deleted, every TPU API step of a run's VM without a worker to wait for."""
    config = tmp / "ssh_config"
    if not config.exists():
        with socket.socket() as probe:  # a port nothing listens on once the probe closes
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]
        config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {closed}\n  ConnectTimeout 2\n")
        (tmp / "train.py").write_text("print('never runs')\n")
    return tpuctl_cmd("launch", str(tmp / "train.py"), "--new-tpu", TYPE, "--zone", ZONE, "--ssh-config", str(config), "--strategy", "none",
                      "--log-dir", str(tmp / "logs" / name))  # fmt: skip


def _tpuctl(*args: str) -> Callable[[str, Path], list[str]]:
    """`tpuctl VERB NAME ARGS...`, the node's name after the verb."""
    return lambda name, tmp: tpuctl_cmd(args[0], name, *args[1:])


# (what, its command line for a node name, what to set up first, every signal at each step or one in turn)
COMMANDS: list[tuple[str, Callable[[str, Path], list[str]], Prepare, bool]] = [
    ("create", _tpuctl("create", "--zone", ZONE, "--accelerator-type", TYPE), _nothing, True),
    # A queued create's, a hunt's and a run's steps are a create's and more, through the same handler: each step gets
    # one signal, the three in turn (the suite's time); create and delete get all three at every step.
    ("create-reserved", _tpuctl("create", "--zone", ZONE, "--accelerator-type", TYPE, "--reserved", "--reservation", "myres"), _nothing, False),
    ("hunt", _tpuctl("create", "--zones", f"{ZONE},{ELSEWHERE}", "--accelerator-type", TYPE), _a_stockout_first, False),
    ("delete", _tpuctl("delete", "--yes"), _a_node_to_delete, True),
    ("new-tpu", _new_tpu, _nothing, False),
]


def _held(g: GoogleStandin) -> set[tuple[str, str, str]]:
    """(kind, zone, name) of every node and queued resource the stand-in holds."""
    with g._lock:
        g.tpu.advance()
        nodes = {("node", zone, name) for zone, name in g.tpu.nodes}
        queued = {("queued resource", zone, name) for zone, name in g.tpu.queue.records}
    return nodes | queued


def _step(method: str, path: str) -> str:
    """A request as a step of the command: its method and path, less the name of the operation it polls."""
    return f"{method} {_OPERATION.sub('/operations/*', path)}"


_OPERATION = re.compile(r"/operations/[^/]+")


def _run(g: GoogleStandin, env: dict[str, str], cwd: Path, argv: list[str], at: int | None, signum: int) -> tuple[int, str, list[str]]:
    """Run tpuctl; with `at`, send `signum` while its at-th TPU API request is in flight. The exit status, the
    output, and its TPU API requests as steps."""
    seen: list[str] = []
    started: list[subprocess.Popen[str]] = []

    def hook(method: str, path: str) -> None:
        if not path.startswith("/v2"):
            return  # quotas, prices, tokens: not the TPU API
        seen.append(_step(method, path))
        if len(seen) == at and started:
            os.kill(started[0].pid, signum)
            time.sleep(0.1)  # the signal lands while the request is in flight; then it is served all the same

    g.on_request = hook
    try:
        with subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            started.append(proc)
            out, err = proc.communicate(timeout=90)
    finally:
        g.on_request = None
    return proc.returncode, out + err, seen


def _settled(g: GoogleStandin) -> set[tuple[str, str, str]]:
    """What the stand-in holds once the request held in flight was served and deletes have had time to finish."""
    time.sleep(0.15)
    deadline = time.monotonic() + 3.0
    while True:
        with g._lock:
            g.tpu.advance()
            busy = any(node.get("state") == "DELETING" for node in g.tpu.nodes.values())
        if not busy or time.monotonic() > deadline:
            return _held(g)
        time.sleep(0.05)


@pytest.mark.parametrize(("what", "command", "prepare", "every"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_signal_at_any_step_leaves_nothing_unnamed(
    google_standin: GoogleStandin, tmp_path: Path, what: str, command: Callable[[str, Path], list[str]], prepare: Prepare, every: bool
) -> None:
    g = google_standin
    g.create_delay_s = 0.1
    env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": ZONE}
    prepare(g, "calm")
    code, output, calm = _run(g, env, tmp_path, command("calm", tmp_path), None, 0)
    # Each kind of request once, where it first comes: a poll repeated is the same step again.
    steps = [index for index, step in enumerate(calm, start=1) if step not in calm[: index - 1]]
    assert (code == 0 or what == "new-tpu") and len(steps) >= 3, (output, calm)
    unnamed: list[str] = []
    for turn, step in enumerate(steps):
        for signum in SIGNALS if every else (SIGNALS[turn % len(SIGNALS)],):
            name = f"s{step}-{signal.Signals(signum).name.lower()}"
            prepare(g, name)
            before = {held for held in _held(g) if held[2] != name}  # a node `delete` was asked to delete must be named too
            code, output, _ = _run(g, env, tmp_path, command(name, tmp_path), step, signum)
            assert "Traceback" not in output, output
            for kind, zone, left in _settled(g) - before:
                finished = code == 0 and what != "delete" and f"{left} (" in output
                if not finished and f"tpuctl delete {left} --zone {zone}" not in output:
                    unnamed.append(f"step {step} {signal.Signals(signum).name}: {kind} {left} in {zone} (exit {code}): {output[-300:]!r}")
    assert not unnamed, "\n".join(unnamed)

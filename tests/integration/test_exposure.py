"""Local workers are not reachable from other machines, and still reach out (issue 12, Exposure).

TensorFlow's gRPC server binds every interface; the bind shim (tpuctl/launch/bindshim) keeps the
workers' own ports on loopback. Measured as the issue asks: `ss -ltnp` during a real 2-worker
TensorFlow launch. The rest uses a no-TensorFlow script that binds the way gRPC does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl
from tpuctl.backends.local import bindshim

WILDCARD = re.compile(r"^(\*|0\.0\.0\.0|\[::\])$")
LOOPBACK = ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]")


def _outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture
def outward_listener() -> Iterator[str | None]:
    """A TCP server on a non-loopback address of this machine: where a worker 'goes out' to."""
    address = _outward_address()
    if address is None:
        yield None
        return
    server = socket.create_server((address, 0))
    server.settimeout(60)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                conn.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"{address}:{server.getsockname()[1]}"
    finally:
        server.close()


def _listeners(text: str) -> list[tuple[str, int, str]]:
    """(local address, port, process column) of each `ss -ltnpH` line."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        host, _, port = fields[3].rpartition(":")
        rows.append((host, int(port), " ".join(fields[5:])))
    return rows


@pytest.mark.tf
def test_a_real_two_worker_launch_listens_on_loopback_only_and_still_reaches_out(tmp_path: Path, outward_listener: str | None) -> None:
    env = {**os.environ, "EXPOSURE_OUT": str(tmp_path)}
    if outward_listener:
        env["EXPOSURE_TARGET"] = outward_listener
    logs = tmp_path / "logs"
    result = run_tpuctl("launch", str(SCRIPTS / "exposure_probe.py"), "--workers", "2", "--log-dir", str(logs), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("sum over workers: 2") == 2  # worker-to-worker gRPC over TF_CONFIG's 127.0.0.1
    if outward_listener:
        assert "[worker:0] outbound ok" in result.stdout
    plan = json.loads((logs / "attempt-1" / "plan.json").read_text())
    ports = {int(w["address"].rsplit(":", 1)[1]) for w in plan["workers"]}
    pids = {(tmp_path / f"{i}.pid").read_text().strip() for i in range(2)}
    rows = _listeners((tmp_path / "listeners.txt").read_text())
    for port in ports:
        hosts = [host for host, p, _ in rows if p == port]
        assert hosts and all(host in LOOPBACK for host in hosts), (port, hosts)
    for host, port, process in rows:
        if any(f"pid={pid}," in process for pid in pids):
            assert not WILDCARD.match(host), f"a worker listens on {host}:{port}"


def _bind_probe(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    out = tmp_path / "out"
    out.mkdir()
    result = run_tpuctl(
        "launch", str(SCRIPTS / "bind_like_tf.py"), "--workers", "2", "--strategy", "none", "--log-dir", str(tmp_path / "logs"), *extra,
        env={**os.environ, "EXPOSURE_OUT": str(out), **(env or {})}, timeout=120,
    )
    seen = [json.loads((out / f"{i}.json").read_text()) for i in range(2) if (out / f"{i}.json").exists()]
    return result, seen


def test_the_shim_turns_wildcard_binds_of_the_worker_port_into_loopback(tmp_path: Path, outward_listener: str | None) -> None:
    result, seen = _bind_probe(tmp_path, env={"EXPOSURE_TARGET": outward_listener} if outward_listener else None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning" not in result.stderr
    for worker in seen:
        assert worker["dual"] == "::ffff:127.0.0.1"  # gRPC's dual-stack [::]: IPv4 peers still connect
        assert worker["peer_via_127"] is True
        assert worker["v4"] == "127.0.0.1"
        assert worker["v6only"] == "::1"
        if outward_listener:
            assert worker["outbound_from"] == outward_listener.rsplit(":", 1)[0]  # port 0 binds are untouched
    assert len(seen) == 2


def test_expose_leaves_tensorflow_s_wildcard_binds_alone(tmp_path: Path) -> None:
    result, seen = _bind_probe(tmp_path, "--expose")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [(w["dual"], w["v4"], w["v6only"]) for w in seen] == [("::", "0.0.0.0", "::")] * 2


def test_expose_is_refused_for_other_backends() -> None:
    result = run_tpuctl("launch", str(SCRIPTS / "bind_like_tf.py"), "--hosts", "a,b", "--expose", "--dry-run")
    assert result.returncode == 2
    assert "--expose is for --backend local" in result.stderr


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a second interpreter")
def test_another_interpreter_gets_the_shim_too(tmp_path: Path) -> None:
    other = os.path.realpath("/usr/bin/python3")
    if other == os.path.realpath(sys.executable):
        pytest.skip("/usr/bin/python3 is this interpreter")
    result, seen = _bind_probe(tmp_path, "--python", "/usr/bin/python3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [w["v4"] for w in seen] == ["127.0.0.1"] * 2
    assert all(w["python"] != sys.executable for w in seen)


def test_without_a_compiler_the_launch_warns_in_one_line_and_runs_exposed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # a fresh cache: nothing compiled yet
    result, seen = _bind_probe(tmp_path, env={"XDG_CACHE_HOME": str(cache), "CC": "/nonexistent/cc"})
    assert result.returncode == 0, result.stdout + result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "no C compiler" in warnings[0] and "all interfaces" in warnings[0] and "--expose" in warnings[0]
    assert [w["v4"] for w in seen] == ["0.0.0.0"] * 2


def test_the_shim_is_compiled_once_privately_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = bindshim.library(tmp_path)
    assert stat.S_IMODE(built.parent.stat().st_mode) == 0o700
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no temporary file left behind
    assert built.name.endswith(f"-{os.uname().machine}.so")

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert bindshim.library(tmp_path) == built


def test_a_cache_folder_others_can_write_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "bindshim").mkdir()
    os.chmod(tmp_path / "bindshim", 0o777)
    with pytest.raises(bindshim.Unavailable, match="not a private folder"):
        bindshim.library(tmp_path)


def test_ld_preload_is_appended_to_not_replaced(tmp_path: Path) -> None:
    env = {"LD_PRELOAD": "/opt/mine.so"}
    bindshim.worker_env(env, tmp_path / "shim.so", 4242)
    assert env["LD_PRELOAD"] == f"/opt/mine.so:{tmp_path / 'shim.so'}"
    assert env["TPUCTL_LOOPBACK_PORTS"] == "4242"

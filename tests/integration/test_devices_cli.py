"""`tpuctl devices` and `connect` through the real CLI: real TensorFlow (CPU), the TPU stand-in, TPU targets that fail."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.devices import FIELDS, SOURCES

ZONE = "us-central2-b"
LITE_ZONE = "us-west4-a"
INT_FIELDS = {"host", "core", "chips", "cores", "hosts", "memory_mib"}


def plain_env(**extra: str) -> dict[str, str]:
    """This environment without any Colab marker, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_RELEASE_TAG", "COLAB_TPU_ADDR", "TPU_NAME")}
    return {**env, **extra}


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """Notes (`tpuctl: ...`) may come first; then exactly one `Error:` line, and never a traceback."""
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    assert [line for line in lines if not line.startswith("tpuctl: ")] == lines[-1:] and lines[-1].startswith("Error: "), result.stderr
    return lines[-1]


def check_schema(rows: object) -> None:
    assert isinstance(rows, list) and rows
    for row in rows:
        assert isinstance(row, dict)
        assert {"name", "device_type", "source"} <= set(row) <= set(FIELDS), row
        assert row["source"] in SOURCES
        assert all(isinstance(row[key], str) for key in row if key not in INT_FIELDS)
        assert all(isinstance(row[key], int) for key in row if key in INT_FIELDS)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.tf
def test_devices_json_lists_the_cpu_from_os_and_tensorflow(tmp_path: Path) -> None:
    result = run_tpuctl("devices", "--json", env=plain_env(), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # TensorFlow's start-up chatter stays in the worker
    rows = json.loads(result.stdout)
    check_schema(rows)
    assert ("CPU", "CPU", "os") in [(r["name"], r["device_type"], r["source"]) for r in rows]
    assert ("/device:CPU:0", "CPU", "tensorflow") in [(r["name"], r["device_type"], r["source"]) for r in rows]
    cpu = next(r for r in rows if r["source"] == "os")
    assert cpu["cores"] == os.cpu_count()
    table = run_tpuctl("devices", env=plain_env(), cwd=tmp_path, timeout=120)
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and lines[0].split()[:3] == ["NAME", "TYPE", "SOURCE"]
    assert [line.split()[:3] for line in lines[1:]] == [["CPU", "CPU", "os"], ["/device:CPU:0", "CPU", "tensorflow"]]
    assert re.fullmatch(r"tpuctl: TensorFlow 2\.\d+\.\d+ in .*python.*\n", table.stderr)


def test_devices_tpu_local_without_a_tpu_fails_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_tpuctl("devices", "--tpu", "local", env=plain_env(), cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert one_error_line(result).startswith("Error: no TPU on this machine")
    assert elapsed < 3.0


def test_devices_grpc_closed_port_fails_within_the_deadline(tmp_path: Path) -> None:
    port = closed_port()
    started = time.monotonic()
    result = run_tpuctl("devices", "--tpu", f"grpc://127.0.0.1:{port}", "--tpu-timeout", "5", env=plain_env(), cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"Error: TPU at grpc://127.0.0.1:{port} is not reachable")
    # the hint names the port given (issue 30: it named 8470 whatever was typed), and where TPUs serve
    assert f"is port {port} open to this machine?; TPU nodes serve gRPC on port 8470" in one_error_line(result)
    assert elapsed < 5 + 20  # the deadline, and TensorFlow's import beside it on a loaded machine (7.4 s seen for 4 + 3)


@pytest.mark.tf
def test_devices_grpc_that_never_answers_fails_within_the_deadline(tmp_path: Path, silent_port: int) -> None:
    started = time.monotonic()
    result = run_tpuctl("devices", "--tpu", f"grpc://127.0.0.1:{silent_port}", "--tpu-timeout", "4", env=plain_env(), cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"Error: no TPU answered at 'grpc://127.0.0.1:{silent_port}' within 4s")
    assert elapsed < 4 + 20  # the deadline, and TensorFlow's import beside it on a loaded machine (7.4 s seen for 4 + 3)


def test_colab_with_colab_tpu_addr_uses_grpc(tmp_path: Path) -> None:
    port = closed_port()
    env = plain_env(COLAB_RELEASE_TAG="release-colab_20250101-060000_RC00", COLAB_TPU_ADDR=f"127.0.0.1:{port}")
    snippet = run_tpuctl("connect", "--colab", env=env, cwd=tmp_path, timeout=60)
    assert snippet.returncode == 0
    assert snippet.stdout.splitlines()[0] == f"# Colab runtime with COLAB_TPU_ADDR=127.0.0.1:{port} (a legacy TPU Node): using grpc://127.0.0.1:{port}"
    assert f'TPUClusterResolver(tpu="grpc://127.0.0.1:{port}")' in snippet.stdout

    result = run_tpuctl("devices", "--tpu-timeout", "2", env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == f"tpuctl: Colab runtime with COLAB_TPU_ADDR=127.0.0.1:{port} (a legacy TPU Node): using grpc://127.0.0.1:{port}"
    assert one_error_line(result).startswith(f"Error: TPU at grpc://127.0.0.1:{port} is not reachable")


def test_colab_without_colab_tpu_addr_uses_this_machine(tmp_path: Path) -> None:
    env = plain_env(COLAB_RELEASE_TAG="release-colab_20250101-060000_RC00")
    result = run_tpuctl("devices", "--fast", "--json", env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "tpuctl: Colab runtime without a TPU (no COLAB_TPU_ADDR, no /dev/accel* or /dev/vfio/N)\n"
    check_schema(json.loads(result.stdout))
    snippet = run_tpuctl("connect", "--colab", env=env, cwd=tmp_path, timeout=60)
    assert snippet.stdout.startswith("# Colab runtime without a TPU") and 'TPUClusterResolver(tpu="local")' in snippet.stdout

    outside = run_tpuctl("connect", "--colab", env=plain_env(), cwd=tmp_path, timeout=60)
    assert outside.returncode == 2 and one_error_line(outside).startswith("Error: not a Colab runtime")


def test_devices_of_a_cloud_tpu(google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    g.add_ready_nodes(ZONE, 1, prefix="pod", accelerator_type="v4-32")
    g.add_ready_nodes(LITE_ZONE, 1, prefix="lite", accelerator_type="v5litepod-16")
    env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": ZONE}

    result = run_tpuctl("devices", "--tpu", "pod-0000", "--json", env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    check_schema(rows)
    node = g.node(ZONE, "pod-0000")
    assert node is not None
    assert {k: rows[0][k] for k in ("name", "device_type", "source", "accelerator_type", "chips", "cores", "hosts", "state", "health")} == {
        "name": "pod-0000",
        "device_type": "TPU",
        "source": "api",
        "accelerator_type": "v4-32",
        "chips": 16,
        "cores": 32,
        "hosts": 4,
        "state": "READY",
        "health": "HEALTHY",
    }
    assert rows[0]["topology"] == node["acceleratorConfig"]["topology"]
    assert [(r["name"], r["device_type"], r["ip"]) for r in rows[1:]] == [
        (f"worker {i}", "TPU_HOST", e["ipAddress"]) for i, e in enumerate(node["networkEndpoints"])
    ]

    table = run_tpuctl("devices", "--tpu", "lite-0000", "--zone", LITE_ZONE, env=env, cwd=tmp_path, timeout=60)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "SOURCE", "ACCELERATOR", "TOPOLOGY", "HOST", "CHIPS", "CORES", "HOSTS", "IP", "STATE", "HEALTH"]
    assert lines[1].split() == ["lite-0000", "TPU", "api", "v5litepod-16", "4x4", "-", "16", "16", "4", "-", "READY", "HEALTHY"]
    assert len(lines) == 1 + 1 + 4 and lines[2].split()[:7] == ["worker", "0", "TPU_HOST", "api", "-", "-", "0"]

    missing = run_tpuctl("devices", "--tpu", "nope", env=env, cwd=tmp_path, timeout=60)
    assert missing.returncode == 1
    assert one_error_line(missing).startswith(f"Error: no TPU VM nope in project {g.project}, zone {ZONE}")


def test_another_python_without_tensorflow(tmp_path: Path) -> None:
    """--python runs this tpuctl's worker under another interpreter; one without TensorFlow says so in one line."""
    other = "/usr/bin/python3"
    if not os.access(other, os.X_OK) or subprocess.run([other, "-c", "import tensorflow"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without TensorFlow")
    result = run_tpuctl("devices", "--python", other, env=plain_env(), cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"Error: TensorFlow cannot be imported by {other}: No module named 'tensorflow'")

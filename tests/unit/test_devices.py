"""Devices without TensorFlow: API rows, the /dev and nvidia-smi probes, Colab, snippets, the CLI's rendering.

What a type name means (chips, cores, hosts) is tests/unit/test_accelerators.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl import devices as dev
from tpuctl.cli import main
from tpuctl.cloud.nodes.node import Node
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError

# -- API rows -----------------------------------------------------------------


def _node(accelerator_type: str | None, hosts: int, **extra: Any) -> Node:
    node: dict[str, Any] = {
        "name": "projects/p/locations/us-central2-b/nodes/pod",
        "state": "READY",
        "health": "HEALTHY",
        "acceleratorConfig": {"type": "V4", "topology": "2x2x4"},
        "networkEndpoints": [
            {"ipAddress": f"10.0.0.{i + 2}", "port": 8470, **({"accessConfig": {"externalIp": f"34.1.1.{i}"}} if i == 0 else {})} for i in range(hosts)
        ],
        **extra,
    }
    if accelerator_type:
        node["acceleratorType"] = accelerator_type
    return Node(node, "us-central2-b")


def test_api_rows_summary_then_one_row_per_host() -> None:
    rows, warning = dev.api_rows(_node("v4-32", 4))
    assert warning is None
    assert rows[0] == {
        "name": "pod",
        "device_type": "TPU",
        "source": "api",
        "accelerator_type": "v4-32",
        "topology": "2x2x4",
        "chips": 16,
        "cores": 32,
        "hosts": 4,
        "state": "READY",
        "health": "HEALTHY",
    }
    assert [r["name"] for r in rows[1:]] == ["worker 0", "worker 1", "worker 2", "worker 3"]
    assert rows[1] == {
        "name": "worker 0",
        "device_type": "TPU_HOST",
        "source": "api",
        "host": 0,
        "chips": 4,
        "cores": 8,
        "ip": "10.0.0.2",
        "external_ip": "34.1.1.0",
        "state": "READY",
        "health": "HEALTHY",
    }
    assert "external_ip" not in rows[2]


def test_api_rows_from_accelerator_config_alone() -> None:
    rows, _ = dev.api_rows(_node(None, 4))
    assert rows[0]["accelerator_type"] == "v4-32" and rows[0]["chips"] == 16


def test_api_rows_of_an_unknown_generation_still_list_the_hosts() -> None:
    rows, warning = dev.api_rows(_node("tpu7x-8", 1, acceleratorConfig={"type": "TPU7X", "topology": "2x2x1"}))
    assert warning is not None and "tpu7x" in warning
    assert "chips" not in rows[0] and rows[0]["hosts"] == 1 and rows[1]["ip"] == "10.0.0.2"


def test_api_rows_of_a_node_still_creating() -> None:
    rows, _ = dev.api_rows(Node({"name": "n", "acceleratorType": "v5litepod-16", "state": "CREATING"}, "us-central2-b"))
    assert rows == [dev.row("n", "TPU", "api", accelerator_type="v5litepod-16", chips=16, cores=16, hosts=4, state="CREATING")]


# -- /dev ---------------------------------------------------------------------


def test_dev_probe_finds_accel_and_vfio_chips_in_natural_order(tmp_path: Path) -> None:
    for name in ("accel10", "accel2", "accel0", "null"):
        (tmp_path / name).touch()
    (tmp_path / "vfio").mkdir()
    for name in ("1", "0", "vfio"):
        (tmp_path / "vfio" / name).touch()
    paths = dev.tpu_chip_paths(tmp_path)
    assert [Path(p).relative_to(tmp_path).as_posix() for p in paths] == ["accel0", "accel2", "accel10", "vfio/0", "vfio/1"]
    assert dev.dev_rows(tmp_path)[0] == {"name": str(tmp_path / "accel0"), "device_type": "TPU", "source": "dev", "chips": 1}
    assert dev.tpu_present(tmp_path)
    assert not dev.tpu_present(tmp_path / "vfio" / "nothing")


def test_cpu_row() -> None:
    cpu = dev.cpu_row()
    assert cpu["name"] == "CPU" and cpu["source"] == "os" and cpu["cores"] == os.cpu_count()


# -- nvidia-smi ---------------------------------------------------------------

H100_CSV = "0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H100 80GB HBM3, 81559\n"


def test_nvidia_smi_csv() -> None:
    rows = dev.parse_nvidia_smi(H100_CSV + "\n2, NVIDIA A100-SXM4-40GB, [N/A]\n3, Some, Odd, Name, 1024 MiB\n")
    assert rows[0] == {"name": "GPU 0", "device_type": "GPU", "source": "nvidia-smi", "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
    assert "memory_mib" not in rows[2]
    assert rows[3]["model"] == "Some, Odd, Name" and rows[3]["memory_mib"] == 1024


@pytest.mark.parametrize(
    "bad",
    ["No devices were found", "0, NVIDIA H100", "x, NVIDIA H100, 1", "0, , 1", "0, GPU, lots", "0, \x1b[31mGPU, 1", "0, GPU\x00, 1"],
)
def test_nvidia_smi_nonsense_is_one_line_error(bad: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        dev.parse_nvidia_smi(bad)
    assert caught.value.exit_code == FAILED and "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_nvidia_smi_hostile_text_is_rows_or_one_line_error(text: str) -> None:
    try:
        rows = dev.parse_nvidia_smi(text)
    except TpuctlError as err:
        assert "\n" not in str(err) and "\r" not in str(err) and len(str(err)) < 300
        return
    for found in rows:
        assert found["device_type"] == "GPU" and found["model"].isprintable()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 63),
            st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=","), min_size=1, max_size=30),
            st.integers(0, 10**6),
        ),
        max_size=8,
    )
)
def test_nvidia_smi_round_trip(gpus: list[tuple[int, str, int]]) -> None:
    text = "".join(f"{i}, {name}, {memory}\n" for i, name, memory in gpus)
    rows = dev.parse_nvidia_smi(text)
    assert [(r["name"], r["model"], r["memory_mib"]) for r in rows] == [(f"GPU {i}", name, memory) for i, name, memory in gpus]


def _fake_smi(tmp_path: Path, body: str) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_nvidia_smi_rows_runs_the_tool(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, f"printf '{H100_CSV.replace(chr(10), chr(92) + 'n')}'")
    assert [r["name"] for r in dev.nvidia_smi_rows(smi)] == ["GPU 0", "GPU 1"]


def test_nvidia_smi_failure_is_one_line(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9")
    with pytest.raises(TpuctlError, match=r"nvidia-smi failed \(exit 9\): NVIDIA-SMI has failed"):
        dev.nvidia_smi_rows(smi)


def test_no_nvidia_smi_no_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert dev.nvidia_smi_rows() == []


# -- TensorFlow's names -------------------------------------------------------


def test_tf_rows_carry_host_and_core() -> None:
    assert dev.tf_row("/job:worker/replica:0/task:3/device:TPU:5", "TPU") == {
        "name": "/job:worker/replica:0/task:3/device:TPU:5",
        "device_type": "TPU",
        "source": "tensorflow",
        "host": 3,
        "core": 5,
    }
    assert dev.tf_row("/device:CPU:0", "CPU") == {"name": "/device:CPU:0", "device_type": "CPU", "source": "tensorflow"}
    assert dev.tf_row("/job:worker/replica:0/task:1/device:TPU_SYSTEM:0", "TPU_SYSTEM")["host"] == 1
    gpu = dev.tf_row("/device:GPU:1", "GPU", model="NVIDIA H100 80GB HBM3", memory_mib=79000)
    assert gpu["model"] == "NVIDIA H100 80GB HBM3" and gpu["memory_mib"] == 79000 and "core" not in gpu


def test_rows_refuse_unknown_fields() -> None:
    with pytest.raises(ValueError):
        dev.row("x", "CPU", "os", colour="red")


# -- targets, Colab, snippets -------------------------------------------------


@pytest.mark.parametrize(
    ("given_address", "target"),
    [("10.0.0.2:8470", "grpc://10.0.0.2:8470"), ("grpc://10.0.0.2", "grpc://10.0.0.2:8470"), ("tpu-host:1234", "grpc://tpu-host:1234"), ("[::1]:8470", "grpc://[::1]:8470")],
)
def test_grpc_targets(given_address: str, target: str) -> None:
    assert dev.grpc_target(given_address) == target


@pytest.mark.parametrize("bad", ["", "grpc://", "grpc://:8470", "host:0", "host:99999", "host:80/x", "a b:1", "host:8470\nimport os"])
def test_bad_grpc_targets(bad: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        dev.grpc_target(bad)
    assert caught.value.exit_code == USAGE and "\n" not in str(caught.value)


def test_target_kinds() -> None:
    assert [dev.target_kind(t) for t in ("local", "grpc://h:1", "my-tpu")] == ["local", "grpc", "name"]


def test_colab_detection(tmp_path: Path) -> None:
    assert dev.colab_runtime({"COLAB_RELEASE_TAG": "release-colab_20250101-060000_RC00"})
    assert not dev.colab_runtime({}, look_for_module=False)

    with_addr = dev.local_tpu({"COLAB_RELEASE_TAG": "r", "COLAB_TPU_ADDR": "10.0.0.2:8470"}, tmp_path)
    assert with_addr == dev.Found("grpc://10.0.0.2:8470", with_addr.description, True)
    assert "COLAB_TPU_ADDR=10.0.0.2:8470" in with_addr.description

    without = dev.local_tpu({"COLAB_RELEASE_TAG": "r"}, tmp_path)
    assert without.target is None and without.colab and "without a TPU" in without.description
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "0").touch()
    tpu_vm = dev.local_tpu({"COLAB_RELEASE_TAG": "r"}, tmp_path)
    assert tpu_vm.target == "local" and tpu_vm.colab and "Colab runtime is a TPU VM with 1 chip" in tpu_vm.description

    # COLAB_TPU_ADDR outside Colab is not Colab's.
    elsewhere = dev.local_tpu({"COLAB_TPU_ADDR": "10.0.0.2:8470"}, tmp_path, look_for_module=False)
    assert elsewhere.target == "local" and not elsewhere.colab


def test_bad_colab_tpu_addr_is_one_line() -> None:
    with pytest.raises(TpuctlError, match="COLAB_TPU_ADDR="):
        dev.local_tpu({"COLAB_RELEASE_TAG": "r", "COLAB_TPU_ADDR": "not an address"})


@pytest.mark.parametrize("target", ["local", "grpc://10.0.0.2:8470", "my-tpu"])
def test_snippet_is_python_with_the_four_calls(target: str) -> None:
    text = dev.snippet(target, "found this\nand that\n'); import os; os.system('x")
    compile(text, "<snippet>", "exec")
    lines = text.splitlines()
    assert lines[:3] == ["# found this", "# and that", "# '); import os; os.system('x"]
    assert f"resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu={json.dumps(target)})" in lines
    for call in (
        "tf.config.experimental_connect_to_cluster(resolver)",
        "tf.tpu.experimental.initialize_tpu_system(resolver)",
        "strategy = tf.distribute.TPUStrategy(resolver)",
    ):
        assert call in lines


# -- the CLI, with TensorFlow's answer stood in -------------------------------


@dataclass
class Result:
    code: int
    out: str
    err: str


class Run(Protocol):
    def __call__(self, *args: str) -> Result: ...


@pytest.fixture
def tpuctl(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Run:
    """`tpuctl ARGS` in-process for what needs no TensorFlow: nvidia-smi absent (PATH), no Colab variables."""
    monkeypatch.setenv("PATH", str(tmp_path))
    for name in ("COLAB_RELEASE_TAG", "COLAB_TPU_ADDR"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> Result:
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        captured = capsys.readouterr()
        assert isinstance(exited.value.code, int)
        return Result(exited.value.code, captured.out, captured.err)

    return run


def test_devices_fast_never_asks_tensorflow(tpuctl: Run) -> None:
    result = tpuctl("devices", "--fast", "--json")
    assert [r["source"] for r in json.loads(result.out)] == ["os"]
    assert "TensorFlow" not in result.err


def test_devices_nvidia_smi_failure_is_a_warning(tpuctl: Run, tmp_path: Path) -> None:
    _fake_smi(tmp_path, "echo 'No devices were found'; exit 6")
    result = tpuctl("devices", "--fast")
    assert result.code == 0
    assert result.err == "tpuctl: warning: nvidia-smi failed (exit 6): No devices were found; no GPU rows from nvidia-smi\n"


def test_devices_with_nvidia_smi(tpuctl: Run, tmp_path: Path) -> None:
    _fake_smi(tmp_path, f"printf '{H100_CSV.replace(chr(10), chr(92) + 'n')}'")
    rows = json.loads(tpuctl("devices", "--fast", "--json").out)
    assert [(r["name"], r["source"]) for r in rows] == [("GPU 0", "nvidia-smi"), ("GPU 1", "nvidia-smi"), ("CPU", "os")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fast", "--tpu", "local"), "--fast looks at this machine only"),
        (("--fast", "--python", "python3"), "--python ask TensorFlow, which --fast does not"),
        (("--tpu", "my-tpu", "--tpu-timeout", "5"), "--tpu-timeout ask TensorFlow; --tpu my-tpu asks the Cloud TPU API"),
        (("--zone", "us-central2-b"), "--zone: only for --tpu NAME"),
        (("--tpu", "grpc://h:x"), "is not a TPU address"),
        (("--tpu", "My_TPU"), "is not a valid TPU node name"),
        (("--python", "/no/such/python"), "--python /no/such/python: no such interpreter"),
        (("--tpu-timeout", "0"), "Invalid value for '--tpu-timeout'"),
    ],
)
def test_devices_bad_input_is_one_line_exit_2(tpuctl: Run, args: tuple[str, ...], message: str) -> None:
    result = tpuctl("devices", *args)
    assert result.code == USAGE, result
    assert result.err.count("\n") == 1 and result.err.startswith("Error: ") and message in result.err, result.err


def test_connect_prints_a_snippet(tpuctl: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    result = tpuctl("connect", "--tpu", "10.0.0.2:8470")
    assert result.code == USAGE and "(a TPU address is written grpc://10.0.0.2:8470)" in result.err
    assert 'TPUClusterResolver(tpu="my-tpu")' in tpuctl("connect", "--tpu", "my-tpu").out
    grpc = tpuctl("connect", "--tpu", "grpc://10.0.0.2").out
    assert grpc.startswith("# TPU at grpc://10.0.0.2:8470") and 'TPUClusterResolver(tpu="grpc://10.0.0.2:8470")' in grpc
    compile(grpc, "<snippet>", "exec")


def test_connect_colab(tpuctl: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tpuctl("connect", "--colab")
    assert outside.code == USAGE and outside.err.startswith("Error: not a Colab runtime")
    monkeypatch.setenv("COLAB_RELEASE_TAG", "r")  # this machine has no TPU chips
    without = tpuctl("connect", "--colab")
    assert without.code == 0 and without.out.startswith("# Colab runtime without a TPU") and 'tpu="local"' in without.out
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.9.8.7:8470")
    with_addr = tpuctl("connect", "--colab")
    assert with_addr.out.splitlines()[0] == "# Colab runtime with COLAB_TPU_ADDR=10.9.8.7:8470 (a legacy TPU Node): using grpc://10.9.8.7:8470"
    assert 'TPUClusterResolver(tpu="grpc://10.9.8.7:8470")' in with_addr.out
    assert tpuctl("connect", "--colab", "--tpu", "local").code == USAGE


def test_the_cli_never_imports_tensorflow() -> None:
    code = (
        "import sys\n"
        "from tpuctl.cli import main\n"
        "try:\n    main(['devices', '--fast', '--json'])\nexcept SystemExit:\n    pass\n"
        "try:\n    main(['connect'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == "[]", done.stderr

"""Devices without TensorFlow: rows, the fast probe, TPU VMs from the API, Colab, connect snippets.

`tpuctl devices` answers "what will my script see?". Its rows come from four
places, and every row says which (`source`):

- `dev`: TPU chips a TPU VM exposes as /dev/accel* (v2-v4) or /dev/vfio/N (v5e and later);
- `nvidia-smi`: GPUs, when the NVIDIA driver's tool is on PATH;
- `os`: this machine's CPUs;
- `tensorflow`: the logical devices TensorFlow itself reports, gathered by
  `tpuctl.runtime.devices` in a worker subprocess (the CLI never imports TF);
- `api`: a TPU VM in the cloud, as the Cloud TPU v2 API describes it (its chips, cores
  and hosts read through the accelerator table, tpuctl.tpu.accelerators).

Everything here is plain data and the standard library, so the CLI and the
worker can share it and unit tests need neither TensorFlow nor a TPU.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.safety import child_output
from tpuctl.tpu.accelerators import Shape, shape_from_config, shape_of

if TYPE_CHECKING:
    from tpuctl.cloud.nodes.node import Node  # a type only: the worker runtime imports this module

if TYPE_CHECKING:  # subscripting dict at runtime needs Python 3.9; `tpuctl devices --tpu` runs this on a host's 3.8
    Row = dict[str, Any]

# Every key a row may carry, in the order tables and JSON show them.
FIELDS: tuple[str, ...] = (
    "name",
    "device_type",
    "source",
    "accelerator_type",
    "topology",
    "host",
    "core",
    "chips",
    "cores",
    "hosts",
    "model",
    "memory_mib",
    "ip",
    "external_ip",
    "state",
    "health",
)
SOURCES: tuple[str, ...] = ("tensorflow", "dev", "nvidia-smi", "os", "api")

NVIDIA_SMI_QUERY = "index,name,memory.total"
NVIDIA_SMI_TIMEOUT_S = 15.0
NVIDIA_SMI_LIMIT = 1 << 20  # bytes: a GPU's line is ~50 of them; a megabyte is no nvidia-smi's answer
DEFAULT_GRPC_PORT = 8470


def row(name: str, device_type: str, source: str, **known: Any) -> Row:
    """A device row: the three keys every row has, then the known ones (None is left out), in FIELDS order."""
    unknown = set(known) - set(FIELDS)
    if unknown:
        raise ValueError(f"not a device row field: {sorted(unknown)}")
    found = {"name": name, "device_type": device_type, "source": source, **{k: v for k, v in known.items() if v is not None}}
    return {key: found[key] for key in FIELDS if key in found}


def one_line(text: str, limit: int = 120) -> str:
    """Untrusted text fit for a one-line message: control characters escaped, long text cut."""
    shown = repr(text)[1:-1]
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# --- TPU VMs as the API describes them ----------------------------------------------------------


def node_shape(node: Node) -> Shape:
    """A node's shape from acceleratorType, or from acceleratorConfig when only that is set."""
    if node.accelerator_type:
        return shape_of(node.accelerator_type)
    return shape_from_config(node.config_type, node.topology)


def api_rows(node: Node) -> tuple[list[Row], str | None]:
    """One summary row for a TPU VM, then one row per host; plus a warning when its type is unknown to tpuctl.

    An accelerator type tpuctl cannot read (a newer generation) still lists the
    node and its hosts, without chip and core counts, and says so.
    """
    endpoints = node.endpoints
    state, health = node.state or None, node.health or None
    warning = None
    shape: Shape | None
    try:
        shape = node_shape(node)
    except TpuctlError as err:
        shape = None
        warning = f"{err.message}; {node.name} is listed without chip and core counts"
    summary = row(
        node.name,
        "TPU",
        "api",
        accelerator_type=node.accelerator_type or (shape.accelerator_type if shape else None),
        topology=node.topology or None,
        chips=shape.chips if shape else None,
        cores=shape.cores if shape else None,
        hosts=shape.hosts if shape else (len(endpoints) or None),
        state=state,
        health=health,
    )
    even = shape is not None and len(endpoints) == shape.hosts and shape.chips % shape.hosts == 0
    per_host_chips = shape.chips // shape.hosts if shape and even else None
    per_host_cores = shape.cores // shape.hosts if shape and even else None
    rows = [summary]
    for index, endpoint in enumerate(endpoints):
        rows.append(
            row(
                f"worker {index}",
                "TPU_HOST",
                "api",
                host=index,
                chips=per_host_chips,
                cores=per_host_cores,
                ip=endpoint.internal_ip or None,
                external_ip=endpoint.external_ip,
                state=state,
                health=health,
            )
        )
    return rows, warning


# --- the fast probe: /dev, nvidia-smi, the OS ----------------------------------------------------


def _natural(path: str) -> tuple[str, int]:
    match = re.search(r"([0-9]+)\Z", path)
    return (path[: match.start()] if match else path, int(match[1]) if match else -1)


def tpu_chip_paths(dev: str | Path = "/dev") -> list[str]:
    """The device files of a TPU VM's chips: /dev/accel0.. (v2-v4) or /dev/vfio/0.. (v5e and later)."""
    found = glob.glob(os.path.join(glob.escape(str(dev)), "accel*")) + glob.glob(os.path.join(glob.escape(str(dev)), "vfio", "[0-9]*"))
    return sorted(found, key=_natural)


def tpu_present(dev: str | Path = "/dev") -> bool:
    return bool(tpu_chip_paths(dev))


def dev_rows(dev: str | Path = "/dev") -> list[Row]:
    return [row(path, "TPU", "dev", chips=1) for path in tpu_chip_paths(dev)]


def parse_nvidia_smi(text: str) -> list[Row]:
    """Rows from `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`.

    Anything that is not that CSV is a one-line error (exit 1) naming the line.
    """
    rows = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        bad = TpuctlError(f"nvidia-smi printed {one_line(line, 80)!r}, not 'index, name, memory.total'", exit_code=FAILED)
        if len(fields) < 3:
            raise bad
        index, name, memory = fields[0], ", ".join(fields[1:-1]), fields[-1]
        if not re.fullmatch(r"[0-9]{1,4}", index) or not name or not name.isprintable():
            raise bad
        memory = memory.removesuffix("MiB").strip()
        if re.fullmatch(r"[0-9]{1,9}", memory):
            memory_mib: int | None = int(memory)
        elif memory in ("[N/A]", "N/A", "[Not Supported]"):
            memory_mib = None
        else:
            raise bad
        rows.append(row(f"GPU {int(index)}", "GPU", "nvidia-smi", model=name, memory_mib=memory_mib))
    return rows


def nvidia_smi_rows(executable: str | None = None) -> list[Row]:
    """GPUs as the NVIDIA driver reports them; none when nvidia-smi is not on PATH.

    nvidia-smi that is there but fails (no driver loaded, a hung GPU) is a
    one-line error (exit 1): it usually means a GPU the script will not see.
    """
    path = executable or shutil.which("nvidia-smi")
    if path is None:
        return []
    argv = [path, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"]
    try:
        done = child_output.run(argv, timeout=NVIDIA_SMI_TIMEOUT_S, limit=NVIDIA_SMI_LIMIT, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise TpuctlError(f"nvidia-smi gave no answer within {NVIDIA_SMI_TIMEOUT_S:.0f}s", exit_code=FAILED) from None
    except OSError as err:
        raise TpuctlError(f"cannot run {path}: {err.strerror or err}", exit_code=FAILED) from None
    if done.returncode is None:
        raise TpuctlError(f"nvidia-smi printed more than {NVIDIA_SMI_LIMIT} bytes: not its output (stopped)", exit_code=FAILED)
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        said = [line.strip() for line in (out + "\n" + done.stderr.decode("utf-8", "replace")).splitlines() if line.strip()]
        last = one_line(said[-1], 160) if said else "no message"
        raise TpuctlError(f"nvidia-smi failed (exit {done.returncode}): {last}", exit_code=FAILED)
    return parse_nvidia_smi(out)


def _proc_value(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                name, sep, value = line.partition(":")
                if sep and name.strip() == key:
                    return value.strip()
    except OSError:
        return None
    return None


def cpu_row() -> Row:
    """This machine's CPUs: os.cpu_count(), and on Linux the model and total memory."""
    model = _proc_value("/proc/cpuinfo", "model name")
    memory = _proc_value("/proc/meminfo", "MemTotal")
    memory_mib = int(memory.split()[0]) // 1024 if memory and memory.split()[0].isdigit() else None
    return row("CPU", "CPU", "os", cores=os.cpu_count(), model=one_line(model) if model else None, memory_mib=memory_mib)


# --- TensorFlow's logical devices (the worker hands over names; this makes rows) -----------------

_TASK = re.compile(r"/task:([0-9]+)")
_DEVICE = re.compile(r"device:([A-Za-z_]+):([0-9]+)\Z")


def tf_row(name: str, device_type: str, model: str | None = None, memory_mib: int | None = None) -> Row:
    """A row for one of TensorFlow's logical devices: host = task index, core = TPU core index."""
    task = _TASK.search(name)
    device = _DEVICE.search(name)
    core = int(device[2]) if device and device_type == "TPU" else None
    return row(name, device_type, "tensorflow", host=int(task[1]) if task else None, core=core, model=model, memory_mib=memory_mib)


# --- targets, Colab and the connect snippet ------------------------------------------------------

_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")


def grpc_target(address: str) -> str:
    """`grpc://HOST:PORT` from HOST[:PORT] or grpc://HOST[:PORT] (port 8470 by default); bad input exits 2."""
    rest = address.strip().removeprefix("grpc://")
    host, sep, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if not sep:
        host, port = rest, str(DEFAULT_GRPC_PORT)
    if not _HOST.fullmatch(host) or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
        raise TpuctlError(f"{one_line(address, 80)!r} is not a TPU address", hint="grpc://HOST:PORT, e.g. grpc://10.0.0.2:8470")
    return f"grpc://{host}:{int(port)}"


def target_kind(target: str) -> str:
    """`local`, `grpc` (a grpc:// address, checked) or `name` (a TPU node, for the API)."""
    if target == "local":
        return "local"
    if target.startswith("grpc://"):
        grpc_target(target)
        return "grpc"
    if ":" in target or "/" in target:
        raise TpuctlError(
            f"{one_line(target, 80)!r} is neither `local`, a grpc:// address nor a TPU VM name",
            hint=f"a TPU address is written grpc://{one_line(target.split('://')[-1], 80)}",
        )
    return "name"


def colab_runtime(env: Mapping[str, str] | None = None, *, look_for_module: bool = True) -> bool:
    """A Colab runtime sets COLAB_RELEASE_TAG; its Python can also import google.colab."""
    environ = os.environ if env is None else env
    if environ.get("COLAB_RELEASE_TAG"):
        return True
    if not look_for_module:
        return False
    try:
        return importlib.util.find_spec("google.colab") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Found:
    """Where this machine's TPU is: `target` for TPUClusterResolver (None: no TPU), and how that was found."""

    target: str | None
    description: str
    colab: bool


def local_tpu(env: Mapping[str, str] | None = None, dev: str | Path = "/dev", *, look_for_module: bool = True) -> Found:
    """This machine's TPU: Colab's COLAB_TPU_ADDR (a legacy TPU Node), else its own chips, else none."""
    environ = os.environ if env is None else env
    colab = colab_runtime(environ, look_for_module=look_for_module)
    chips = tpu_chip_paths(dev)
    where = "Colab runtime" if colab else "this machine"
    if colab and environ.get("COLAB_TPU_ADDR", "").strip():
        address = environ["COLAB_TPU_ADDR"].strip()
        try:
            target = grpc_target(address)
        except TpuctlError:
            raise TpuctlError(f"COLAB_TPU_ADDR={one_line(address, 80)!r} is not a TPU address", hint="HOST:PORT, e.g. 10.0.0.2:8470") from None
        return Found(target, f"Colab runtime with COLAB_TPU_ADDR={address} (a legacy TPU Node): using {target}", True)
    if chips:
        listed = chips[0] if len(chips) == 1 else f"{chips[0]} .. {chips[-1]}"
        return Found("local", f'{where} is a TPU VM with {len(chips)} chip{"s" if len(chips) != 1 else ""} ({listed}): using tpu="local"', colab)
    if colab:
        return Found(None, "Colab runtime without a TPU (no COLAB_TPU_ADDR, no /dev/accel* or /dev/vfio/N)", True)
    return Found(None, "no TPU on this machine (no /dev/accel* or /dev/vfio/N)", False)


def snippet(target: str, found: str) -> str:
    """The Python a script or notebook runs to reach `target`, headed by a comment saying what was found."""
    comment = "\n".join(f"# {one_line(line, 200)}" for line in found.splitlines() or [""])
    return (
        f"{comment}\n"
        "import tensorflow as tf\n"
        "\n"
        f"resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu={json.dumps(target)})\n"
        "tf.config.experimental_connect_to_cluster(resolver)\n"
        "tf.tpu.experimental.initialize_tpu_system(resolver)\n"
        "strategy = tf.distribute.TPUStrategy(resolver)\n"
        'print("TPU replicas:", strategy.num_replicas_in_sync)\n'
    )

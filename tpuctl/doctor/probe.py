"""What a worker's machine and interpreter hold, gathered by that interpreter and printed as one JSON line.

Run, never imported: `tpuctl doctor` starts it with the workers' interpreter
(`python -c SOURCE ARGS`, or over ssh as `python - ARGS` with this file on
stdin), so every fact is the one a worker would meet, on the machine it would
run on. That is why it stands alone: the standard library only, no tpuctl
(hosts need not have it), syntax an old Python still reads (one that is too old
for TensorFlow is itself a finding), and nothing here judges: the checks
(tpuctl/doctor/checks.py) do, on this side, from the facts.

Each part is bounded: TensorFlow is imported in a child of its own with a
deadline (a segfault or a hang there is a finding, not a hang of doctor), the
metadata server is asked only on Google Compute Engine or where
GCE_METADATA_HOST points, with a short deadline, and both run while the rest is
read. Device discovery reads /sys, /dev and /proc under TPUCTL_SYSFS_ROOT when
set (a fake tree, for tests), else under /.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FORMAT = 1
SMI_TIMEOUT_S = 10.0
SMI_LIMIT = 1 << 20  # bytes a stream: a GPU's line is ~80 of them; a megabyte is no nvidia-smi's answer
SMI_LINES, SMI_LINE = 64, 300  # lines kept, and characters a line: more GPUs than any one machine holds
CHILD_KEPT = 1 << 20  # bytes kept of each of the import child's streams, its last: its answer is a line of ~200
CHILD_DRAIN_S = 2.0  # for its pipes to end once it has ended or was killed
GOOGLE_VENDOR = "0x1ae0"
NVIDIA_VENDOR = "0x10de"
# Distributions whose versions the checks read (names as importlib.metadata normalises them).
WANTED = re.compile(
    r"(tensorflow|tensorflow[-_](cpu|gpu|tpu|intel|macos|aarch64|rocm)|intel[-_]tensorflow|tf[-_]nightly([-_](cpu|tpu))?"
    r"|tf[-_]keras|keras|tensorboard|tb[-_]nightly|libtpu|libtpu[-_]nightly|jax|jaxlib|numpy|tensorflow[-_]estimator)\Z",
    re.IGNORECASE,
)
ENV = (
    "TF_USE_LEGACY_KERAS",
    "TPU_LIBRARY_PATH",
    "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
    "NEXT_PLUGGABLE_DEVICE_USE_C_API",
    "PJRT_DEVICE",
    "JAX_PLATFORMS",
    "TPU_NAME",
    "CUDA_VISIBLE_DEVICES",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
)
# The child that imports TensorFlow: each stage announced before it starts, so a crash or a hang names it.
CHILD = r"""
import json, sys, time
try:  # Linux: die with the probe (PR_SET_PDEATHSIG, SIGKILL), so a hung import never outlives it
    import ctypes
    ctypes.CDLL(None).prctl(1, 9)
except Exception:
    pass
def stage(name):
    print("stage " + name, flush=True)
started = time.monotonic()
stage("import")
tf = __import__("tensorflow")  # the child's own import, the one being checked (tpuctl itself never imports TensorFlow)
answer = {"version": getattr(tf, "__version__", None), "import_s": round(time.monotonic() - started, 3)}
stage("keras")
try:
    answer["keras"] = getattr(tf.keras, "__version__", None) or "?"
except Exception as err:
    answer["keras_error"] = (type(err).__name__ + ": " + str(err))[:400]
if sys.argv[1] == "devices":
    stage("devices")
    counts = {}
    for device in tf.config.list_physical_devices():
        counts[device.device_type] = counts.get(device.device_type, 0) + 1
    answer["devices"] = counts
print("answer " + json.dumps(answer), flush=True)
"""


def root_path(*parts: str) -> str:
    return os.path.join(os.environ.get("TPUCTL_SYSFS_ROOT") or "/", *parts)


def read_text(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def python_facts() -> dict[str, Any]:
    return {
        "version": list(sys.version_info[:3]),
        "executable": sys.executable,
        "implementation": sys.implementation.name,
        "prefix": sys.prefix,
    }


def distributions() -> list[dict[str, Any]]:
    """Every wanted distribution on sys.path, with where it is and what it requires (libtpu pins come from there)."""
    try:
        from importlib import metadata
    except ImportError:
        return []
    found = []
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"] or ""
        except Exception:  # noqa: BLE001 - a broken metadata file is skipped, not fatal
            continue
        if not WANTED.match(name):
            continue
        location = ""
        with contextlib.suppress(Exception):
            location = str(dist.locate_file(""))
        requires = [r for r in (dist.requires or []) if kept_requirement(name, r)]
        found.append({"name": name.lower().replace("_", "-"), "version": dist.version, "location": location, "requires": requires[:20]})
    return found


def kept_requirement(name: str, requirement: str) -> bool:
    """The requirements the checks read: TensorFlow's pins (libtpu, tensorboard, keras) outside any extra, and jax's own
    rule for its runtime: the jaxlib it accepts and the libtpu its `tpu` extra pins (`libtpu==0.0.42.*; extra == "tpu"`)."""
    if name.lower() == "jax":
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]*)['\"]", requirement)
        return bool(re.match(r"(jaxlib|libtpu|libtpu[-_]nightly)\b", requirement, re.I)) and (extra is None or extra.group(1) == "tpu")
    return "extra ==" not in requirement and bool(re.match(r"(libtpu|tensorboard|keras|tf[-_]keras|tensorflow)\b", requirement, re.I))


def tensorflow_package() -> str | None:
    """Where `import tensorflow` would come from, without importing it."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else spec.origin


def pci_devices() -> list[dict[str, Any]]:
    """Google (TPU) and NVIDIA functions on the PCI bus, with the driver bound to each."""
    base = root_path("sys", "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for name in names:
        folder = os.path.join(base, name)
        vendor = (read_text(os.path.join(folder, "vendor")) or "").lower()
        if vendor not in (GOOGLE_VENDOR, NVIDIA_VENDOR):
            continue
        driver = None
        with contextlib.suppress(OSError):
            driver = os.path.basename(os.readlink(os.path.join(folder, "driver")))
        found.append({"address": name, "vendor": vendor, "device": (read_text(os.path.join(folder, "device")) or "").lower(), "driver": driver})
    return found


def device_nodes() -> dict[str, list[str]]:
    """TPU chips as a TPU VM exposes them: /dev/accel* (v2-v4) or /dev/vfio/N (v5e and later)."""
    nodes: dict[str, list[str]] = {"accel": [], "vfio": []}
    with contextlib.suppress(OSError):
        nodes["accel"] = sorted("/dev/" + n for n in os.listdir(root_path("dev")) if re.match(r"accel[0-9]+\Z", n))
    with contextlib.suppress(OSError):
        nodes["vfio"] = sorted("/dev/vfio/" + n for n in os.listdir(root_path("dev", "vfio")) if n.isdigit())
    return nodes


def holders(nodes: dict[str, list[str]]) -> dict[str, Any]:
    """The processes that hold a TPU device open (a crashed run's leftovers keep the chips from the next)."""
    wanted = set(nodes["accel"]) | set(nodes["vfio"])
    held: list[dict[str, Any]] = []
    unreadable = 0
    if wanted:
        proc = root_path("proc")
        try:
            pids = [p for p in os.listdir(proc) if p.isdigit() and int(p) != os.getpid()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                fds = os.listdir(os.path.join(proc, pid, "fd"))
            except OSError:
                unreadable += 1
                continue
            targets = set()
            for fd in fds:
                with contextlib.suppress(OSError):
                    targets.add(os.readlink(os.path.join(proc, pid, "fd", fd)))
            mine = sorted(targets & wanted)
            if mine:
                command = (read_text(os.path.join(proc, pid, "cmdline")) or "").replace("\0", " ").strip()
                held.append({"pid": int(pid), "command": command[:200], "devices": mine})
    return {"held": held[:20], "unreadable": unreadable, "lockfile": os.path.exists(root_path("tmp", "libtpu_lockfile"))}


def libtpu_files(dists: list[dict[str, Any]]) -> list[str]:
    """libtpu.so where TensorFlow looks for it: TPU_LIBRARY_PATH, the libtpu package, the TPU VM images' /lib."""
    candidates = [os.environ.get("TPU_LIBRARY_PATH", "")]
    for dist in dists:
        if dist["name"] in ("libtpu", "libtpu-nightly") and dist["location"]:
            candidates.append(os.path.join(dist["location"], "libtpu", "libtpu.so"))
    candidates += ["/lib/libtpu.so", "/usr/lib/libtpu.so", "/usr/local/lib/libtpu.so"]
    return [path for path in candidates if path and os.path.isfile(path)]


def nvidia_smi() -> dict[str, Any]:
    """nvidia-smi's GPUs, a line each as `--query-gpu=index,uuid,name --format=csv,noheader` prints them; the checks
    read the lines (tpuctl/doctor/machine_checks.py). Read no further than SMI_LIMIT bytes a stream and no longer than
    SMI_TIMEOUT_S: a tool that prints without end is killed at the limit, not kept in memory until its deadline."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {"found": False}
    argv = [tool, "--query-gpu=index,uuid,name", "--format=csv,noheader"]
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as err:
        return {"found": True, "error": str(err)[:200]}
    fired: list[bool] = []

    def late() -> None:  # the reads below wait no longer than this
        fired.append(True)
        _kill_group(child.pid)

    deadline = time.monotonic() + SMI_TIMEOUT_S
    timer = threading.Timer(SMI_TIMEOUT_S, late)
    timer.start()
    try:
        text = child.stdout.read(SMI_LIMIT + 1)  # type: ignore[union-attr]
        errors = child.stderr.read(SMI_LIMIT + 1) if len(text) <= SMI_LIMIT else b""  # type: ignore[union-attr]
        if len(text) <= SMI_LIMIT and len(errors) <= SMI_LIMIT:
            child.wait(max(0.0, deadline - time.monotonic()))  # its streams ended: so does it
    except subprocess.TimeoutExpired:
        fired.append(True)
    finally:
        timer.cancel()
        _kill_group(child.pid)  # what is left of it: nothing, or a tool past its limit or its deadline
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]
        child.stderr.close()  # type: ignore[union-attr]
    if fired:
        return {"found": True, "error": "no answer within " + str(SMI_TIMEOUT_S) + "s"}
    if len(text) > SMI_LIMIT or len(errors) > SMI_LIMIT:
        return {"found": True, "error": "it printed more than " + str(SMI_LIMIT) + " bytes, more than any list of GPUs (stopped)"}
    out = text.decode("utf-8", "replace")
    if child.returncode:
        return {"found": True, "error": (errors.decode("utf-8", "replace").strip() or out.strip())[-200:] or "exit status " + str(child.returncode)}
    lines = [line.strip()[:SMI_LINE] for line in out.splitlines() if line.strip()]
    return {"found": True, "lines": lines[:SMI_LINES], "cut": len(lines) > SMI_LINES}


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, 9)


def import_tensorflow(deadline: float, devices: bool) -> dict[str, Any]:
    """`import tensorflow` (and tf.keras, and the physical devices) in a child: crash, hang, error or the time it took."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.monotonic()
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, "devices" if devices else "import"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as err:
        return {"status": "error", "message": str(err)[:300]}
    readers = [_Tail(stream) for stream in (child.stdout, child.stderr)]
    try:
        child.wait(timeout=deadline)
        status = None
    except subprocess.TimeoutExpired:
        status = "hang"
    _kill_group(child.pid)  # what it left in its session: nothing, or a hung import and its children
    out, err_text = (reader.end() for reader in readers)
    seconds = round(time.monotonic() - started, 3)
    lines = out.decode("utf-8", "replace").splitlines()
    stages = [line[6:] for line in lines if line.startswith("stage ")]
    result: dict[str, Any] = {"seconds": seconds, "stage": stages[-1] if stages else None}
    errors = [line.strip() for line in err_text.decode("utf-8", "replace").splitlines() if line.strip()]
    if status is None:
        answers = [line[7:] for line in lines if line.startswith("answer ")]
        if child.returncode == 0 and answers:
            try:
                result.update(json.loads(answers[-1]))
                status = "ok"
            except (ValueError, TypeError, RecursionError):  # not JSON, no object, or nested past the parser's depth
                status = "error"
        elif child.returncode < 0:
            status, result["signal"] = "crash", -child.returncode
        else:
            status, result["exit_code"] = "error", child.returncode
    result["status"] = status
    if status != "ok" and errors:
        result["message"] = errors[-1][:400]
    return result


class _Tail:
    """One of the import child's pipes read on a thread of its own to its end, only its last CHILD_KEPT bytes kept:
    its answer is its last line, its error its last words, and what TensorFlow or a sitecustomize prints before
    them, however much, is read and dropped (communicate() would keep it all)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.data = bytearray()
        self.thread = threading.Thread(target=self.read)
        self.thread.daemon = True
        self.thread.start()

    def read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: self.stream.read1(65536), b""):
                self.data += chunk
                if len(self.data) > 2 * CHILD_KEPT:
                    del self.data[:-CHILD_KEPT]

    def end(self) -> bytes:
        """What was kept, once the pipe ended (or CHILD_DRAIN_S passed: a child of the child may hold it open)."""
        self.thread.join(CHILD_DRAIN_S)
        return bytes(self.data[-CHILD_KEPT:])


def metadata(host: str, on_gce: bool) -> dict[str, Any]:
    """The TPU VM's own description (accelerator type, runtime) and the server's clock, when there is one."""
    if not on_gce and not os.environ.get("GCE_METADATA_HOST"):
        return {"reachable": False, "why": "not on Google Compute Engine"}
    from urllib.request import Request, urlopen

    def ask(path: str) -> Any:
        request = Request("http://" + host + "/computeMetadata/v1/" + path, headers={"Metadata-Flavor": "Google"})
        with urlopen(request, timeout=2.0) as reply:
            return reply.headers.get("Date"), reply.read(65536).decode("utf-8", "replace")

    try:
        before = time.time()
        date, body = ask("instance/attributes/?recursive=true")
        after = time.time()
    except Exception as err:  # noqa: BLE001 - any failure to reach it is "not reachable"
        return {"reachable": False, "why": str(err)[:200]}
    found: dict[str, Any] = {"reachable": True, "local_time": (before + after) / 2, "date": date}
    try:
        attributes = json.loads(body)
    except (ValueError, RecursionError):
        attributes = {}
    if isinstance(attributes, dict):
        found["attributes"] = {k: str(v)[:4096] for k, v in attributes.items() if k in ("accelerator-type", "tpu-env", "runtime-version")}
    try:
        found["service_account"] = ask("instance/service-accounts/default/email")[1].strip()[:200]
    except Exception:  # noqa: BLE001
        found["service_account"] = None
    return found


def ports(count: int) -> dict[str, Any]:
    """Can a worker's port be had: `count` free TCP ports bound at once, and the range they come from."""
    held = []
    error = None
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(("", 0))
    except OSError as err:
        error = str(err)[:200]
    bound = len(held) - (1 if error else 0)
    for sock in held:
        sock.close()
    span = (read_text("/proc/sys/net/ipv4/ip_local_port_range") or "").split()
    return {"asked": count, "bound": bound, "error": error, "range": [int(n) for n in span[:2]] if len(span) == 2 and all(n.isdigit() for n in span) else None}


def credentials() -> dict[str, Any]:
    """Where Application Default Credentials would come from (TensorFlow's gs:// file system uses them)."""
    named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    config = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    adc = os.path.join(config, "application_default_credentials.json")
    return {
        "env_file": named,
        "env_file_readable": bool(named and os.access(named, os.R_OK) and os.path.isfile(named)),
        "adc_file": adc if os.path.isfile(adc) else None,
    }


def gather(request: dict[str, Any]) -> dict[str, Any]:
    on_gce = (read_text(root_path("sys", "class", "dmi", "id", "product_name")) or "").startswith("Google")
    host = os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_IP") or "169.254.169.254"
    package = tensorflow_package()
    nodes = device_nodes()
    busy = holders(nodes)
    slow: dict[str, Any] = {}

    def run(key: str, work: Any) -> threading.Thread:
        thread = threading.Thread(target=lambda: slow.__setitem__(key, work()))
        thread.daemon = True
        thread.start()
        return thread

    threads = [run("metadata", lambda: metadata(host, on_gce)), run("nvidia_smi", nvidia_smi)]
    if package and request.get("import", True):
        devices = not busy["held"]  # listing devices would take a TPU another process holds
        threads.append(run("import", lambda: import_tensorflow(float(request.get("deadline", 60)), devices)))
    dists = distributions()
    facts: dict[str, Any] = {
        "format": FORMAT,
        "hostname": socket.gethostname(),
        "python": python_facts(),
        "distributions": dists,
        "tensorflow_package": package,
        "env": {name: os.environ[name] for name in ENV if name in os.environ},
        "on_gce": on_gce,
        "pci": pci_devices(),
        "dev": nodes,
        "holders": busy,
        "libtpu_files": libtpu_files(dists),
        "ports": ports(int(request.get("workers", 2))),
        "credentials": credentials(),
        "paths": {path: os.path.isdir(path) for path in request.get("paths", [])},
    }
    for thread in threads:
        thread.join()
    facts.update(slow)
    if "import" not in facts:
        facts["import"] = {"status": "absent" if not package else "skipped"}
    return facts


if __name__ == "__main__":
    try:
        asked = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    except ValueError:
        asked = {}
    sys.stdout.write("tpuctl-doctor " + json.dumps(gather(asked if isinstance(asked, dict) else {})) + "\n")

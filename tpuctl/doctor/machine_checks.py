"""The checks of the machine around the workers: GPUs (and how many workers share them), free ports, credentials
for a gs:// model dir, the clock."""

from __future__ import annotations

import email.utils
import re
from collections.abc import Mapping
from typing import Any

from tpuctl.doctor.facts import Facts, number, text
from tpuctl.doctor.verdict import Check, Context, ok, tf_dist
from tpuctl.inputs.errors import one_line
from tpuctl.tpu.accelerators import CUDA_VISIBLE_DEVICES, visible_entries

SKEW_WARN_S = 10.0
SKEW_FAIL_S = 300.0  # OAuth's JWT assertions are refused beyond a few minutes' skew


# A line of `nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader` (the probe's query): fields joined by ", "
# (nvidia-smi's CSV: `nvidia-smi --help-query-gpu`, https://docs.nvidia.com/deploy/nvidia-smi/), the UUID "GPU-" and
# five parts of hexadecimal digits (NVML's nvmlDeviceGetUUID: "a 5 part hexadecimal string",
# https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html), then the product name.
_SMI_LINE = re.compile(r"([0-9]{1,3}), GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}, (\S.{0,127})")
UNREADABLE = "nvidia-smi's output could not be read"


def listed_gpus(smi: Mapping[str, Any]) -> list[str] | None:
    """The GPU names nvidia-smi listed, or None where its output is not its answer: a line that is not a GPU's as the
    probe's query prints it (random bytes, a wrapper's chatter), an index twice, more lines than the probe keeps.
    A line that only looks like one is never counted as a GPU."""
    lines = smi.get("lines")
    if not isinstance(lines, list) or smi.get("cut") is not False:
        return None
    names: dict[str, str] = {}  # by index
    for line in lines:
        match = _SMI_LINE.fullmatch(line) if isinstance(line, str) else None
        if match is None or match[1] in names or not match[2].isprintable():
            return None
        names[match[1]] = match[2]
    return list(names.values())


def check_gpus(facts: Facts, _: Context) -> Check:
    """GPUs the driver sees but TensorFlow does not: tensorflow-cpu, or a tensorflow without its CUDA libraries
    (`tensorflow[and-cuda]`), trains on the CPU without a word."""
    smi = facts.nvidia_smi
    nvidia_pci = [f for f in facts.pci if f.vendor == 0x10DE]
    if smi.get("found") is not True:
        if nvidia_pci:
            return Check("gpus", "warn", f"{len(nvidia_pci)} NVIDIA device(s) on the PCI bus but no nvidia-smi: no driver", "install the NVIDIA driver")
        return ok("gpus", "no NVIDIA GPUs")
    error = text(smi, "error")
    if error:
        return Check("gpus", "warn", f"nvidia-smi failed: {one_line(error, 160)}", "check the NVIDIA driver (nvidia-smi)")
    gpus = listed_gpus(smi)
    if gpus is None:
        return Check("gpus", "warn", UNREADABLE, "run `nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader` to see what it prints")
    devices = facts.tf_import.get("devices")
    count = devices.get("GPU", 0) if isinstance(devices, dict) else None
    seen = count if isinstance(count, int) and not isinstance(count, bool) else None  # the answer may be hostile
    if not gpus:
        return ok("gpus", "nvidia-smi lists no GPUs")
    if seen is None:
        return ok("gpus", f"nvidia-smi lists {len(gpus)} GPU(s); TensorFlow was not asked (see import)")
    if seen < len(gpus):
        dist = tf_dist(facts)
        fix = (
            f"pip uninstall -y {dist.name} && pip install 'tensorflow[and-cuda]'"
            if dist and dist.name.endswith("-cpu")
            else "pip install 'tensorflow[and-cuda]'"
        )
        return Check("gpus", "fail", f"nvidia-smi lists {len(gpus)} GPU(s), TensorFlow sees {seen}", fix)
    return ok("gpus", f"{len(gpus)} GPU(s), all seen by TensorFlow")


def check_gpu_share(facts: Facts, context: Context) -> Check:
    """Issue 34: `tpuctl launch` gives each local worker its share of the host's GPUs (CUDA_VISIBLE_DEVICES: the
    workers' own value when set, else nvidia-smi's GPUs); more workers than GPUs share cards, each with
    TF_FORCE_GPU_ALLOW_GROWTH=true, and TensorFlow's memory on a shared card is all of theirs together.
    Judged only for a --workers the user gave: the default 2 sizes the port check, it is no plan."""
    value = facts.env.get(CUDA_VISIBLE_DEVICES)
    answered = facts.nvidia_smi.get("found") is True and not text(facts.nvidia_smi, "error")  # the gpus check says why not
    smi = listed_gpus(facts.nvidia_smi) if answered else []
    if smi is None and value is None:
        return ok("gpu-share", f"{UNREADABLE}: no count of GPUs to share out")
    listed = len(smi) if smi is not None else None
    count = len(visible_entries(value, listed)) if value is not None else listed or 0
    where = f"{CUDA_VISIBLE_DEVICES}={one_line(value, 60)!r}" if value is not None else "nvidia-smi"
    if not count:
        return ok("gpu-share", "no GPU to share out")
    if context.workers <= count:
        return ok("gpu-share", f"{count} GPU(s) ({where}): {count // context.workers} for each of {context.workers} worker(s) per host")
    if not context.workers_given:
        return ok("gpu-share", f"{count} GPU(s) ({where}): more than {count} worker(s) per host would share cards (--workers N checks a count)")
    return Check(
        "gpu-share",
        "warn",
        f"{context.workers} workers per host, {count} GPU(s) ({where}): workers share cards, each with memory growth, "
        "and together can run out of GPU memory",
        f"at most {count} workers per host: each then gets GPUs of its own",
    )


def check_ports(facts: Facts, context: Context) -> Check:
    """Each worker needs a free TCP port for TensorFlow's gRPC server; a host out of ephemeral ports fails
    every start with "address already in use"."""
    asked, bound = number(facts.ports, "asked"), number(facts.ports, "bound")
    span = facts.ports.get("range")
    width = span[1] - span[0] + 1 if isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span) else None
    if asked is None or bound is None:
        return Check("ports", "warn", "the probe could not try ports", "")
    if bound < asked:
        return Check(
            "ports",
            "fail",
            f"only {int(bound)} of {int(asked)} free TCP ports could be bound: {one_line(text(facts.ports, 'error') or '', 120)}",
            "stop what holds the ports (ss -ltnp), or widen net.ipv4.ip_local_port_range",
        )
    if width is not None and width < max(context.workers, 1) * 4:
        return Check("ports", "warn", f"the ephemeral port range has {width} ports", "sysctl -w net.ipv4.ip_local_port_range='32768 60999'")
    return ok("ports", f"{int(bound)} free port(s) for {context.workers} worker(s)" + (f" (range of {width})" if width else ""))


def check_gcs_credentials(facts: Facts, context: Context) -> Check:
    """A gs:// model dir is written by TensorFlow's own GCS file system with Application Default Credentials:
    none, and the first checkpoint fails after the whole start-up."""
    if not (context.model_dir or "").startswith("gs://"):
        return ok("gcs-credentials", "no gs:// model dir configured")
    creds = facts.credentials
    named = text(creds, "env_file", 1000)
    if named and creds.get("env_file_readable") is not True:
        return Check(
            "gcs-credentials",
            "fail",
            f"GOOGLE_APPLICATION_CREDENTIALS names {one_line(named, 120)}, which cannot be read",
            "point it at a readable key file, or unset it",
        )
    if named:
        return ok("gcs-credentials", f"GOOGLE_APPLICATION_CREDENTIALS ({one_line(named, 120)})")
    if text(creds, "adc_file", 1000):
        return ok("gcs-credentials", "application default credentials (gcloud auth application-default login)")
    account = text(facts.metadata, "service_account", 200)
    if facts.metadata.get("reachable") is True and account:
        return ok("gcs-credentials", f"the VM's service account {one_line(account, 120)}")
    return Check("gcs-credentials", "fail", f"no credentials for {one_line(context.model_dir or '', 120)}", "gcloud auth application-default login")


def check_clock(facts: Facts, _: Context) -> Check:
    """Clock skew breaks OAuth (tokens "not yet valid"), GCS signed requests and the timeline's wall times."""
    if facts.metadata.get("reachable") is not True:
        return ok("clock", "no metadata server to compare with")
    date, local = text(facts.metadata, "date", 64), number(facts.metadata, "local_time")
    try:
        server = email.utils.parsedate_to_datetime(date).timestamp() if date else None
    except (TypeError, ValueError, IndexError):
        server = None
    if server is None or local is None:
        return ok("clock", "the metadata server gave no time")
    skew = local - server
    shown = f"{abs(skew):.0f}s {'ahead of' if skew > 0 else 'behind'} the metadata server"
    if abs(skew) >= SKEW_FAIL_S:
        return Check("clock", "fail", shown, "sudo systemctl restart chrony (or systemd-timesyncd)")
    if abs(skew) >= SKEW_WARN_S:
        return Check("clock", "warn", shown, "sudo systemctl restart chrony (or systemd-timesyncd)")
    return ok("clock", "in step with the metadata server (within 1s resolution)" if abs(skew) < 2 else shown)

"""What `tpuctl devices` lists: this machine's fast probe, TensorFlow's view, or a cloud TPU's.

TensorFlow's view comes from `python -m tpuctl.runtime.devices` in a subprocess,
never from this process: the CLI must start fast and stay free of TensorFlow, and
a TPU that never answers (a grpc:// address with nothing behind it hangs TF
forever) must not hang tpuctl. So the worker keeps its own deadline, this side
waits that plus an allowance and then kills the worker's process group, and a
watchdog pipe makes the worker leave when tpuctl itself dies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuctl import devices as dev
from tpuctl.cluster import worker_contract as contract
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.runtime_path import put_tpuctl_on_path
from tpuctl.safety import child_output, reaper

DEFAULT_TPU_TIMEOUT_S = 60.0
MAX_TPU_TIMEOUT_S = 7 * 24 * 3600.0  # a week, as tpuctl.inputs.seconds.Seconds allows
# Beyond --tpu-timeout, what the worker may spend importing TensorFlow and listing devices.
TF_ALLOWANCE_S = 60.0
WORKER_MODULE = "tpuctl.runtime.devices"
FAST_HINT = "--fast lists devices without TensorFlow"
# Bytes kept of each of the worker's streams, its last: its answer is one line of a few kilobytes (a device each), and
# what a sitecustomize or TensorFlow prints before it, however much, is read and dropped.
OUTPUT_LIMIT = 1 << 20

Say = Callable[[str], None]  # a notice for people (stderr), without the "tpuctl: " prefix
Waiting = Callable[[str], AbstractContextManager[Any]]  # progress shown while the worker runs


@dataclass(frozen=True)
class DeviceQuery:
    """What `tpuctl devices` was asked, flag for flag (None where a flag was not given)."""

    target: str | None = None
    fast: bool = False
    tpu_timeout: float | None = None
    python: str | None = None
    project: str | None = None
    credentials: str | None = None
    access_token_file: str | None = None
    zone: str | None = None

    @property
    def kind(self) -> str | None:
        """`local`, `grpc` or `name` (a TPU VM in the cloud); None for this machine."""
        return dev.target_kind(self.target) if self.target is not None else None

    def check(self) -> None:
        """Refuse flags that the chosen view would silently ignore (exit 2), before anything is probed."""
        given = (("--project", self.project), ("--credentials", self.credentials), ("--access-token-file", self.access_token_file), ("--zone", self.zone))
        cloud = [flag for flag, value in given if value]
        tensorflow = [flag for flag, value in (("--python", self.python), ("--tpu-timeout", self.tpu_timeout)) if value is not None]
        if self.tpu_timeout is not None and not 0 < self.tpu_timeout <= MAX_TPU_TIMEOUT_S:  # nan fails this too
            # The CLI's Seconds type refuses these first; a caller in Python gets the same line, not a hang.
            raise TpuctlError(f"--tpu-timeout {self.tpu_timeout!r} is not within (0, {MAX_TPU_TIMEOUT_S:g}] seconds")
        if self.fast and self.target is not None:
            raise TpuctlError("--fast looks at this machine only; drop --tpu, or drop --fast")
        if self.fast and tensorflow:
            raise TpuctlError(f"{' and '.join(tensorflow)} ask TensorFlow, which --fast does not")
        if self.kind == "name" and tensorflow:
            raise TpuctlError(f"{' and '.join(tensorflow)} ask TensorFlow; --tpu {self.target} asks the Cloud TPU API")
        if self.kind != "name" and cloud:
            raise TpuctlError(f"{', '.join(cloud)}: only for --tpu NAME (a TPU VM in the cloud)")


@dataclass(frozen=True)
class Listing:
    """The rows to show, and the worker's answer (TensorFlow's version and interpreter) when TensorFlow was asked."""

    rows: list[dev.Row]
    tensorflow: dict[str, Any] | None = None


def list_devices(query: DeviceQuery, say: Say, waiting: Waiting) -> Listing:
    """The devices `query` asks for: a cloud TPU's from the API, or this machine's (fast probe, then TensorFlow)."""
    query.check()
    if query.kind == "name":
        assert query.target is not None
        return Listing(_cloud_rows(query, say))
    if query.python is not None and shutil.which(query.python) is None:
        raise TpuctlError(f"--python {query.python}: no such interpreter, or not executable")
    interpreter = query.python or sys.executable
    timeout_s = query.tpu_timeout or DEFAULT_TPU_TIMEOUT_S
    if query.target == "local" and not dev.tpu_present():
        raise TpuctlError(
            "no TPU on this machine: --tpu local needs /dev/accel* or /dev/vfio/N",
            hint="run it on a TPU VM, or give --tpu grpc://HOST:PORT or a TPU VM's name",
            exit_code=FAILED,
        )
    if query.target is not None:
        answer = tensorflow_devices(interpreter, query.target, timeout_s, waiting)
        return Listing(answer["devices"], answer)
    found = dev.local_tpu()
    if found.colab:
        say(found.description)
    rows = fast_rows(say)
    if query.fast:
        return Listing(rows)
    # The worker finds a local TPU itself; only Colab's grpc:// address has to be handed over.
    answer = tensorflow_devices(interpreter, found.target if found.target != "local" else None, timeout_s, waiting, fast_hint=True)
    return Listing(rows + answer["devices"], answer)


def fast_rows(say: Say) -> list[dev.Row]:
    """What is found without TensorFlow: TPU chips in /dev, GPUs from nvidia-smi, the CPUs."""
    rows = dev.dev_rows()
    try:
        rows += dev.nvidia_smi_rows()
    except TpuctlError as err:
        say(f"warning: {err.message}; no GPU rows from nvidia-smi")
    rows.append(dev.cpu_row())
    return rows


def _cloud_rows(query: DeviceQuery, say: Say) -> list[dev.Row]:
    from tpuctl.cloud.nodes.node_lookup import find_node

    assert query.target is not None
    hint = "`tpuctl list --all-zones` shows every node; `--tpu local` or grpc://HOST:PORT asks TensorFlow instead"
    node = find_node(query.target, hint, query.project, query.zone, query.credentials, query.access_token_file)
    rows, warning = dev.api_rows(node)
    if warning:
        say(f"warning: {warning}")
    return rows


# --- the TensorFlow worker ------------------------------------------------------------------------


def tensorflow_devices(python: str, target: str | None, timeout_s: float, waiting: Waiting, *, fast_hint: bool = False) -> dict[str, Any]:
    """TensorFlow's logical devices, from `python -m tpuctl.runtime.devices [TARGET]` in a subprocess.

    The worker keeps to `timeout_s` to reach a TPU; this waits that plus
    TF_ALLOWANCE_S, then kills its process group. A failure is one line
    (the worker's own `tpuctl: error:` line when it wrote one), exit 1.
    """
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env[contract.TPU_TIMEOUT] = repr(float(timeout_s))
    argv = [python, "-m", WORKER_MODULE, *([target] if target else [])]
    with tempfile.TemporaryDirectory(prefix="tpuctl-devices-") as shim:
        put_tpuctl_on_path(env, Path(shim))
        with waiting(f"asking TensorFlow ({python})"):
            code, out, err_text = _run_watched(argv, env, timeout_s + TF_ALLOWANCE_S)
    if code != 0:
        raise worker_failure(python, code, err_text.decode("utf-8", "replace"), fast_hint)
    return parse_answer(out.decode("utf-8", "replace"), python)


def _run_watched(argv: list[str], env: dict[str, str], limit: float) -> tuple[int, bytes, bytes]:
    """Run the worker under a reaper (tpuctl/safety/reaper.py) with a watchdog pipe; stop it at `limit` or on any interruption.

    The reaper is what makes an interpreter that never answers (or starts children of its
    own) die with tpuctl, even by SIGKILL; the watchdog pipe is for platforms without one."""
    python = argv[0]
    watch_read, watch_write = os.pipe()  # the worker leaves when this end closes (tpuctl died)
    env = {**env, contract.WATCHDOG_FD: str(watch_read)}
    try:
        try:
            child = reaper.spawn(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(watch_read,),
            )
        except OSError as err:
            raise TpuctlError(f"cannot start {python}: {err.strerror or err}", exit_code=FAILED) from None
        finally:
            os.close(watch_read)
        try:  # the answer is stdout's last line, an error stderr's last ones: the last OUTPUT_LIMIT bytes of each are kept
            done = child_output.read(child.proc, deadline=time.monotonic() + limit, limit=OUTPUT_LIMIT)
        except subprocess.TimeoutExpired:
            child.stop(0, first=None)
            raise TpuctlError(f"TensorFlow worker ({python}) gave no answer within {limit:.0f}s", hint=FAST_HINT, exit_code=FAILED) from None
        except BaseException:
            child.stop(0, first=None)
            raise
        child.cut()
    finally:
        os.close(watch_write)
    if child.proc.returncode == 127 and not done.stdout and b"cannot run " in done.stderr:
        raise TpuctlError(f"cannot start {python}: {done.stderr.decode('utf-8', 'replace').strip().rpartition(': ')[2]}", exit_code=FAILED)
    return child.proc.returncode, done.stdout, done.stderr


def worker_failure(python: str, code: int, stderr: str, fast_hint: bool) -> TpuctlError:
    """One line for a worker that failed: its own `tpuctl: error:` line when it wrote one, else its last line or signal."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("tpuctl: error: ")]
    hint = FAST_HINT if fast_hint else None
    if ours:  # the worker's own line, hint included
        message, hint = dev.one_line(ours[-1].removeprefix("tpuctl: error: "), 600), None
    elif code < 0:
        message = f"TensorFlow worker ({python}) was {exit_words(code)}"
    else:
        message = f"TensorFlow worker failed: {dev.one_line(lines[-1], 300) if lines else f'{exit_words(code)}, no message'}"
    return TpuctlError(message, hint=hint, exit_code=FAILED)


def parse_answer(stdout: str, python: str) -> dict[str, Any]:
    """The worker's last stdout line, checked: anything a user's sitecustomize printed before it is ignored."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    bad = TpuctlError(f"TensorFlow worker ({python}) did not answer with a device list", exit_code=FAILED)
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        raise bad from None
    if not isinstance(answer, dict) or not isinstance(answer.get("devices"), list):
        raise bad
    rows = []
    for item in answer["devices"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("device_type"), str):
            raise bad
        rows.append({key: item[key] for key in dev.FIELDS if key in item})
    return {**answer, "devices": rows}

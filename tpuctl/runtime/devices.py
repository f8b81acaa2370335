"""`python -m tpuctl.runtime.devices [TARGET]`: TensorFlow's logical devices as one JSON line on stdout.

Started by `tpuctl devices` in a subprocess (the CLI never imports TensorFlow).
TARGET is `local` or `grpc://HOST:PORT`; without one, the TPU of this machine is
reached only when it has one (/dev/accel*, /dev/vfio/N), otherwise TensorFlow's
TPU APIs are left alone. Reaching a TPU goes through tpu_connect, which keeps to
TPUCTL_TPU_TIMEOUT. The answer is the last line of stdout:

    {"tensorflow": "2.21.0", "python": "/usr/bin/python3", "devices": [ROW, ...]}

A failure is one `tpuctl: error: ...` line on stderr and exit status 1.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from tpuctl.cluster import worker_contract as contract
from tpuctl.devices import tf_row
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.runtime import after_import, tpu_connect, worker_env

if TYPE_CHECKING:
    from tpuctl.devices import Row


def _watch_parent() -> None:
    """Leave when tpuctl goes away: it holds the write end of a pipe whose read end we were given."""
    raw = os.environ.get(contract.WATCHDOG_FD, "")
    if not (raw.isascii() and raw.isdigit()):
        return
    fd = int(raw)

    def wait() -> None:
        try:
            while os.read(fd, 512):
                pass
        except OSError:
            pass
        os._exit(FAILED)

    threading.Thread(target=wait, name="tpuctl-watchdog", daemon=True).start()


def _gpu_details(tf: Any) -> dict[int, tuple[str | None, int | None]]:
    """Model name and the memory TensorFlow may use, per GPU index; empty without GPUs."""
    physical = tf.config.list_physical_devices("GPU")
    if not physical:
        return {}
    details: dict[int, tuple[str | None, int | None]] = {}
    for index, device in enumerate(physical):
        try:
            model = tf.config.experimental.get_device_details(device).get("device_name")
        except (ValueError, RuntimeError):
            model = None
        details[index] = (str(model) if model else None, None)
    try:  # the allocator's limit per device; not part of tf.config, so optional
        from tensorflow.python.client import device_lib

        for attributes in device_lib.list_local_devices():
            if attributes.device_type == "GPU" and attributes.name.rsplit(":", 1)[-1].isdigit():
                index = int(attributes.name.rsplit(":", 1)[-1])
                model = details.get(index, (None, None))[0]
                details[index] = (model, int(attributes.memory_limit) // (1024 * 1024) or None)
    except Exception:  # noqa: BLE001 - memory is a nicety; the device list must still come
        pass
    return details


def logical_rows(tf: Any) -> list[Row]:
    gpus = _gpu_details(tf)
    rows = []
    for device in tf.config.list_logical_devices():
        model = memory = None
        if device.device_type == "GPU":
            index = device.name.rsplit(":", 1)[-1]
            model, memory = gpus.get(int(index), (None, None)) if index.isdigit() else (None, None)
        rows.append(tf_row(device.name, device.device_type, model=model, memory_mib=memory))
    return rows


def describe(target: str | None) -> dict[str, Any]:
    timeout_s = tpu_connect.timeout_from_env()
    if target is None and worker_env.tpu_present():
        target = "local"
    if target is not None:
        tpu_connect.connect(target, timeout_s, import_within_deadline=True)  # the command answers within --tpu-timeout
    try:
        import tensorflow as tf
    except ImportError as err:
        raise TpuctlError(
            f"TensorFlow cannot be imported by {sys.executable}: {one_line(str(err), first=True) or type(err).__name__}",
            hint="--python picks the interpreter whose TensorFlow is asked; `tpuctl devices --fast` needs none",
            exit_code=FAILED,
        ) from None
    return {"tensorflow": tf.__version__, "python": sys.executable, "devices": logical_rows(tf)}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    after_import.frozen_after("tensorflow")  # ~0.45 CPU-s of the import (after_import.py)
    _watch_parent()
    try:
        if len(args) > 1 or (args and args[0] != "local" and not args[0].startswith("grpc://")):
            raise TpuctlError(f"usage: python -m tpuctl.runtime.devices [local | grpc://HOST:PORT], not {' '.join(args)!r}")
        answer = describe(args[0] if args else None)
    except TpuctlError as err:
        _fail(str(err))
    except Exception as err:  # noqa: BLE001 - TensorFlow's errors; the CLI shows one line
        _fail(f"{type(err).__name__}: {one_line(str(getattr(err, 'message', '') or err), first=True) or 'no message'}")
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    # TensorFlow's own teardown adds seconds and may wait on a remote TPU; nothing is left to do.
    os._exit(0)


def _fail(message: str) -> NoReturn:
    print(f"tpuctl: error: {message}", file=sys.stderr, flush=True)
    os._exit(FAILED)


if __name__ == "__main__":
    main()

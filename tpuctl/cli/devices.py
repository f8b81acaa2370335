"""`tpuctl devices` and `tpuctl connect`: what a script will see, and the code that reaches a TPU.

The CLI never imports TensorFlow: TensorFlow's view comes from
`python -m tpuctl.runtime.devices` in a subprocess with its own deadline, the
fast view from /dev, nvidia-smi and the OS, a cloud TPU's from the TPU API.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

import tpuctl
from tpuctl import devices as dev
from tpuctl.cli.cloud_options import project_options, zone_option
from tpuctl.cli.display import StatusLine, print_table, rich_wanted
from tpuctl.errors import FAILED, TpuctlError

DEFAULT_TPU_TIMEOUT_S = 60.0
# Beyond --tpu-timeout, what the worker may spend importing TensorFlow and listing devices.
TF_ALLOWANCE_S = 60.0
WORKER_MODULE = "tpuctl.runtime.devices"
WATCHDOG_FD_ENV = "TPUCTL_WATCHDOG_FD"  # tpuctl.runtime.devices reads it; importing that module would load tpuctl.runtime

HEADERS: dict[str, str] = {
    "name": "NAME",
    "device_type": "TYPE",
    "source": "SOURCE",
    "accelerator_type": "ACCELERATOR",
    "topology": "TOPOLOGY",
    "host": "HOST",
    "core": "CORE",
    "chips": "CHIPS",
    "cores": "CORES",
    "hosts": "HOSTS",
    "model": "MODEL",
    "memory_mib": "MEMORY",
    "ip": "IP",
    "external_ip": "EXTERNAL IP",
    "state": "STATE",
    "health": "HEALTH",
}


def _say(line: str) -> None:
    click.echo(f"tpuctl: {line}", err=True)


@click.command("devices")
@click.option(
    "--tpu",
    "target",
    metavar="TARGET",
    help="`local` or grpc://HOST:PORT (asked through TensorFlow), or a TPU VM's name (asked of the Cloud TPU API).  "
    "[default: this machine]",
)
@click.option("--fast", is_flag=True, help="Only what is found without TensorFlow: TPU chips in /dev, GPUs from nvidia-smi, CPUs.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of device objects (fields in docs/devices.md).")
@click.option(
    "--tpu-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help=f"Seconds TensorFlow may take to reach the TPU.  [default: {DEFAULT_TPU_TIMEOUT_S:.0f}]",
)
@click.option("--python", "python", metavar="PYTHON", help="Interpreter whose TensorFlow is asked.  [default: this one]")
@project_options
@zone_option
def devices(
    target: str | None,
    fast: bool,
    as_json: bool,
    tpu_timeout: float | None,
    python: str | None,
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
) -> None:
    """List the devices a TensorFlow script will see: TPU cores, GPUs, CPUs.

    Without --tpu: this machine (a TPU VM, a Colab runtime, a GPU box, a laptop),
    the fast probe (/dev, nvidia-smi) plus every logical device TensorFlow reports,
    each row saying where it came from. With --tpu NAME: a TPU VM in the cloud, its
    chips, TensorCores, hosts and topology, and each host's IP, state and health.
    """
    cloud_flags = [flag for flag, value in (("--project", project), ("--credentials", credentials), ("--access-token-file", access_token_file), ("--zone", zone)) if value]
    tf_flags = [flag for flag, value in (("--python", python), ("--tpu-timeout", tpu_timeout)) if value is not None]
    kind = dev.target_kind(target) if target is not None else None
    if fast and target is not None:
        raise TpuctlError("--fast looks at this machine only; drop --tpu, or drop --fast")
    if fast and tf_flags:
        raise TpuctlError(f"{' and '.join(tf_flags)} ask TensorFlow, which --fast does not")
    if kind == "name" and tf_flags:
        raise TpuctlError(f"{' and '.join(tf_flags)} ask TensorFlow; --tpu {target} asks the Cloud TPU API")
    if kind != "name" and cloud_flags:
        raise TpuctlError(f"{', '.join(cloud_flags)}: only for --tpu NAME (a TPU VM in the cloud)")

    if kind == "name":
        assert target is not None
        rows = _cloud_rows(target, project, credentials, access_token_file, zone)
        _show(rows, as_json)
        return
    if python is not None and shutil.which(python) is None:
        raise TpuctlError(f"--python {python}: no such interpreter, or not executable")
    interpreter = python or sys.executable
    timeout_s = tpu_timeout or DEFAULT_TPU_TIMEOUT_S
    if target == "local" and not dev.tpu_present():
        raise TpuctlError(
            "no TPU on this machine: --tpu local needs /dev/accel* or /dev/vfio/N",
            hint="run it on a TPU VM, or give --tpu grpc://HOST:PORT or a TPU VM's name",
            exit_code=FAILED,
        )
    if target is not None:
        answer = tensorflow_devices(interpreter, target, timeout_s)
        _show(answer["devices"], as_json)
        _about(answer, as_json)
        return

    found = dev.local_tpu()
    if found.colab:
        _say(found.description)
    rows = dev.dev_rows()
    try:
        rows += dev.nvidia_smi_rows()
    except TpuctlError as err:
        _say(f"warning: {err.message}; no GPU rows from nvidia-smi")
    rows.append(dev.cpu_row())
    if fast:
        _show(rows, as_json)
        return
    # The worker finds a local TPU itself; only Colab's grpc:// address has to be handed over.
    answer = tensorflow_devices(interpreter, found.target if found.target != "local" else None, timeout_s, fast_hint=True)
    _show(rows + answer["devices"], as_json)
    _about(answer, as_json)


def _cloud_rows(name: str, project: str | None, credentials: str | None, access_token_file: str | None, zone: str | None) -> list[dev.Row]:
    from tpuctl.cli.node_info import find_node

    hint = "`tpuctl list --all-zones` shows every node; `--tpu local` or grpc://HOST:PORT asks TensorFlow instead"
    node, _ = find_node(name, hint, project, zone, credentials, access_token_file)
    rows, warning = dev.api_rows(node)
    if warning:
        _say(f"warning: {warning}")
    return rows


def _cell(row: dev.Row, key: str) -> str:
    value = row.get(key)
    if value is None or value == "":
        return "-"
    if key == "memory_mib":
        return f"{value} MiB"
    return str(value)


def _show(rows: list[dev.Row], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    columns = [key for key in dev.FIELDS if key in ("name", "device_type", "source") or any(key in r for r in rows)]
    cells = [[_cell(r, key) for key in columns] for r in rows]
    if rich_wanted(sys.stdout):
        from rich.markup import escape

        cells = [[escape(cell) for cell in line] for line in cells]
    print_table([HEADERS[key] for key in columns], cells)


def _about(answer: dict[str, Any], as_json: bool) -> None:
    if not as_json:
        _say(f"TensorFlow {answer.get('tensorflow', '?')} in {answer.get('python', '?')}")


# --- the TensorFlow worker ------------------------------------------------------------------------


def tensorflow_devices(python: str, target: str | None, timeout_s: float, *, fast_hint: bool = False) -> dict[str, Any]:
    """TensorFlow's logical devices, from `python -m tpuctl.runtime.devices [TARGET]` in a subprocess.

    The worker keeps to `timeout_s` to reach a TPU; this waits that plus
    TF_ALLOWANCE_S, then kills its process group. A failure is one line
    (the worker's own `tpuctl: error:` line when it wrote one), exit 1.
    """
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["TPUCTL_TPU_TIMEOUT"] = repr(float(timeout_s))
    argv = [python, "-m", WORKER_MODULE, *([target] if target else [])]
    limit = timeout_s + TF_ALLOWANCE_S
    with tempfile.TemporaryDirectory(prefix="tpuctl-devices-") as shim:
        # This very tpuctl, and nothing else of this environment, on the worker's path:
        # another --python keeps its own TensorFlow.
        (Path(shim) / "tpuctl").symlink_to(Path(tpuctl.__file__).resolve().parent, target_is_directory=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [shim, env.get("PYTHONPATH")]))
        watch_read, watch_write = os.pipe()  # the worker leaves when this end closes (tpuctl died)
        env[WATCHDOG_FD_ENV] = str(watch_read)
        try:
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    pass_fds=(watch_read,),
                )
            except OSError as err:
                raise TpuctlError(f"cannot start {python}: {err.strerror or err}", exit_code=FAILED) from None
            finally:
                os.close(watch_read)
            with StatusLine(f"asking TensorFlow ({python})"):
                try:
                    out, err_text = proc.communicate(timeout=limit)
                except subprocess.TimeoutExpired:
                    _kill(proc)
                    raise TpuctlError(
                        f"TensorFlow worker ({python}) gave no answer within {limit:.0f}s", hint="--fast lists devices without TensorFlow", exit_code=FAILED
                    ) from None
                except BaseException:
                    _kill(proc)
                    raise
        finally:
            os.close(watch_write)
    stderr = err_text.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise _worker_failure(python, proc.returncode, stderr, fast_hint)
    return _parse_answer(out.decode("utf-8", "replace"), python)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _worker_failure(python: str, code: int, stderr: str, fast_hint: bool) -> TpuctlError:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("tpuctl: error: ")]
    hint = "--fast lists devices without TensorFlow" if fast_hint else None
    if ours:  # the worker's own line, hint included
        message, hint = dev.one_line(ours[-1].removeprefix("tpuctl: error: "), 600), None
    elif code < 0:
        message = f"TensorFlow worker ({python}) was killed by signal {-code}"
    else:
        message = f"TensorFlow worker failed: {dev.one_line(lines[-1], 300) if lines else f'exit status {code}, no message'}"
    return TpuctlError(message, hint=hint, exit_code=FAILED)


def _parse_answer(stdout: str, python: str) -> dict[str, Any]:
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


# --- connect ---------------------------------------------------------------------------------------


@click.command("connect")
@click.option("--tpu", "target", metavar="TARGET", help="`local`, grpc://HOST:PORT or a TPU VM's name.  [default: what this machine has]")
@click.option("--colab", is_flag=True, help="Insist on a Colab runtime: its COLAB_TPU_ADDR (legacy TPU Node), else its own TPU.")
def connect(target: str | None, colab: bool) -> None:
    """Print the Python that reaches a TPU: TPUClusterResolver, connect, initialise, TPUStrategy.

    The first line is a comment saying what was found. Inside Colab (or with
    --colab) the target is grpc://$COLAB_TPU_ADDR when that is set, else the
    runtime's own TPU (`local`). Nothing is contacted.
    """
    if colab and target is not None:
        raise TpuctlError("give --tpu or --colab, not both")
    if colab and not dev.colab_runtime():
        raise TpuctlError(
            "not a Colab runtime: COLAB_RELEASE_TAG is not set and google.colab cannot be imported",
            hint="drop --colab, or give --tpu TARGET",
        )
    if target is None:
        found = dev.local_tpu()
        about = found.description
        if found.target is None:
            about += '\non a TPU VM (or a Colab TPU runtime) tpu="local" reaches its chips'
        click.echo(dev.snippet(found.target or "local", about), nl=False)
        return
    kind = dev.target_kind(target)
    if kind == "local":
        here = dev.local_tpu(env={}, look_for_module=False)  # this machine's chips, whatever Colab says
        about = here.description if here.target == "local" else 'no TPU on this machine; tpu="local" reaches the chips of the TPU VM it runs on'
    elif kind == "grpc":
        target = dev.grpc_target(target)
        about = f"TPU at {target} (a legacy TPU Node's gRPC address; not contacted)"
    else:
        from tpuctl.cloud import nodespec

        nodespec.check_name(target)
        about = f"TPU VM named {target}: run this on its worker 0; TensorFlow finds the slice's hosts through the Cloud TPU API"
    click.echo(dev.snippet(target, about), nl=False)

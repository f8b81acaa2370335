"""`tpuctl devices` and `tpuctl connect`: what a script will see, and the code that reaches a TPU.

The CLI never imports TensorFlow: the listing comes from tpuctl.devices.probe
(TensorFlow's view from a worker subprocess with its own deadline, the fast view
from /dev, nvidia-smi and the OS, a cloud TPU's from the TPU API); this module
parses the flags and draws the table.
"""

from __future__ import annotations

import json

import click

from tpuctl import devices as dev
from tpuctl.cli.cloud_options import project_options, zone_option
from tpuctl.cli.display import StatusLine, print_table
from tpuctl.devices.probe import DEFAULT_TPU_TIMEOUT_S, DeviceQuery, list_devices
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.seconds import Seconds

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
    type=Seconds(),
    metavar="S",
    help=f"Seconds TensorFlow may take to reach the TPU (0 < S <= 604800).  [default: {DEFAULT_TPU_TIMEOUT_S:.0f}]",
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
    query = DeviceQuery(target, fast, tpu_timeout, python, project, credentials, access_token_file, zone)
    listing = list_devices(query, _say, StatusLine)
    _show(listing.rows, as_json)
    if listing.tensorflow is not None and not as_json:
        _say(f"TensorFlow {listing.tensorflow.get('tensorflow', '?')} in {listing.tensorflow.get('python', '?')}")


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
    print_table([HEADERS[key] for key in columns], [[_cell(r, key) for key in columns] for r in rows])


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
        from tpuctl.cloud.nodes import nodespec

        nodespec.check_name(target)
        about = f"TPU VM named {target}: run this on its worker 0; TensorFlow finds the slice's hosts through the Cloud TPU API"
    click.echo(dev.snippet(target, about), nl=False)

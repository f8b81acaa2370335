"""`tpuctl ssh`'s work: pick the hosts of a TPU VM slice and run commands on them all at once.

Placement (which workers, which of their addresses) and the fan-out belong to the
core so that the command only parses and prints. The ssh machinery is imported
only when a command really runs, keeping `tpuctl ssh --help` cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError
from tpuctl.ssh.connection import Connection

if TYPE_CHECKING:
    from tpuctl.ssh.fanout import HostResult


@dataclass(frozen=True)
class SliceCommand:
    """What `tpuctl ssh` was asked: a node, the command (empty with --cleanup alone), where and how to connect."""

    name: str
    command: tuple[str, ...]
    connection: Connection
    worker: str = "0"
    internal_ip: bool = False
    cleanup: bool = False
    project: str | None = None
    zone: str | None = None
    credentials: str | None = None
    access_token_file: str | None = None
    dry_run: bool = False  # print each host's ssh command, connect nowhere


@dataclass(frozen=True)
class WorkerResult:
    """One command's result on one worker of the slice, with the label its lines carry."""

    label: str  # [worker:N@ADDRESS]
    result: HostResult


def run_on_slice(request: SliceCommand) -> Iterator[list[WorkerResult]]:
    """Each stage's results in worker order: the --cleanup first, then the command.

    A stage runs on every chosen worker at once; after a stage that failed on
    any worker, the next one is not started.
    """
    from tpuctl.ssh.fanout import run_everywhere
    from tpuctl.ssh.tpu_cleanup import CLEANUP_TIMEOUT_S, cleanup_argv

    options = request.connection.ssh_options()  # bad ssh options are bad input, before any API call
    labels, addresses, stages = _targets(request)
    for argv in stages:
        # --cleanup has a deadline; the user's own command runs as long as they want, as under plain ssh.
        results = run_everywhere(addresses, argv, options, timeout=CLEANUP_TIMEOUT_S if argv == cleanup_argv() else None)
        yield [WorkerResult(label, result) for label, result in zip(labels, results, strict=True)]
        if any(result.exit_code for result in results):
            return


def plan_on_slice(request: SliceCommand) -> list[str]:
    """`tpuctl ssh --dry-run`: each stage's ssh command per chosen worker, exactly as the run builds it (the
    node is looked up, to know its hosts; nothing connects to them)."""
    import shlex

    from tpuctl.ssh.fanout import marked

    options = request.connection.ssh_options()
    labels, addresses, stages = _targets(request)
    pairs = list(zip(labels, addresses, strict=True))
    return [f"{label} {shlex.join(options.command(address, marked(argv, '<marker>')))}" for argv in stages for label, address in pairs]


def _targets(request: SliceCommand) -> tuple[list[str], list[str], list[list[str]]]:
    """The chosen workers' labels and addresses, and the commands to run there in order (--cleanup's first)."""
    from tpuctl.cloud.nodes.node_lookup import find_node
    from tpuctl.cloud.nodes.slice_hosts import pick_workers, slice_hosts
    from tpuctl.ssh.tpu_cleanup import cleanup_argv

    if not request.command and not request.cleanup:
        raise TpuctlError("give a COMMAND after --, or --cleanup", hint=f"e.g. tpuctl ssh {request.name} --worker all -- nvidia-smi")
    check_workers(request.worker)
    node = find_node(request.name, "`tpuctl list` shows the nodes", request.project, request.zone, request.credentials, request.access_token_file)
    chosen = pick_workers(slice_hosts(node), request.worker)
    addresses = [host.address(request.internal_ip) for host in chosen]
    labels = [f"[worker:{host.index}@{address}]" for host, address in zip(chosen, addresses, strict=True)]
    stages = ([cleanup_argv()] if request.cleanup else []) + ([list(request.command)] if request.command else [])
    return labels, addresses, stages


def check_workers(worker: str) -> None:
    """`--worker` as gcloud takes it (`all`, `N` or `N,M`), checked before any look-up.

    The slice's size is known only later; this refuses what is no worker number at all,
    such as "²" (a digit to str.isdigit(), not to int()) or 5000 digits (past int()'s limit)."""
    if worker == "all":
        return
    for part in worker.split(","):
        inputs.whole_number(part, "--worker", digits=4, hint="give all, a worker number, or numbers like 0,2")

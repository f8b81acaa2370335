"""The hosts of a TPU VM slice, from the node's networkEndpoints, for SSH fan-out.

gcloud's `tpu-vm ssh --worker=all` reaches hosts on their external IP unless
told `--internal-ip`; tpuctl does the same. Workers always talk to each other
on the internal addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuctl.cloud.nodes.node import Node
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError


@dataclass(frozen=True)
class SliceHost:
    index: int  # the TPU worker number, as gcloud's --worker counts
    internal_ip: str
    external_ip: str | None

    def address(self, internal: bool) -> str:
        return self.internal_ip if internal or not self.external_ip else self.external_ip


def slice_hosts(node: Node) -> list[SliceHost]:
    """Every host of a READY node, in worker order; a node that is not READY has none to offer."""
    if node.state != "READY":
        raise TpuctlError(
            f"TPU VM {node.name} is {node.state or 'in an unknown state'}, not READY", hint=f"`tpuctl describe {node.name}`", exit_code=FAILED
        )
    hosts = [SliceHost(index, host.internal_ip, host.external_ip) for index, host in enumerate(node.endpoints) if host.internal_ip]
    if not hosts:
        raise TpuctlError(f"TPU VM {node.name} lists no hosts", exit_code=FAILED)
    return hosts


def pick_workers(hosts: list[SliceHost], worker: str) -> list[SliceHost]:
    """`all`, one index, or a comma list (`0,2`), as gcloud's --worker takes them."""
    if worker == "all":
        return hosts
    chosen = []
    for part in worker.split(","):
        if not part.strip().isdigit():
            raise TpuctlError(f"--worker {worker!r}: give all, a worker number, or numbers like 0,2", exit_code=USAGE)
        index = int(part)
        if index >= len(hosts):
            raise TpuctlError(f"--worker {index}: this TPU VM has workers 0-{len(hosts) - 1}", exit_code=USAGE)
        chosen.append(hosts[index])
    return chosen

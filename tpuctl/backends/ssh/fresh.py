"""The hosts' side a launch may assume: a TPU VM tpuctl made, or hosts the user set up.

A TPU VM tpuctl made — `--new-tpu`'s, or one `--tpu NAME` launches on that a run kept (`--keep`) or `tpuctl create`
made (made_by_tpuctl) — has its image's software and nothing of this machine's:
not this machine's interpreter path, not the script's folder, and maybe not this machine's working directory's path
(`/Users/me/proj` cannot be made on a Linux VM by its ssh user; `/home/me/proj` is another user's home there). On one,
the workers run the VM's own `python3`, in a folder of their own under the VM user's home (vm_workdir), and the
script's folder goes with them (`--sync`) unless the user says otherwise (`--python`, `--no-sync`, `--remote-dir DIR`
where the folder already is), and a `--python` that is plainly this machine's is refused before anything is created.
Other hosts are the user's own (a shared file system, a venv at the same place everywhere): their defaults stay this
machine's interpreter, this working directory's path and no sync (docs/ssh.md promises those), and the paths only
this machine may have are named as warnings.

With `--requirements` or `--setup`, the workers run an environment's Python made over this interpreter on each host
(docs/environments.md); the interpreter chosen here is what that environment is made from.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuctl.backends.ssh.placement import shown
from tpuctl.inputs.errors import TpuctlError

if TYPE_CHECKING:
    from tpuctl.backends.ssh.placement import RemotePaths
    from tpuctl.cloud.nodes.node import Node

# The TPU VM images' Python, by the name Google's TPU VM guides run it with (`python3 tpu-test.py`:
# https://cloud.google.com/tpu/docs/run-calculation-tensorflow); the image's TensorFlow and libtpu are its packages.
VM_PYTHON = "python3"
# Where the workers' folders go on a VM tpuctl made: relative, so under the ssh user's home, where sshd starts every
# session (as a relative --remote-dir is: docs/ssh.md); the agent, rsync and the hosts' program all resolve it there.
VM_WORK = "tpuctl/work"


def made_by_tpuctl(new_tpu: str | None, node: Node | None) -> str | None:
    """Why the hosts have nothing of this machine's, in words; None for hosts the user set up (or a VM of theirs).

    tpuctl marks what it makes two ways: a run's VM carries the `tpuctl-run` label (run_nodes.py), and `tpuctl create`
    saves the node's spec on this machine (nodespec.save, what babysit and recreate read). A spec file that cannot be
    read leaves the VM the user's: the dry run and the launch then name the paths it may lack."""
    from tpuctl.cloud.nodes import nodespec
    from tpuctl.cloud.nodes.run_nodes import LABEL_KEY

    if new_tpu is not None:
        return "a TPU VM made for this run"
    if node is None:
        return None
    if LABEL_KEY in node.labels:
        return f"TPU VM {node.name}, which a tpuctl run made (its {LABEL_KEY} label)"
    parts = node.path.split("/")  # projects/P/locations/Z/nodes/N
    try:
        created = len(parts) == 6 and nodespec.load(parts[1], node.zone or parts[3], node.name) is not None
    except TpuctlError:
        created = False
    return f"TPU VM {node.name}, which `tpuctl create` made (its saved spec)" if created else None


def laptop_python(python: str) -> str | None:
    """Where `python` is this machine's own, in words: a file that exists here inside its home folder or a Python
    environment of its (the launcher's venv, VIRTUAL_ENV, CONDA_PREFIX); None for a name the hosts' PATH resolves
    (python3) or a system path a VM has as well (/usr/bin/python3)."""
    if not os.path.isabs(python) or not os.path.exists(python):
        return None
    environments = [os.environ.get("VIRTUAL_ENV") or "", os.environ.get("CONDA_PREFIX") or "", sys.prefix if sys.prefix != sys.base_prefix else ""]
    found = {os.path.abspath(python), os.path.realpath(python)}
    for what, roots in (("Python environment", environments), ("home folder", [os.path.expanduser("~")])):
        for root in filter(None, roots):
            for folder in {os.path.abspath(root), os.path.realpath(root)}:
                if any(path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) for path in found):
                    return f"in this machine's {what} {root}"
    return None


def vm_workdir(local_cwd: str) -> str:
    """The workers' directory on a VM tpuctl made, relative to its user's home: this directory's name (what a user
    recognises in `ls ~/tpuctl/work`) and a short hash of its whole path (two projects both called `proj` stay apart;
    the same project finds its folder again on a VM a run kept, so --sync sends only what changed)."""
    path = os.path.abspath(local_cwd)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(path)) or "root"
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:8]
    return f"{VM_WORK}/{name}-{digest}"


def remote_dir(given: str | None, fresh: str | None, local_cwd: str | None = None) -> str | None:
    """The workers' directory the launch (and doctor) plan with: --remote-dir where given; on a VM tpuctl made,
    vm_workdir; else None, this directory's absolute path (hosts the user set up: a shared or copied tree)."""
    if given is not None or fresh is None:
        return given
    return vm_workdir(local_cwd or os.getcwd())


@dataclass(frozen=True)
class HostSide:
    """What the workers run with on the hosts and whether the script's folder is sent, with what the dry run and the
    run say of it: `chosen`, the defaults a TPU VM tpuctl made got; `warnings`, this machine's paths the hosts may lack."""

    python: str  # "" where the hosts run this machine's interpreter (sys.executable)
    sync: bool
    chosen: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def host_side(python: str, python_given: str, sync: bool | None, remote_dir: str | None, paths: RemotePaths, fresh: str | None) -> HostSide:
    """The hosts' interpreter and --sync as the launch runs them. `python`: --python or a [launch] python ("" for
    neither), `python_given` how the user gave it; `sync`: --sync/--no-sync (None for neither); `fresh`: made_by_tpuctl."""
    if fresh is None:
        syncs = bool(sync)
        return HostSide(python, syncs, warnings=tuple(_laptop_paths(python, paths, syncs, remote_dir)))
    if python and (where := laptop_python(python)) is not None:
        raise TpuctlError(
            f"{python_given} {python} is {where}: the workers run on {fresh}, which has nothing of this machine's",
            hint=f"leave it out: the workers then run the VM's own {VM_PYTHON}; or name an interpreter the VM has",
        )
    chosen = [] if python else [f"{VM_PYTHON} (the VM's own Python, for {fresh}; --python names another)"]
    if remote_dir is None:
        here = f"this machine's {os.getcwd()} need not exist there"
        chosen.append(f"the workers' directory {shown(paths.workdir)} (in the VM user's home: {here}; --remote-dir DIR names another)")
    syncs = sync if sync is not None else remote_dir is None
    if sync is None and syncs:
        chosen.append(f"--sync ({fresh} has nothing of this machine's; --no-sync, or --remote-dir DIR where the folder already is, turns it off)")
    warnings = [] if syncs or remote_dir is not None else [_not_sent(paths, "")]
    return HostSide(python or VM_PYTHON, syncs, tuple(chosen), tuple(warnings))


def _laptop_paths(python: str, paths: RemotePaths, sync: bool, remote_dir: str | None) -> list[str]:
    """What a launch from a laptop plans for the user's hosts that only the laptop may have: its own interpreter's
    path (no --python), and the script's folder at the laptop's path (neither --sync nor --remote-dir)."""
    found = []
    if not python:
        found.append(f"the hosts will run {sys.executable}, this machine's Python: pass --python with theirs (e.g. --python python3)")
    if not sync and remote_dir is None:
        found.append(_not_sent(paths, ", this machine's path"))
    return found


def _not_sent(paths: RemotePaths, whose: str) -> str:
    return (
        f"the hosts must already have {shown(posixpath.join(paths.workdir, paths.script))}{whose}: "
        "pass --sync to copy the script's folder, or --remote-dir DIR where it is"
    )

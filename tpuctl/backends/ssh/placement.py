"""Where each task runs and where its files are: pure, so a dry run needs no connection."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from tpuctl.cluster.hosts import HostEntry
from tpuctl.inputs.errors import TpuctlError


def place(entries: Sequence[HostEntry], count: int) -> list[str]:
    """The host of each of `count` tasks: every host's slots in turn, in list order (mpirun's "by slot")."""
    hosts = [entry.host for entry in entries for _ in range(entry.slots)]
    if count > len(hosts):
        raise TpuctlError(f"{count} process(es) need {count} slots, but the hosts give {len(hosts)}", hint="add hosts, or host:SLOTS")
    return hosts[:count]


@dataclass(frozen=True)
class RemotePaths:
    """Where a launch lives on the hosts.

    `workdir` is the workers' working directory there (the local working
    directory's absolute path unless --remote-dir, or a VM's own folder
    (fresh.vm_workdir), says otherwise; a relative one is under the ssh
    user's home, where every session starts), `script` the
    script as the workers are told it (relative to `workdir` when it sits
    under the local working directory), `sync_source`/`sync_dest` the script's
    folder here and there.
    """

    workdir: str
    script: str
    sync_source: str
    sync_dest: str

    @property
    def where(self) -> str:
        """The workers' directory as a reader takes it (shown)."""
        return shown(self.workdir)

    @classmethod
    def resolve(cls, script: str, remote_dir: str | None, local_cwd: str | None = None) -> RemotePaths:
        cwd = local_cwd or os.getcwd()
        workdir = remote_dir or cwd
        absolute = os.path.abspath(os.path.join(cwd, script))
        relative = os.path.relpath(absolute, cwd)
        inside = not (relative == os.pardir or relative.startswith(os.pardir + os.sep))
        if inside and (not os.path.isabs(script) or remote_dir):
            remote_script = script if not os.path.isabs(script) else relative
        elif remote_dir is None:
            remote_script = absolute
        else:
            remote_script = os.path.basename(absolute)
        dest = posixpath.normpath(posixpath.join(workdir, posixpath.dirname(remote_script)))
        return cls(workdir=workdir, script=remote_script, sync_source=os.path.dirname(absolute), sync_dest=dest)

    def remote_path(self, local: str, local_cwd: str | None = None) -> str:
        """A local path under the working directory, moved to the same place under `workdir`: as a worker (which runs
        in `workdir`) resolves it, so relative where `workdir` is (home-relative, not relative to the workers' cwd)."""
        cwd = local_cwd or os.getcwd()
        relative = os.path.relpath(local, cwd)
        if relative == os.pardir or relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
            return local
        return posixpath.normpath(posixpath.join(self.workdir, relative) if posixpath.isabs(self.workdir) else relative)


def shown(path: str) -> str:
    """A path on the hosts as a reader takes it: a relative one is under the ssh user's home (`~/`)."""
    return path if posixpath.isabs(path) else f"~/{path}"

"""--sync: the script's folder copied to every host before a launch.

rsync over the same ssh (and ControlMaster) where both ends have it; else the
agents' hellos carry a file manifest (wire.manifest, the same code on both
ends) and only the files that differ travel, as a tar on the stdin of a
small remote Python.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tpuctl import reaper
from tpuctl.backends.ssh.client_args import SshOptions
from tpuctl.backends.ssh.fanout import parallel, run_everywhere
from tpuctl.backends.ssh.placement import RemotePaths
from tpuctl.backends.ssh.session import Session
from tpuctl.backends.ssh.wire import manifest
from tpuctl.errors import FAILED, TpuctlError, one_line

SYNC_EXCLUDES = ("__pycache__", ".git")
SYNC_TIMEOUT_S = 600.0  # a whole folder over a slow link; a sync that takes longer is stuck

# Extracts a tar stream from stdin into argv[1]; the sync fallback when rsync is missing.
UNTAR_SOURCE = """import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
    for member in tar:
        if hasattr(tarfile, "data_filter"):
            tar.extract(member, sys.argv[1], filter="data")
        else:
            tar.extract(member, sys.argv[1])
"""


def rsync_command(options: SshOptions, host: str, source: str, dest: str) -> list[str]:
    """rsync over the same ssh (and ControlMaster) as everything else; unchanged files are skipped."""
    excludes = [f"--exclude={name}" for name in SYNC_EXCLUDES]
    # --protect-args: the destination reaches the remote rsync as data, not shell words.
    return ["rsync", "-a", "--protect-args", *excludes, "-e", shlex.join(options.base()), "--", f"{source}/", f"{host}:{dest}/"]


def planned(options: SshOptions, paths: RemotePaths) -> dict[str, object]:
    """The --sync step as a dry run shows it: what is copied from where to where, and the rsync command a
    launch runs for each host (HOST standing for it), built by the same function."""
    return {
        "source": f"{paths.sync_source}/",
        "dest": f"{paths.sync_dest}/",
        "exclude": list(SYNC_EXCLUDES),
        "command": shlex.join(rsync_command(options, "HOST", paths.sync_source, paths.sync_dest)),
        "fallback": "a host without rsync gets the files that differ as a tar over ssh, unpacked by the hosts' Python",
    }


@dataclass(frozen=True)
class FolderSync:
    """Copies `paths.sync_source` to `paths.sync_dest` on each host of the sessions given."""

    options: SshOptions
    paths: RemotePaths
    python: str  # the hosts' interpreter, for the tar fallback

    def run(self, sessions: Sequence[Session], notice: Callable[[str], None]) -> None:
        """Once per host (its first session), all hosts at once; every failed host is named in one error."""
        first: dict[str, Session] = {}
        for session in sessions:
            first.setdefault(session.host, session)
        local_rsync = shutil.which("rsync") is not None
        local = manifest(self.paths.sync_source, SYNC_EXCLUDES)
        results = parallel(lambda s: self._to(s, local_rsync, local), list(first.values()), self.options.fanout)
        failed = [message for message in results if message.startswith("!")]
        if failed:
            raise TpuctlError("; ".join(m[1:] for m in failed), exit_code=FAILED)
        notice(f"synced {self.paths.sync_source} to {self.paths.sync_dest} on {len(first)} host(s): " + ", ".join(results))

    def _to(self, session: Session, local_rsync: bool, local: dict[str, tuple[int, int]]) -> str:
        """One host: what was done, for the notice, or "!" and why it failed."""
        host = session.host
        if local_rsync and session.hello.rsync:
            done = reaper.run(
                rsync_command(self.options, host, self.paths.sync_source, self.paths.sync_dest),
                capture_output=True,
                text=True,
                check=False,
                start_new_session=True,
                timeout=SYNC_TIMEOUT_S,
            )
            if done.returncode != 0:
                return f"!{host}: rsync failed: {one_line(done.stderr, last=True) or done.returncode}"
            return f"{host} (rsync)"
        remote = session.hello.manifest or {}
        changed = [path for path, info in local.items() if info != remote.get(path)]
        if not changed:
            return f"{host} (unchanged)"
        payload = _tar(self.paths.sync_source, changed)
        [result] = run_everywhere(
            [host], [self.python, "-S", "-c", UNTAR_SOURCE, self.paths.sync_dest], self.options, stdin=payload, timeout=SYNC_TIMEOUT_S
        )
        if not result.ok:
            return f"!{host}: copying {len(changed)} file(s) failed: {result.error or one_line(result.output, last=True)}"
        return f"{host} ({len(changed)} file(s))"


def _tar(folder: str, paths: list[str]) -> bytes:
    import tarfile  # only for this fallback: rsync is the usual path
    from io import BytesIO

    data = BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for path in sorted(paths):
            tar.add(os.path.join(folder, path), arcname=path, recursive=False)
    return data.getvalue()

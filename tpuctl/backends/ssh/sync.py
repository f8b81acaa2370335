"""--sync: the files selection.py chose from the script's folder, copied to every host before a launch.

rsync (given the list of files) over the same ssh (and ControlMaster) where both ends have it; else the
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
from typing import Any

from tpuctl.backends.ssh.placement import RemotePaths, shown
from tpuctl.backends.ssh.selection import Selection
from tpuctl.backends.ssh.session import Session
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.safety import reaper
from tpuctl.ssh.client_args import SshOptions
from tpuctl.ssh.fanout import parallel, run_everywhere

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
    """rsync over the same ssh (and ControlMaster) as everything else, sending only the files named on its
    stdin (NUL-separated, relative to `source`: rsync's --files-from); unchanged files are skipped."""
    # --protect-args: the destination reaches the remote rsync as data, not shell words.
    return ["rsync", "-a", "--protect-args", "--files-from=-", "--from0", "-e", shlex.join(options.base()), "--", f"{source}/", f"{host}:{dest}/"]


def file_list(selection: Selection) -> bytes:
    """What rsync reads on its stdin: each chosen path, NUL-terminated."""
    return b"".join(os.fsencode(path) + b"\0" for path, _ in selection.files)


def planned(options: SshOptions, paths: RemotePaths, selection: Selection, hosts: int, limit: int, large: bool) -> dict[str, object]:
    """The --sync step as a dry run shows it: what is copied from where to where (the files, their size, per host
    and in all), and the rsync command a launch runs for each host (HOST standing for it), built by the same function."""
    return {
        "source": f"{paths.sync_source}/",
        "dest": f"{shown(paths.sync_dest)}/",
        **selection.to_json(hosts, limit, large),
        "command": shlex.join(rsync_command(options, "HOST", paths.sync_source, paths.sync_dest)),
        "stdin": "the chosen files' paths, NUL-separated",
        "fallback": "a host without rsync gets the files that differ as a tar over ssh, unpacked by the hosts' Python",
    }


def planned_lines(sync: dict[str, Any]) -> list[str]:
    """A dry run's --sync: from where to where, the summary a launch prints before sending, the largest files,
    what is left out, and the rsync command each host gets."""
    from tpuctl.inputs.parse import format_size

    chooser = "git ls-files" if sync["chooser"] == "git" else "the .gitignore and .tpuctlignore files (not a git checkout)"
    largest = sorted(sync["files"], key=lambda item: (-item[1], item[0]))[:5]
    lines = [
        f"sync: {sync['source']} -> each host's {sync['dest']}, the files chosen by {chooser} (never __pycache__)",
        sync["summary"],
        "sync: largest: " + ", ".join(f"{path} ({format_size(size)})" for path, size in largest),
    ]
    if sync["left_out"]:
        lines.append("sync: left out: " + ", ".join(f"{path} ({why})" for path, why in sync["left_out"]))
    lines.append(f"sync: with: {sync['command']} (the files' paths on its stdin)")
    lines.append(f"  ({sync['fallback']})")
    return lines


@dataclass(frozen=True)
class FolderSync:
    """Copies `paths.sync_source` to `paths.sync_dest` on each host of the sessions given."""

    options: SshOptions
    paths: RemotePaths
    python: str  # the hosts' interpreter, for the tar fallback
    selection: Selection

    def run(self, sessions: Sequence[Session], notice: Callable[[str], None]) -> None:
        """Once per host (its first session), all hosts at once; every failed host is named in one error."""
        first: dict[str, Session] = {}
        for session in sessions:
            first.setdefault(session.host, session)
        local_rsync = shutil.which("rsync") is not None
        local = _manifest(self.selection)
        results = parallel(lambda s: self._to(s, local_rsync, local), list(first.values()), self.options.fanout)
        failed = [message for message in results if message.startswith("!")]
        if failed:
            raise TpuctlError("; ".join(m[1:] for m in failed), exit_code=FAILED)
        notice(f"synced {self.paths.sync_source} to {shown(self.paths.sync_dest)} on {len(first)} host(s): " + ", ".join(results))

    def _to(self, session: Session, local_rsync: bool, local: dict[str, tuple[int, int]]) -> str:
        """One host: what was done, for the notice, or "!" and why it failed."""
        host = session.host
        if local_rsync and session.hello.rsync:
            done = reaper.run(
                rsync_command(self.options, host, self.paths.sync_source, self.paths.sync_dest),
                input=file_list(self.selection),
                capture_output=True,
                check=False,
                start_new_session=True,
                timeout=SYNC_TIMEOUT_S,
            )
            if done.returncode != 0:
                said = one_line(done.stderr.decode(errors="replace"), last=True)
                return f"!{host}: rsync failed: {said or done.returncode}"
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


def _manifest(selection: Selection) -> dict[str, tuple[int, int]]:
    """The chosen files as the hosts' manifest describes theirs (wire.manifest): size and whole-second mtime.
    A link's stat is its target's, as on the host, so an unchanged link is not sent again."""
    found = {}
    for path, _ in selection.files:
        try:
            info = os.stat(os.path.join(selection.folder, path))
        except OSError:
            info = os.lstat(os.path.join(selection.folder, path))  # a dangling link: sent each time, it is a few bytes
        found[path] = (info.st_size, int(info.st_mtime))
    return found


def _tar(folder: str, paths: list[str]) -> bytes:
    import tarfile  # only for this fallback: rsync is the usual path
    from io import BytesIO

    data = BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for path in sorted(paths):
            tar.add(os.path.join(folder, path), arcname=path, recursive=False)
    return data.getvalue()

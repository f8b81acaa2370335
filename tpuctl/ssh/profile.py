"""`tpuctl profile` of an ssh run whose profile dir is on its hosts' own disks (tpuctl.runs.profiling.Hosts).

Each worker writes its capture on its own host, under the profile dir as its host sees it (the launch's model dir,
else its log dir's path there). The files come back by `tar` over ssh, reaching each host as the launch reached it,
into the run's log dir here, where TensorBoard and the verdict read them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuctl.endings import exit_words
from tpuctl.inputs.errors import one_line
from tpuctl.safety import reaper
from tpuctl.ssh.client_args import SSH_FAILED, SshOptions
from tpuctl.ssh.fanout import parallel


def recorded_options(recorded: dict[str, Any] | None) -> SshOptions | None:
    """The ssh options the launch recorded with its workers (profilers.json `connection`); None without."""
    connection = (recorded or {}).get("connection")
    if not isinstance(connection, dict):
        return None
    return SshOptions(
        user=connection.get("user"),
        key=connection.get("key"),
        options=tuple(connection.get("options", ())),
        config=connection.get("config"),
        fanout=connection.get("fanout", 1),
    )


@dataclass(frozen=True)
class SshHosts:
    """The run's hosts, reached as the launch reached them (the same --ssh-* options)."""

    options: SshOptions

    def fetch(self, files: dict[str, tuple[str, str]], into: Path, timeout: float) -> dict[str, str]:
        """Each worker's file (worker -> (its ssh host, its path there)) copied into `into`: worker -> why its did not come."""
        places: dict[tuple[str, str], dict[str, str]] = {}  # (host, session folder there) -> file name -> worker
        for worker, (host, path) in files.items():
            folder, _, name = path.rpartition("/")
            places.setdefault((host, folder), {})[name] = worker
        lost: dict[str, str] = {}
        done = parallel(lambda place: self._fetch(place[0], place[1], places[place], into, timeout), list(places), self.options.fanout)
        for place, why in zip(places, done, strict=True):
            if why is not None:
                lost.update(dict.fromkeys(places[place].values(), why))
        return lost

    def _fetch(self, host: str, session: str, names: dict[str, str], into: Path, timeout: float) -> str | None:
        """One host's files of the session, untarred into `into` (each written aside, then renamed: the hosts may be this
        machine, with the very files being read); why they did not come, else None. A file missing there is left out
        by tar and named by the caller."""
        into.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=into) as stream:
            try:
                done = reaper.run(
                    self.options.command(host, ["tar", "-C", session, "-cf", "-", *sorted(names)]),
                    stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.PIPE, timeout=timeout, check=False, start_new_session=True,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                return f"copying it from {host} took over {timeout:.0f}s"
            said = one_line(done.stderr.decode("utf-8", "replace"), last=True) or exit_words(done.returncode)
            if not stream.tell():  # no file of the session there: ssh's failure, else for the capture's reasons
                return f"cannot copy it from {host}: {said}" if done.returncode == SSH_FAILED else None
            stream.seek(0)
            try:
                self._untar(stream, names, into)
            except (tarfile.TarError, OSError) as err:
                return f"cannot copy it from {host}: {err}"
        return None

    @staticmethod
    def _untar(stream: Any, names: dict[str, str], into: Path) -> None:
        """The regular files of `names` (plain names, no folder) from a tar stream into `into`; anything else in it is ignored."""
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                wanted = member.isfile() and member.name in names and "/" not in member.name and member.name not in (".", "..")
                source = archive.extractfile(member) if wanted else None
                if source is None:
                    continue
                fd, aside = tempfile.mkstemp(dir=into, prefix=".tpuctl-")
                try:
                    with os.fdopen(fd, "wb") as copy:
                        shutil.copyfileobj(source, copy, 1 << 20)
                    os.replace(aside, into / member.name)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(aside)
                    raise

"""`tpuctl profile` of an ssh run whose profile dir is on its hosts' own disks (tpuctl.runs.profiling.Hosts).

Each worker's profiler server writes its file on its own host, at the path the capture passes, and
listens on its host's interfaces, reachable where the other hosts reach the worker but not always
from here (a TPU slice's internal addresses). So the capture runs on the run's first host, in the
workers' interpreter with the runtime the launch shipped there (its cache folder first on
PYTHONPATH, as the agent puts it), and each host's files of the session come back by `tar` over ssh.
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

from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.safety import reaper
from tpuctl.ssh.client_args import SSH_FAILED, SshOptions
from tpuctl.ssh.fanout import HostResult, parallel, run_everywhere
from tpuctl.ssh.remote_source import cache_source, install_source
from tpuctl.ssh.shipment import shipment

NO_RUNTIME = 64  # the starter's status when the host's cache lacks this tpuctl's runtime (a launch by another tpuctl)
INSTALL_TIMEOUT_S = 120.0

# After cache.py's text: find this runtime in the host's cache, then become the capture (no -S: it needs TensorFlow).
_STARTER = """import sys
problem = runtime_problem(sys.argv[1])
if problem:
    sys.stdout.write("tpuctl: error: the host's copy of tpuctl's runtime: " + problem.lstrip("!") + chr(10))
    sys.exit(3 if problem.startswith("!") else 64)
folder = os.path.join(runtime_root(), sys.argv[1])
env = dict(os.environ)
env["PYTHONPATH"] = folder + ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else folder
env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.execve(sys.executable, [sys.executable, "-m", "tpuctl.runtime.profile_capture", sys.argv[2]], env)
"""


def recorded_options(recorded: dict[str, Any] | None) -> SshOptions | None:
    """The ssh options the launch recorded with its profiler servers (profilers.json `connection`); None without."""
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


def _first(servers: dict[str, Any]) -> tuple[str, str]:
    """The host the capture runs on (the first worker's) and the workers' interpreter there."""
    first = servers["workers"][0]
    return str(first["ssh"]), str(first["python"])


@dataclass(frozen=True)
class SshHosts:
    """The run's hosts, reached as the launch reached them (the same --ssh-* options)."""

    options: SshOptions

    def capture(self, servers: dict[str, Any], request: str, timeout: float) -> tuple[int, str]:
        host, python = _first(servers)
        argv = [python, "-S", "-c", cache_source() + _STARTER, shipment().digest, request]
        result = self._run(host, argv, timeout)
        if result.exit_code == NO_RUNTIME:
            self._install(host, python)
            result = self._run(host, argv, timeout)
        return result.exit_code, result.output

    def fetch(self, servers: dict[str, Any], session: str, into: Path, timeout: float) -> dict[str, str]:
        names: dict[str, dict[str, str]] = {}  # host -> file name -> worker
        for worker in servers["workers"]:
            names.setdefault(str(worker["ssh"]), {})[f"{worker['host']}_{worker['port']}.xplane.pb"] = str(worker["worker"])
        lost: dict[str, str] = {}
        for host, why in zip(names, parallel(lambda host: self._fetch(host, session, names[host], into, timeout), names, self.options.fanout), strict=True):
            if why is not None:
                lost.update(dict.fromkeys(names[host].values(), why))
        return lost

    def _run(self, host: str, argv: list[str], timeout: float) -> HostResult:
        [result] = run_everywhere([host], argv, self.options, timeout=timeout)
        if result.error is not None:
            raise TpuctlError(f"cannot run the capture on {host}: {result.error}", hint="pass the --ssh-* options the launch took", exit_code=FAILED)
        return result

    def _install(self, host: str, python: str) -> None:
        """Ship this tpuctl's runtime to a host that lacks it, as a launch would (backend.SshStarter._install_runtime)."""
        runtime = shipment()
        argv = [python, "-S", "-c", install_source(), runtime.digest]
        [result] = run_everywhere([host], argv, self.options, stdin=runtime.payload, timeout=INSTALL_TIMEOUT_S)
        if not result.ok:
            said = result.error or one_line(result.output, last=True) or f"exit status {result.exit_code}"
            raise TpuctlError(f"{host}: cannot install tpuctl's runtime for the capture: {said}", exit_code=FAILED)

    def _fetch(self, host: str, session: str, names: dict[str, str], into: Path, timeout: float) -> str | None:
        """One host's files of the session, untarred into `into` (each written aside, then renamed: the hosts may be this
        machine, with the very files being read); why they did not come, else None. A file a worker never wrote is
        left out by tar and named by the caller."""
        into.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=into) as stream:
            try:
                done = reaper.run(
                    self.options.command(host, ["tar", "-C", session, "-cf", "-", *sorted(names)]),
                    stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.PIPE, timeout=timeout, check=False, start_new_session=True,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                return f"copying it from {host} took over {timeout:.0f}s"
            said = one_line(done.stderr.decode("utf-8", "replace"), last=True) or f"exit status {done.returncode}"
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

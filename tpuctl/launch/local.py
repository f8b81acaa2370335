"""The local backend (the default): every worker a process group on this machine.

Each worker gets a socketpair end as its control channel. The worker says
"ready" on it once its strategy is built. Its runtime forks first thing: the
parent stays as the worker's reaper (tpuctl/reaper.py), which kills everything
the worker started, in its group or not, when the channel reaches EOF (tpuctl
closed it, or died, even by SIGKILL) or the worker's main process ends. That
is how no worker, nor anything it started, outlives its launcher.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from tpuctl import worker_contract as contract
from tpuctl.errors import FAILED, TpuctlError
from tpuctl.launch import bindshim, ports, rehearsal_report
from tpuctl.launch.option_fields import option
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.plan import Job, Plan, WorkerSpec, build_plan
from tpuctl.launch.runner import RunContext
from tpuctl.launch.runtime_path import put_tpuctl_on_path


class LocalHandle:
    def __init__(self, spec: WorkerSpec, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.spec = spec
        self.proc = proc
        self._control = control

    @property
    def output(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def messages(self) -> Iterator[str]:
        """Lines the worker's runtime sends on its control channel, until EOF."""
        with self._control.makefile("rb") as stream:
            for raw in stream:
                yield raw.decode("utf-8", "replace").strip()

    def wait(self) -> int:
        return self.proc.wait()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def request_stacks(self) -> None:
        """Ask the worker's reaper for its stacks; they come back among `messages()` as `stacks HEX`."""
        with contextlib.suppress(OSError):
            self._control.send(b"stacks\n")

    def close(self) -> None:
        """Close the control channel: the worker's reaper then kills all the worker started."""
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        self._control.close()


class LocalBackend:
    name = "local"
    host = "localhost"

    def __init__(self, run_dir: Path, shim: Path | None = None) -> None:
        self._run_dir = run_dir
        self._shim = shim  # the bind shim that keeps each worker's server on loopback (None: --expose, or unavailable)
        self._held: ports.PortReservation | None = None

    def reserve(self, count: int) -> list[str]:
        try:
            self._held = ports.reserve(count)
        except OSError as err:
            raise TpuctlError(f"cannot reserve {count} local ports: {err}", exit_code=FAILED) from None
        return self._held.addresses

    def start(self, spec: WorkerSpec) -> LocalHandle:
        ours, theirs = socket.socketpair()
        fds = [theirs.fileno()]
        env = {**os.environ, **spec.env, contract.CONTROL_FD: str(theirs.fileno())}
        reserved = self._reserved_socket(spec.address)
        if reserved is not None:
            fds.append(reserved.fileno())
            env[contract.RESERVED_FD] = str(reserved.fileno())
        if self._shim is not None and spec.address is not None:
            bindshim.worker_env(env, self._shim, int(spec.address.rsplit(":", 1)[1]))
        if not _same_interpreter(spec.argv[0]):
            put_tpuctl_on_path(env, self._run_dir / "pythonpath")
        try:
            proc = subprocess.Popen(
                spec.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=fds,
            )
        except OSError as err:
            ours.close()
            raise TpuctlError(f"cannot start {spec.name} with {spec.argv[0]}: {err.strerror}", exit_code=FAILED) from None
        finally:
            theirs.close()
        return LocalHandle(spec, proc, ours)

    def started(self) -> None:
        """Every worker holds its port now; drop the launcher's copies."""
        if self._held is not None:
            self._held.close_sockets()

    def release(self) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None

    def _reserved_socket(self, address: str | None) -> socket.socket | None:
        if self._held is None or address is None:
            return None
        for sock, held_address in zip(self._held.sockets, self._held.addresses, strict=True):
            if held_address == address:
                return sock
        return None


def _same_interpreter(python: str) -> bool:
    """True only for this very interpreter path; symlinks are not resolved on purpose,
    because a venv's python resolves to its base interpreter, which lacks the venv's packages."""
    found = shutil.which(python)
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


@dataclass(frozen=True)
class Options:
    """The local backend's one option of its own: whether its workers' servers may listen beyond loopback."""

    expose: bool = option(
        "--expose",
        is_flag=True,
        default=False,
        help="Let local workers' TensorFlow servers listen on every interface, as TensorFlow does by default "
        "(tpuctl keeps them on 127.0.0.1; docs/security.md).",
    )


class LocalRunner:
    name = "local"

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        if not os.path.isfile(job.script):
            raise TpuctlError(f"script not found: {job.script}")
        if job.python and shutil.which(job.python) is None:
            raise TpuctlError(f"--python {job.python}: no such interpreter, or not executable")
        model_dir = job.model_dir
        if model_dir and "://" not in model_dir:
            model_dir = os.path.abspath(model_dir)
        return replace(job, python=job.python or sys.executable, model_dir=model_dir)

    def dry_run(self, job: Job, run_id: str) -> Plan:
        """The plan with real free ports, each bound and released in turn (a launch picks afresh).

        A dry run holds nothing: reserving every port at once took two descriptors per
        worker, and `--dry-run --workers 1001` died of EMFILE under a 1024 limit.
        """
        return build_plan(job, _free_addresses(job.processes), run_id=run_id, attempt=1)

    def run(self, job: Job, context: RunContext) -> Outcome:
        from tpuctl.launch.process_runner import run_supervised

        context.notice(f"launching {job.workers} worker(s) of {job.script}; logs: {context.log_dir}")
        shim = None if self.options.expose else _loopback_shim(context.notice)
        if not job.rehearse:
            return run_supervised(LocalBackend(context.log_dir, shim), job, context)
        report = context.log_dir / rehearsal_report.FILE_NAME  # LOG_DIR is this launch's alone: no earlier report
        job = replace(job, env=(*job.env, (contract.REHEARSAL_REPORT, str(report))))
        outcome = run_supervised(LocalBackend(context.log_dir, shim), job, context)
        outcome.rehearsal = rehearsal_report.read(report)
        if outcome.rehearsal is None and outcome.exit_code == 0:
            context.notice(
                f"the rehearsal wrote no report ({report} is missing or unreadable): nothing was checked; "
                "a script that leaves through os._exit() skips the report, see the worker's log"
            )
        if outcome.rehearsal is not None and outcome.exit_code == 0 and rehearsal_report.problems(outcome.rehearsal):
            outcome.exit_code = FAILED
        failure = outcome.failure
        if outcome.rehearsal is not None and failure is not None and failure.cause is not None:
            failure.cause = rehearsal_report.explained(failure.cause, outcome.rehearsal)
        return outcome


def _loopback_shim(notice: Callable[[str], None]) -> Path | None:
    """The bind shim, or None after one warning line where it cannot apply (docs/security.md)."""
    try:
        return bindshim.library()
    except bindshim.Unavailable as why:
        notice(bindshim.warning(str(why)))
        return None


def _free_addresses(count: int) -> list[str]:
    """`count` distinct loopback ports that were free a moment ago, one socket open at a time.

    Ports the kernel offers twice are drawn again; on a machine too busy to offer enough,
    the rest read `<port>`, as an ssh dry run's do: a dry run never fails for want of ports.
    """
    found: dict[int, None] = {}
    for _ in range(4 * count + 100):
        if len(found) == count:
            break
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((ports.LOOPBACK, 0))
            found[sock.getsockname()[1]] = None
    return [f"{ports.LOOPBACK}:{port}" for port in found] + [f"{ports.LOOPBACK}:<port>"] * (count - len(found))


def runner(options: Options) -> LocalRunner:
    return LocalRunner(options)

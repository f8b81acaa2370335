"""The local backend's workers: each one a process group on this machine, started and signalled here.

Each worker gets a socketpair end as its control channel. The worker says
"ready" on it once its strategy is built. Its runtime forks first thing: the
parent stays as the worker's reaper (tpuctl/safety/reaper.py), which kills everything
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
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from tpuctl.backends.local import bindshim
from tpuctl.cluster import worker_contract as contract
from tpuctl.devices.gpus import Share
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.lines import bounded_lines
from tpuctl.launch.console import logs
from tpuctl.launch.process import ports
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Handle, Starter
from tpuctl.runtime_path import put_tpuctl_on_path
from tpuctl.safety import stack_dump


class LocalHandle(Handle):
    can_give_stacks = True

    def __init__(self, spec: WorkerSpec, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        assert proc.stdout is not None
        self.spec = spec
        self.proc = proc
        self.output = logs.Pieces(proc.stdout)
        self._control = control

    def messages(self) -> Iterator[str | None]:
        """Lines the worker's runtime sends on its control channel, until EOF; None for one longer than any message
        (stack_dump.MESSAGE_LIMIT), dropped as it is read: the script can write to the channel too.

        A reset is an end too: a reaper that exits with a stacks request still unread resets the channel."""
        with self._control.makefile("rb", buffering=0) as stream, contextlib.suppress(ConnectionError):
            for raw in bounded_lines(stream.read, stack_dump.MESSAGE_LIMIT):
                yield None if raw is None else raw.decode("utf-8", "replace").strip()

    def wait(self) -> int:
        return self.proc.wait()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def request_stacks(self) -> None:
        """Ask the worker's reaper for its stacks; they come back among `messages()` as `stacks HEX`."""
        with contextlib.suppress(OSError):
            self._control.send(b"stacks\n")

    def request_profile(self, session: str, milliseconds: int) -> bool:
        """Ask the worker's reaper for a capture; its answer comes back among `messages()` as `profile {json}`."""
        try:
            self._control.send(f"profile {session} {milliseconds}\n".encode())
        except OSError:
            return False
        return True

    def process_group(self) -> int:
        """The worker's own group: it was started in a session of its own, so its pid."""
        return self.proc.pid

    def close(self) -> None:
        """Close the control channel: the worker's reaper then kills all the worker started."""
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        self._control.close()


class LocalStarter(Starter):
    name = "local"
    host = "localhost"

    def __init__(self, run_dir: Path, shim: Path | None = None, *, profiler: bool = False, gpus: Share | None = None) -> None:
        self._run_dir = run_dir
        self._gpus = gpus  # each worker's CUDA_VISIBLE_DEVICES, decided once for the whole run (LocalRunner.prepare)
        self._shim = shim  # the bind shim that keeps each worker's server on loopback (None: --expose, or unavailable)
        self._profiler = profiler  # a second port per worker, for its profiler server (--profiler-server)
        self._held: ports.PortReservation | None = None
        self._profiler_ports: dict[str, int] = {}  # a worker's TensorFlow address -> its profiler server's port

    def gpus(self) -> Share | None:
        return self._gpus

    def reserve(self, count: int) -> list[str]:
        wanted = 2 * count if self._profiler else count
        try:
            self._held = ports.reserve(wanted)
        except OSError as err:
            raise TpuctlError(f"cannot reserve {wanted} local ports: {err}", exit_code=FAILED) from None
        addresses = self._held.addresses[:count]
        self._profiler_ports = dict(zip(addresses, self._held.ports[count:], strict=False))
        return addresses

    def start(self, spec: WorkerSpec) -> LocalHandle:
        ours, theirs = socket.socketpair()
        fds = [theirs.fileno()]
        # TF_CONFIG is the plan's or none (one worker gets none, as `python SCRIPT`), never one this shell exported.
        inherited = {name: value for name, value in os.environ.items() if name != "TF_CONFIG"}
        env = {**inherited, **spec.env, contract.CONTROL_FD: str(theirs.fileno())}
        reserved = self._reserved_socket(spec.address)
        if reserved is not None:
            fds.append(reserved.fileno())
            env[contract.RESERVED_FD] = str(reserved.fileno())
        loopback = [] if spec.address is None else [int(spec.address.rsplit(":", 1)[1])]
        profiler = self._profiler_ports.get(spec.address or "")
        held = None if profiler is None else self._reserved_socket(f"{ports.LOOPBACK}:{profiler}")
        if profiler is not None and held is not None:
            fds.append(held.fileno())
            spec = replace(spec, env={**spec.env, contract.PROFILER_PORT: str(profiler)})  # the attempt records it from the spec
            env[contract.PROFILER_PORT] = str(profiler)
            env[contract.PROFILER_FD] = str(held.fileno())
            loopback.append(profiler)
        if self._shim is not None and loopback:
            bindshim.worker_env(env, self._shim, *loopback)
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

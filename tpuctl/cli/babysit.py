"""`tpuctl babysit`: keep a (spot) TPU VM alive and a command running on it.

Spot and preemptible nodes are taken away without notice; the service first
marks them PREEMPTED, later deletes them. The babysitter notices either,
recreates the node from its saved spec and runs the command again — a
`tpuctl launch` with BackupAndRestore then resumes from its last checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import TYPE_CHECKING

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import StatusLine
from tpuctl.cloud.tpu import TpuApi
from tpuctl.errors import FAILED, TpuctlError

if TYPE_CHECKING:
    from tpuctl.cloud.nodespec import NodeSpec

STOP_GRACE_S = 10.0


def _note(message: str) -> None:
    click.echo(f"babysit: {message}", err=True)


class Command:
    """The user's command in its own process group, so stopping it stops everything it started."""

    def __init__(self, argv: tuple[str, ...]) -> None:
        try:
            self.process = subprocess.Popen(argv, start_new_session=True)
        except OSError as err:
            raise TpuctlError(f"cannot run {argv[0]!r}: {err.strerror}", exit_code=FAILED) from None

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self) -> None:
        """SIGINT first (a launch then stops its workers cleanly), SIGKILL after a grace period."""
        for sig, grace in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader may be gone while children it started linger in the group.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@click.command("babysit")
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@project_options
@zone_option
@click.option("--interval", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds between checks of the node.")
@click.option("--max-recreates", type=click.IntRange(min=0), default=10, show_default=True, help="Give up after this many recreations.")
def babysit(
    name: str,
    command: tuple[str, ...],
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    interval: float,
    max_recreates: int,
) -> None:
    """Watch TPU VM NAME; when it is PREEMPTED, TERMINATED or gone, recreate it and rerun COMMAND.

    Put COMMAND after `--`. It runs on this machine, first once the node is
    READY, then again after every recreation. Babysitting ends with the
    command's exit status when it ends on a healthy node, or on Ctrl-C.
    Without a command, it watches until Ctrl-C.
    """
    from tpuctl.cloud import nodespec

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    spec = nodespec.load_saved(resolved.project, resolved.zone, name, "babysit")
    api = tpu_api(resolved)
    sitter = _Sitter(api, spec, command, interval, max_recreates)
    try:
        code = sitter.run()
    except KeyboardInterrupt:
        if sitter.running is not None:
            sitter.running.stop()
        _note("interrupted")
        raise SystemExit(130) from None
    raise SystemExit(code)


class _Sitter:
    def __init__(self, api: TpuApi, spec: NodeSpec, command: tuple[str, ...], interval: float, max_recreates: int) -> None:
        self.api, self.spec, self.command = api, spec, command
        self.interval, self.max_recreates = interval, max_recreates
        self.recreated = 0
        self.running: Command | None = None

    def lost(self) -> str | None:
        """Why the node is unusable (its state, or 'gone'), None while it lives."""
        from tpuctl.cloud.lifecycle import LOST_STATES

        node = self.api.get_node(self.spec.zone, self.spec.name)
        if node is None:
            return "gone"
        return node.state.name if node.state.name in LOST_STATES else None

    def bring_back(self, reason: str) -> None:
        from tpuctl.cloud import lifecycle

        if self.recreated >= self.max_recreates:
            raise TpuctlError(f"{self.spec.name} is {reason} again after {self.recreated} recreations; giving up", exit_code=FAILED)
        self.recreated += 1
        _note(f"{self.spec.name} is {reason}; recreating it ({self.recreated}/{self.max_recreates})")
        with StatusLine(f"recreating {self.spec.name}") as progress:
            lifecycle.recreate(self.api, self.spec, progress)
        _note(f"{self.spec.name} is READY again")

    def run(self) -> int:
        from tpuctl.cloud import lifecycle

        reason = self.lost()
        if reason:
            self.bring_back(reason)
        else:
            with StatusLine(f"waiting for {self.spec.name}") as progress:
                lifecycle.wait_ready(self.api, self.spec, None, progress)
        _note(f"watching {self.spec.name} in {self.spec.zone} every {self.interval:g}s")
        while True:
            if self.command and self.running is None:
                _note("running " + " ".join(self.command))
                self.running = Command(self.command)
            code = self._sleep_watching()
            if code == 0:
                _note("the command finished")
                return 0
            reason = self.lost()
            if reason:
                if self.running is not None:
                    _note(f"{self.spec.name} is {reason}; stopping the command")
                    self.running.stop()
                    self.running = None
                self.bring_back(reason)
                continue
            if code is not None:
                _note(f"the command failed with status {code} on a healthy node")
                return code

    def _sleep_watching(self) -> int | None:
        """Wait one interval, returning early with the command's status if it ends."""
        deadline = time.monotonic() + self.interval
        while time.monotonic() < deadline:
            if self.running is not None and (code := self.running.poll()) is not None:
                self.running = None
                return code
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return None

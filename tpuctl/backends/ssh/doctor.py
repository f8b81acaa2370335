"""`tpuctl doctor --hosts/--hostfile/--tpu`: the probe on every worker host, over the launch's own ssh path.

The hosts are found as a launch finds them (SshRunner: --hosts, --hostfile, or every worker of a TPU
slice from the TPU API) and reached with the same options, so what doctor says of a host is what a
launch will meet there. The probe's source goes on stdin: a host needs nothing of tpuctl.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tpuctl.backends.ssh.runner import Options, SshRunner, TpuSlice
from tpuctl.doctor.across import HostAnswer
from tpuctl.doctor.facts import parse
from tpuctl.doctor.local import Request, remote_argv, source
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.ssh.fanout import run_everywhere

# ssh's own connection and start-up, beyond the probe's limit.
SSH_ALLOWANCE_S = 30.0


@dataclass(frozen=True)
class Hosts:
    """Where the checks ran: the hosts' labels and answers, and the TPU's runtime image when the API told it."""

    answers: list[HostAnswer]
    runtime_version: str | None
    script_dir: str | None


def _planned(options: Options, request: Request, script: str | None) -> tuple[SshRunner, Request, str | None]:
    """The hosts as a launch finds them, and the request with the script's folder (as the workers will look for it)."""
    from tpuctl.backends.ssh.fresh import made_by_tpuctl, remote_dir
    from tpuctl.backends.ssh.placement import RemotePaths

    runner = SshRunner(options)
    if script is None:
        return runner, request, None
    if not script.strip():
        raise TpuctlError("SCRIPT is empty")
    fresh = made_by_tpuctl(None, runner.slice.node if isinstance(runner.slice, TpuSlice) else None)  # doctor takes --tpu, never --new-tpu
    script_dir = RemotePaths.resolve(script, remote_dir(options.remote_dir, fresh)).sync_dest
    return runner, Request(request.workers, request.deadline, request.import_tensorflow, (*request.paths, script_dir)), script_dir


def plan_hosts(options: Options, python: str, request: Request, script: str | None) -> list[str]:
    """`doctor --dry-run`: each host's ssh command, as the run builds it (the probe's source goes on its stdin)."""
    from tpuctl.ssh.fanout import marked

    runner, request, _ = _planned(options, request, script)
    argv = marked(remote_argv(python, request), "<marker>")
    return [f"{entry.host}: {shlex.join(runner.ssh.command(entry.host, argv))}" for entry in runner.entries]


def probe_hosts(options: Options, python: str, request: Request, script: str | None) -> Hosts:
    """Every host's facts, in host order; a host that cannot be reached, or whose probe failed, says why."""
    runner, request, script_dir = _planned(options, request, script)
    hosts = [entry.host for entry in runner.entries]
    results = run_everywhere(hosts, remote_argv(python, request), runner.ssh, timeout=request.limit + SSH_ALLOWANCE_S, stdin=source())
    answers = []
    for result in results:
        if result.error:
            answers.append(HostAnswer(result.host, None, result.error))
            continue
        try:
            answers.append(HostAnswer(result.host, parse(result.output, result.host)))
        except TpuctlError as err:
            said = one_line(result.output, 160, last=True) if result.exit_code else err.message
            answers.append(HostAnswer(result.host, None, said or exit_words(result.exit_code)))
    if all(answer.facts is None for answer in answers):
        first = answers[0]
        raise TpuctlError(
            f"no host answered: {first.host}: {one_line(first.error or '?', 200)}",
            hint="check that ssh HOST works and that --python exists there",
            exit_code=FAILED,
        )
    node = runner.slice.node if isinstance(runner.slice, TpuSlice) else None  # doctor takes --tpu, never --new-tpu
    return Hosts(answers, node.runtime_version if node is not None else None, script_dir)

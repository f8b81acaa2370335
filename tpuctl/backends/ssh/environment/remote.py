"""The hosts' program for environments as it is sent, and its answers as the launcher reads them.

The program is the transport's cache.py (where tpuctl's cache is on the host, and whose folders it may use), then
host_env.py, host_copy.py and host_build.py (whose last lines run the command), run as `python -S -c SOURCE COMMAND
ARGS` (as the runtime's installer is): a host needs nothing of tpuctl, and nothing of it lands on a host that does not
use --requirements or --setup.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tpuctl.backends.ssh.environment.host_env import REPLY
from tpuctl.ssh.remote_source import shipped_lines

ANSWER_LIMIT = 32 << 20  # an answer is a lock and a log's tail: a few hundred KiB at most


@functools.cache
def source() -> str:
    """cache.py, host_env.py, host_copy.py, host_build.py, as they are sent (no comments, one space a level)."""
    here = Path(__file__).parent
    modules = [here.parents[2] / "ssh" / "cache.py", here / "host_env.py", here / "host_copy.py", here / "host_build.py"]
    return "\n".join(line for module in modules for line in shipped_lines(module)) + "\n"


def command(python: str, name: str, *args: str) -> list[str]:
    """The remote argv of one of the program's commands, run by the hosts' Python with its site left out."""
    return [python, "-S", "-c", source(), name, *args]


def header(fields: dict[str, Any]) -> bytes:
    """A command's request: one JSON line on its stdin (what may hold a credential never goes on a command line)."""
    return json.dumps(fields, sort_keys=True).encode() + b"\n"


class NoAnswer(Exception):
    """A command that ran gave no answer tpuctl's program writes: the output's last line says why."""


def answer(output: str) -> dict[str, Any]:
    """The command's answer: its last REPLY line's JSON. Raises NoAnswer where there is none (the host's Python
    could not run it, ssh failed), or where what follows REPLY is not one."""
    for line in reversed(output[-ANSWER_LIMIT:].splitlines()):
        if line.startswith(REPLY):
            try:
                found = json.loads(line[len(REPLY) :])
            except ValueError:
                break
            if isinstance(found, dict):
                return found
            break
    raise NoAnswer(output)

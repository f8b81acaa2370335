"""Every worker's stacks from a running launch: on SIGQUIT, `tpuctl stacks`, and a hang (docs/hangs.md).

The Supervisor asks each worker's reaper through its control channel (over ssh,
through the agent); the answers come back among the worker's messages as
`stacks HEX` (tpuctl/safety/stack_dump.py takes them). Each capture is kept in the
attempt's log folder, one file per worker plus the view, and the newest view
also as LOG_DIR/stacks.txt, where `tpuctl stacks` reads it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

from tpuctl.inputs.private_files import write_private
from tpuctl.inputs.terminal import printable
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Handle
from tpuctl.runs.folder import FULL_STACKS, RunFolder
from tpuctl.safety import stack_view

ANSWER_S = 15.0  # py-spy may take 10 s on a busy host; faulthandler answers in under a second
PREFIX = "stacks"


class StackCollector:
    """Matches the workers' `stacks` messages (read on their message threads) to one request at a time."""

    def __init__(self) -> None:
        self._answers: dict[int, str] = {}
        self._changed = threading.Condition()

    def offer(self, position: int, message: str) -> bool:
        """Keep the message if it is a stacks answer; False for any other message."""
        if not message.startswith(PREFIX):
            return False
        try:
            text = bytes.fromhex(message[len(PREFIX) :].strip()).decode("utf-8", "replace")
        except ValueError:
            text = ""
        with self._changed:
            self._answers[position] = text
            self._changed.notify_all()
        return True

    def collect(self, handles: Sequence[Handle], live: set[int], wait_s: float = ANSWER_S) -> list[str | None]:
        """Ask every live worker that can answer; each one's dump, or None where none came."""
        with self._changed:
            self._answers.clear()
        asked = [p for p in sorted(live) if handles[p].can_give_stacks]
        for position in asked:
            handles[position].request_stacks()
        deadline = time.monotonic() + wait_s
        with self._changed:
            while not all(p in self._answers for p in asked):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return [self._answers.get(p) or None for p in range(len(handles))]


def script_dir(spec: WorkerSpec) -> str:
    """The folder of the script as the worker runs it (a remote path for ssh): its own code lives there."""
    argv = list(spec.argv)
    if "tpuctl.runtime" in argv[:-1]:
        return os.path.dirname(argv[argv.index("tpuctl.runtime") + 1])
    return ""


def record(
    specs: Sequence[WorkerSpec], dumps: list[str | None], run: RunFolder, attempt: int
) -> tuple[list[str], stack_view.Comparison]:
    """Keep the dumps and the view; (the view's lines, the comparison it was drawn from), so that the
    hang's cause line reads the same comparison.

    Failing to write costs the files, never the view on the console. The view quotes the dumps (file and function
    names), so its lines are made safe for a terminal; the dumps are kept as they came."""
    named = {spec.name: dump for spec, dump in zip(specs, dumps, strict=True)}
    own = stack_view.own_code_predicate(script_dir(specs[0])) if specs else (lambda path: False)
    comparison = stack_view.compare(named, own)
    view = [printable(line) for line in stack_view.render(named, own, comparison)]  # a dump's paths and names are the worker's
    try:
        folder = run.next_stacks_dir(attempt)
        for name, dump in named.items():
            write_private(folder / f"{name.replace(':', '-')}.txt", dump or "(no answer)\n")
        text = "\n".join([*view, f"{FULL_STACKS}{folder}"]) + "\n"
        write_private(folder / "view.txt", text)
        write_private(run.stacks_view, text)
        view = [*view, f"{FULL_STACKS}{folder}"]
    except OSError as err:
        view = [*view, f"(cannot keep the stacks in {run.attempt_dir(attempt)}: {err.strerror or err})"]
    return view, comparison


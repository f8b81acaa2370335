"""Where a Python traceback says what was raised: the `SomeError: message` line.

The console marks that line as it passes (logs.py) and the cause line quotes it
(tpuctl/launch/cause.py): both read it the same way, from here.
"""

from __future__ import annotations

import re

NAME_ENDS = ("Error", "Exception", "Exit", "Interrupt", "Iteration", "Warning", "Failure", "Fault", "Timeout")
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_NAME = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*")


def is_exception_line(line: str) -> bool:
    """`SomeError: message` at the start of a line: where a traceback ends and TF's error text begins."""
    if not line or line[0].isspace():
        return False
    name, _ = split_exception(ANSI.sub("", line) if "\x1b" in line else line)
    return name is not None and name.endswith(NAME_ENDS)


def split_exception(line: str) -> tuple[str | None, str]:
    head, sep, message = line.partition(": ")
    head = head if sep else line.removesuffix(":")
    if len(head) > 200 or not _NAME.fullmatch(head):  # bounded: a line may be megabytes
        return None, ""
    return head.rsplit(".", 1)[-1], message.strip()

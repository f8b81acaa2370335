"""The one error type the CLI turns into a single line and an exit status."""

from __future__ import annotations

USAGE = 2
FAILED = 1


class TpuctlError(Exception):
    """An expected failure: bad input (exit 2) or a failed operation (exit 1).

    Anything else that escapes is a bug and keeps its traceback under --debug.
    """

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"

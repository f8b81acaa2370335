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


def one_line(text: str, limit: int = 240, *, first: bool = False, last: bool = False) -> str:
    """Untrusted, possibly multi-line text (an API reply, a remote command's stderr) fit
    for a one-line message: whitespace collapsed, control characters escaped so they cannot
    move the terminal's cursor, long text cut. `first` keeps only the first non-blank line,
    where the rest is detail (TensorFlow's errors, with their stack of op names); `last`
    only the last, where the lines before it are noise (ssh's warnings before its error)."""
    if first or last:
        lines = [line for line in text.splitlines() if line.strip()]
        text = (lines[0] if first else lines[-1]) if lines else ""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"

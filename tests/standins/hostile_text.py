"""Text a terminal would act on (issue 46): escape sequences of each kind — a screen clear (CSI), a window title and a
hyperlink (OSC, OSC 8), their one-character C1 forms, BEL, backspace, carriage return, DEL, a right-to-left override —
and the check that printed text holds none of them."""

from __future__ import annotations

CLEAR, TITLE, LINK = "\x1b[2J\x1b[H", "\x1b]0;owned\x07", "\x1b]8;;https://x.invalid/\x1b\\click\x1b]8;;\x1b\\"
C1 = "\x9b2J\x9d0;owned\x9c"
NASTY = f"n{CLEAR}{TITLE}{LINK}{C1}\x07\x08\r\x7f\u202e\x00e"


def leaks(text: str) -> list[str]:
    """The characters of `text` a terminal would act on (a newline ends a line: it is not one of them)."""
    return sorted({repr(c) for c in text if not c.isprintable() and c != "\n"})

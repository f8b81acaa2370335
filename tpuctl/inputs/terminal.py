"""Text from outside tpuctl, safe to print on a terminal: the one rule every print of a file's, a record's, a remote's
or a name's text goes through.

A terminal acts on what it is sent. ESC opens escape sequences: CSI ones clear the screen (`ESC [2J`) or move the
cursor, OSC ones set the window title (`ESC ]0;TEXT BEL`) or make a hyperlink whose text hides its target (OSC 8,
`ESC ]8;;URL ESC \\`), and they reach the terminal through a pipe into `less -R` or a log viewed later as well. The C1
characters U+0080-U+009F are the same sequences in one character (U+009B is CSI, U+009D OSC) where a terminal reads
them; BEL, backspace and carriage return rewrite what was shown; Unicode's format characters (U+202E, a right-to-left
override) reorder it. `str.isprintable()` is false for every one of these (Unicode categories Cc, Cf, Cs, Co, Cn, Zl,
Zp and every space but ' '), so each such character is written as Python writes it in a string literal (`\\x1b`,
`\\x9b`, `\\u202e`): visible, and inert. The terminal's size is read here too: COLUMNS and LINES are text from
outside as well.
"""

from __future__ import annotations

from collections.abc import MutableMapping


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every character a terminal would act on written as its escape (`\\x1b`); `lines` keeps newlines
    (a multi-line view: stacks), else they are escaped too and the text stays one line. Printable text is returned
    as it is, at the cost of one C scan: this is on the path of every line `tail` prints."""
    if text.isprintable():
        return text
    if lines:
        return "\n".join(map(_escaped, text.split("\n")))
    return _escaped(text)


def _escaped(text: str) -> str:
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# Columns or lines of a terminal: more than any screen shows (a 65,535 a pty may report is no screen), few enough that a
# line drawn as wide costs nothing.
MAX_SIZE = 2000
_SIZES = ("COLUMNS", "LINES")


def settle_size(environ: MutableMapping[str, str]) -> None:
    """COLUMNS and LINES as every reader of them takes them, whatever they hold: rich reads any `str.isdigit()` text with
    int() ("²" raises ValueError), shutil and rich take "99999999999999999999" as it is (a table, a drawing that wide:
    OverflowError or MemoryError), and rich takes 0. A size in ASCII digits is clamped to 1..MAX_SIZE; anything else
    (negative, zero, other digits, words) is dropped, so the terminal's own size counts, as where none is set."""
    for name in _SIZES:
        text = environ.get(name)
        if text is None:
            continue
        digits = text.strip().lstrip("0")
        if digits.isascii() and digits.isdigit():  # "" (zero) is no digit string
            environ[name] = str(min(int(digits), MAX_SIZE) if len(digits) <= len(str(MAX_SIZE)) else MAX_SIZE)
        else:
            del environ[name]


def columns() -> int:
    """The terminal's width (COLUMNS, else the terminal's own, else 80), at least 1 and at most MAX_SIZE."""
    import shutil  # here: the worker runtime imports this module (through errors.one_line) and needs no terminal

    return max(1, min(shutil.get_terminal_size().columns, MAX_SIZE))

"""YAML text for values that come from the user: one line each, never structure.

Templates place every value with the `yaml` filter, which writes it as a
JSON-compatible flow node: strings double-quoted with every character outside
printable ASCII escaped, lists as `[...]`, mappings as `{...}`. Whatever a job
name, an argument or an environment value contains (newlines, `: `, `#`,
quotes, `{{`, a byte-order mark, U+2028, which YAML 1.1 parsers take for a
line break), it stays one scalar inside its quotes: a value can never add a
key, end a mapping or start a document. The output is pure ASCII, so it means
the same to PyYAML, Go's yaml (kubectl) and any JSON parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_SHORT_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "\0": "\\0",
}


class UnsafeValue(ValueError):
    """A value that has no faithful YAML form (a lone surrogate: not Unicode text)."""


def quote(text: str) -> str:
    """A double-quoted YAML 1.1/1.2 scalar that reads back as exactly `text`."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise UnsafeValue(f"{text!r} is not valid Unicode text (lone surrogate U+{code:04X})")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def flow(value: object) -> str:
    """One value as a single-line YAML flow node (strings always quoted)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{quote(str(key))}: {flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(flow(item) for item in value) + "]"
    raise TypeError(f"no YAML form for {type(value).__name__}")


def comment(text: str) -> str:
    """Text for a `#` comment: one line of printable ASCII; anything else is escaped."""
    return "".join(ch if 0x20 <= ord(ch) < 0x7F else quote(ch)[1:-1] for ch in text)

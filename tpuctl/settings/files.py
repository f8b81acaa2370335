"""Settings files: `./tpuctl.toml` over the user's config file, per command section.

Cloud settings (`[cloud]`, with env vars and gcloud as further layers) are
resolved by tpuctl.settings.cloud; this module reads and edits the files.

Precedence, highest first: a flag on the command line, `./tpuctl.toml`, the
user config file (`~/.config/tpuctl/config.toml` on Linux), the built-in
default. Values arrive as click's `default_map`, so click validates them
exactly as it validates flags, and a bad value names its file and key.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, as on TPU VM images
    import tomli as tomllib

PROJECT_FILE = "tpuctl.toml"
_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def user_config_file() -> Path:
    from platformdirs import user_config_path

    return user_config_path("tpuctl") / "config.toml"


def config_files() -> list[Path]:
    """Lowest precedence first. TPUCTL_CONFIG replaces the user file (tests, CI, several setups)."""
    user = Path(os.environ["TPUCTL_CONFIG"]) if os.environ.get("TPUCTL_CONFIG") else user_config_file()
    return [user, Path.cwd() / PROJECT_FILE]


def read_file(path: Path) -> dict[str, Any]:
    """The parsed file ({} when it does not exist), refused in one line when hostile.

    Only a small regular file is read (/dev/zero or a FIFO would never end); tomllib
    recurses once per level of `[[[…` or `{a={a=…`, so a deep file is a RecursionError
    that becomes a message, and a file deep through dotted keys (no recursion while
    parsing) is refused by depth; a NUL byte in any string would reach open() or exec()."""
    what = "config file"
    text = inputs.read_small_text(path, what)
    if text is None:
        return {}
    if any(_key_depth(line) > inputs.MAX_NESTING for line in text.splitlines()):
        raise TpuctlError(f"config file {path} nests deeper than {inputs.MAX_NESTING} levels")
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise TpuctlError(f"config file {path} is not valid TOML: {err}") from None
    except ValueError as err:  # an integer past int()'s 4300 digits
        raise TpuctlError(f"config file {path} is not valid TOML: {err.__class__.__name__}: {str(err)[:80]}") from None
    except RecursionError:
        raise TpuctlError(f"config file {path} nests deeper than {inputs.MAX_NESTING} levels") from None
    inputs.check_data(data, f"config file {path}")
    return data


def _key_depth(line: str) -> int:
    """How many tables deep a line's dotted key or [table.header] reaches, counted before parsing:
    tomllib's memory grows with the square of a dotted key's length (`a.a.a…` 20,000 long needs
    gigabytes). Dots inside a quoted key count too, which only errs on the side of refusing."""
    text = line.lstrip()
    key = text.split("]", 1)[0] if text.startswith("[") else text.split("=", 1)[0]
    return key.count(".")


def section_defaults(section: str, allowed: Mapping[str, type | tuple[type, Any]]) -> dict[str, Any]:
    """Merged `[section]` values, checked against the option names and types a command takes.

    A key may map to `(type, param_type)`: the option's own click type then checks the
    value too, so `start-timeout = nan` or `workers = 99999` in a file is refused in one
    line naming the file, exactly as the flag would be (click would check a default_map
    value as well, but without saying which file it came from).
    """
    merged: dict[str, Any] = {}
    for path in config_files():
        table = read_file(path).get(section, {})
        if not isinstance(table, dict):
            raise TpuctlError(f"{path}: [{section}] must be a table")
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in allowed:
                raise TpuctlError(
                    f"{path}: unknown setting {section}.{key}", hint=f"known: {', '.join(sorted(allowed))}"
                )
            expected, check = _expectation(allowed[name])
            if not _has_type(value, expected):
                raise TpuctlError(f"{path}: {section}.{key} must be {_TYPE_WORDS[expected]}, not {value!r}")
            if check is not None:
                _check_value(value, check, f"{path}: {section}.{key}")
            merged[name] = value
    return merged


def _expectation(allowed: type | tuple[type, Any]) -> tuple[type, Any]:
    """(TOML type, click type or None) from a section's declaration, which may be a bare type."""
    return allowed if isinstance(allowed, tuple) else (allowed, None)


def _check_value(value: object, check: Any, where: str) -> None:
    """Run a click ParamType's own conversion on a file's value; its complaint becomes one line naming the file."""
    import click

    try:
        check.convert(value, None, None)
    except click.BadParameter as err:
        raise TpuctlError(f"{where}: {err.message}") from None


def _has_type(value: object, expected: type) -> bool:
    """TOML's true is no integer here, and an integer is a fine number of seconds."""
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, (int, float))
    return isinstance(value, expected)


_TABLE_HEADER = re.compile(r"\s*\[")


def update_section(path: Path, section: str, values: dict[str, str]) -> bool:
    """Set keys of one `[section]`, keeping every other line of the file as it was.

    Rewriting the whole file through a TOML writer would drop the user's
    comments and layout elsewhere; only the section's own lines are replaced.
    False when the file already holds these values.
    """
    text = (inputs.read_small_text(path, "config file") or "") if path.exists() else ""  # no file yet: the write says why
    before = read_file(path) if text else {}
    current = before.get(section, {})
    if not isinstance(current, dict):
        raise TpuctlError(f"{path}: [{section}] must be a table")
    merged = {**current, **values}
    if merged == current:
        return False
    import tomli_w

    block = tomli_w.dumps({section: merged})
    lines = text.splitlines(keepends=True)
    header = re.compile(rf"\s*\[\s*{re.escape(section)}\s*\]\s*(#.*)?$")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        separator = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        updated = text + separator + block
    else:
        end = next((i for i in range(start + 1, len(lines)) if _TABLE_HEADER.match(lines[i])), len(lines))
        tail = "".join(lines[end:])
        updated = "".join(lines[:start]) + block + ("\n" + tail if tail else "")
    try:
        check = tomllib.loads(updated)
    except tomllib.TOMLDecodeError:
        check = {}
    others_kept = {k: v for k, v in check.items() if k != section} == {k: v for k, v in before.items() if k != section}
    if check.get(section) != merged or not others_kept:
        # e.g. dotted `cloud.x = ...` keys elsewhere: refuse rather than write a file that means something else.
        raise TpuctlError(f"cannot update [{section}] in {path} safely", hint="edit the file by hand", exit_code=1)
    from tpuctl.inputs.private_files import private_dir, write_through

    try:
        # A symlinked config (dotfiles) stays a symlink: its target is replaced, keeping its mode; a new file is 0600.
        if not path.is_symlink():
            private_dir(path.parent, tighten=False)
        write_through(path, updated)
    except OSError as err:
        raise TpuctlError(f"cannot write {path}: {err.strerror}", exit_code=1) from None
    return True

"""Command-line options declared once, as the fields of the dataclass the core receives.

The Job and each backend list their options as fields built with `option(...)`;
the CLI turns the fields into click options (`click_options`) and click's parsed
values back into the dataclass (`from_params`). No option travels through a side
channel, and an option's name, default and help live next to the code that reads
it. The same declaration says whether a config file's [launch] table may set it
(`config=True`, `config_keys`) and which TPUCTL_* variable carries it to the
workers (`worker=`, `worker_fields`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import click

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
_CLICK = "click"
_CONFIG = "config"
_WORKER = "worker"
_PARSE = "parse"
_UNSET: Any = object()


def option(
    *decls: str,
    default: Any = None,
    config: bool = False,
    worker: str | None = None,
    always: bool = False,
    parse: Callable[[Any], Any] | None = None,
    field_default: Any = _UNSET,
    **attrs: Any,
) -> Any:
    """A dataclass field that is also a click option; the parameter is named after the field.

    config: a [launch] table may set its default. worker: the TPUCTL_* variable that carries it to
    every worker, written unless it holds the field's default (`always`: written anyway). parse:
    turns click's value into the field's (`--env NAME=VALUE` strings into pairs). field_default: the
    dataclass's default where it differs from the command line's (None there: "let the backend choose").
    """
    metadata: dict[str, Any] = {_CLICK: (decls, {"default": default, **attrs}), _CONFIG: config}
    if worker is not None:
        metadata[_WORKER] = (worker, always)
    if parse is not None:
        metadata[_PARSE] = parse
    return dataclasses.field(default=default if field_default is _UNSET else field_default, metadata=metadata)


def _option_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if _CLICK in f.metadata]


def click_options(*classes: type) -> Callable[[F], F]:
    """Add the option fields of each class to a click command, in declaration order."""

    def decorate(command: F) -> F:
        # An option two backends share (--image, --project) is one field name in both: declared once, where it first appears.
        fields: dict[str, dataclasses.Field[Any]] = {}
        for cls in classes:
            for f in _option_fields(cls):
                fields.setdefault(f.name, f)
        for f in reversed(list(fields.values())):
            decls, attrs = f.metadata[_CLICK]
            command = click.option(*decls, f.name, **attrs)(command)
        return command

    return decorate


def names(cls: type) -> list[str]:
    return [f.name for f in _option_fields(cls)]


def from_params(cls: type[T], params: Mapping[str, Any], **given: Any) -> T:
    """The dataclass from click's values (those of other classes are left out), each parsed as its field says;
    `given`: fields that are not options (a Job's script)."""
    values = dict(given)
    for f in _option_fields(cls):
        if f.name in params:
            parse = f.metadata.get(_PARSE)
            values[f.name] = parse(params[f.name]) if parse is not None else params[f.name]
    return cls(**values)


def config_keys(*classes: type) -> dict[str, type]:
    """The options a config file's [launch] table may set, with the TOML type of each (from the field's type)."""
    keys: dict[str, type] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in _option_fields(cls):
            if f.metadata.get(_CONFIG):
                keys[f.name] = next(t for t in (bool, int, float, str) if t in (hints[f.name], *typing.get_args(hints[f.name])))
    return keys


def worker_fields(cls: type) -> list[tuple[str, str, bool]]:
    """(field, TPUCTL_* variable, written even at its default) for each option that reaches the workers, in declaration order."""
    return [(f.name, *f.metadata[_WORKER]) for f in _option_fields(cls) if _WORKER in f.metadata]


def default_of(cls: type, name: str) -> Any:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    raise KeyError(name)


def param_type(cls: type, name: str) -> Any:
    """The click type an option field declares (None for flags and plain strings), e.g. to check a config file's value with it."""
    for f in _option_fields(cls):
        if f.name == name:
            return f.metadata[_CLICK][1].get("type")
    raise KeyError(name)


def flag(cls: type, name: str) -> str:
    """The option's long spelling as a user types it, for messages."""
    for f in _option_fields(cls):
        if f.name == name:
            decls = [d for d in f.metadata[_CLICK][0] if d.startswith("--")]
            return decls[0].split("/")[0] if decls else "--" + name.replace("_", "-")
    raise KeyError(name)


def given_flags(cls: type, given: Iterable[str]) -> list[str]:
    """The options of `cls` that the user gave explicitly, spelled as flags."""
    wanted = set(given)
    return [flag(cls, name) for name in names(cls) if name in wanted]

"""The CLI reference in docs/ is exactly what `--help` says today."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT
from tpuctl.cli.reference import render


def test_cli_reference_is_current() -> None:
    written = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    assert written == render(), "docs/cli-reference.md is stale: run `make docs`"


def test_readme_test_command_is_what_ci_runs() -> None:
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


# --- doc examples against the CLI: every flag exists, every [launch] key is accepted ------------------

import re  # noqa: E402
import shlex  # noqa: E402

import click  # noqa: E402
import pytest  # noqa: E402

from tpuctl.cli import cli  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_TOML = re.compile(r"^```toml\n(.*?)^```", re.M | re.S)


def _command_lines() -> list[tuple[str, str]]:
    """(where, line) for each `tpuctl ...` line in a code block: continuation lines joined, comments cut."""
    found = []
    for path in DOCS:
        if path.name == "cli-reference.md":
            continue  # generated from --help itself
        for block in _FENCE.findall(path.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                text = line.strip().removeprefix("$ ")
                if text.startswith("tpuctl ") and "<" not in text and "..." not in text:
                    found.append((path.name, text))
    return found


def _words(line: str) -> list[str]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split("#", 1)[0].split()
    for stop in ("|", "&&", ";", ">", "2>", "&"):
        if stop in words:
            words = words[: words.index(stop)]
    return words[1:]


# launch hands an option it does not know, after SCRIPT, to the script; the docs' example scripts take
# these. Any other unknown word is a typo in the docs (it would reach the script silently).
SCRIPT_FLAGS = {"--epochs"}


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]} | {"-h", "--help"}


def _check(args: list[str]) -> None:
    """`args` as tpuctl would read them, without running anything: the command path exists and
    every option word belongs to its command (click's resilient parsing alone skips unknown ones)."""
    context = click.Context(cli, info_name="tpuctl")
    command: click.Command = cli
    known = _options(cli)
    words = list(args)
    while isinstance(command, click.Group) and words:
        if words[0].startswith("-"):
            assert words[0] in known, f"unknown option {words[0]} of tpuctl"
            words.pop(0)
            continue
        found = command.get_command(context, words.pop(0))
        assert found is not None, f"no command {args[len(args) - len(words) - 1]!r}"
        command = found
        known = _options(command)
    takes_value = {opt for param in command.params if not getattr(param, "is_flag", True) for opt in getattr(param, "opts", [])}
    expecting_value = False
    for word in words:
        if word == "--":
            break
        if expecting_value:
            expecting_value = False
            continue
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            assert name in known or (command.name == "launch" and name in SCRIPT_FLAGS), f"unknown option {name} of `tpuctl {command.name}`"
            expecting_value = name in takes_value and "=" not in word
    command.make_context(command.name, list(words), parent=context, resilient_parsing=True)


@pytest.mark.parametrize(("where", "line"), _command_lines(), ids=lambda v: v[:60] if isinstance(v, str) else v)
def test_every_command_line_in_the_docs_parses(where: str, line: str) -> None:
    try:
        _check(_words(line))
    except (click.UsageError, AssertionError) as err:
        pytest.fail(f"{where}: `{line}`: {err}")


def test_every_launch_key_the_docs_name_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuctl.launch.launch_options import CONFIG_KEYS
    from tpuctl.settings import files as config

    tables = []
    for path in DOCS:
        for block in _TOML.findall(path.read_text(encoding="utf-8")):
            if "[launch]" in block:
                tables.append((path.name, block[block.index("[launch]") :].split("\n[", 1)[0]))
    assert tables, "no [launch] example in the docs"
    for where, table in tables:
        file = tmp_path / "tpuctl.toml"
        file.write_text(table, encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "none.toml"))
        try:
            config.section_defaults("launch", CONFIG_KEYS)
        except Exception as err:  # noqa: BLE001 - the message is the finding
            pytest.fail(f"{where}: [launch] example refused: {err}")


def test_the_launch_keys_docs_list_are_exactly_the_accepted_ones() -> None:
    from tpuctl.launch.launch_options import CONFIG_KEYS

    text = (ROOT / "docs" / "launch.md").read_text(encoding="utf-8")
    listed = text.split("These launch options can get their default from a `[launch]` table:", 1)[1].split("— the ones", 1)[0]
    named = {name.replace("-", "_") for name in re.findall(r"`([a-z-]+)`", listed)}
    assert named == set(CONFIG_KEYS), f"docs/launch.md lists {sorted(named ^ set(CONFIG_KEYS))} differently from what [launch] accepts"

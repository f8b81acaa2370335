"""gcloud's `--format json` and kubectl's `-o json` / `--output json`, wherever tpuctl says `--json` (issue 30)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest

from tests.conftest import run_tpuctl
from tpuctl.cli import COMMANDS, cli


def _json_commands() -> list[str]:
    found = []
    for name in sorted(COMMANDS):
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        subs = command.commands.items() if isinstance(command, click.Group) else [("", command)]
        for sub_name, sub in subs:
            if any("--json" in p.opts for p in sub.params) and name != "launch":
                found.append(f"{name} {sub_name}".strip())
    return found


def test_every_command_with_json_takes_the_aliases() -> None:
    commands = _json_commands()
    assert {"list", "describe", "config show", "devices", "tail"} <= set(commands)
    for words in commands:
        name, *sub = words.split()
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        target = command.commands[sub[0]] if sub and isinstance(command, click.Group) else command
        opts = {opt for param in target.params for opt in param.opts}
        assert {"--format", "--output", "-o"} <= opts, words
        for alias in (["--format", "json"], ["-o", "json"], ["--output=json"]):
            parsed = target.make_context(words, list(alias), resilient_parsing=True)
            assert parsed.params["output_format"] == "json", (words, alias)


@pytest.mark.parametrize("flag", [["--format", "json"], ["-o", "json"], ["--output=json"], ["--json"]])
def test_the_aliases_give_the_same_json(tmp_path: Path, flag: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPUCTL_", "CLOUDSDK_"))}
    result = run_tpuctl("config", "show", *flag, env={**env, "TPUCTL_CONFIG": str(tmp_path / "none.toml"), "NO_GCE_CHECK": "true"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["accelerator-type"]["source"] == "default"


def test_an_unknown_format_is_one_line_and_tf_config_takes_o_for_its_own_format(tmp_path: Path) -> None:
    bad = run_tpuctl("config", "show", "-o", "yaml", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("'yaml' is not one of 'json', 'text'.")
    env = run_tpuctl("tf-config", "--workers", "2", "-o", "env", cwd=tmp_path)
    assert env.returncode == 0 and env.stdout.startswith("# worker:0\nexport TF_CONFIG=")


def test_launch_leaves_o_to_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint(sys.argv)\n")
    result = run_tpuctl("launch", str(script), "-o", "out.txt", "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["workers"][0]["argv"][-2:] == ["-o", "out.txt"]
    for alias in ("--format", "-o", "--output"):  # before SCRIPT they cannot be the script's: launch names its --json
        before = run_tpuctl("launch", alias, "json", str(script), "--dry-run", cwd=tmp_path)
        assert before.returncode == 2 and before.stderr.strip() == f"Error: No such option '{alias}'. Did you mean '--json'?"


def test_json_and_text_together_are_refused_not_guessed(tmp_path: Path) -> None:
    both = run_tpuctl("config", "show", "--json", "-o", "text", cwd=tmp_path)
    assert both.returncode == 2 and both.stdout == ""
    assert both.stderr.strip().startswith("Error: --json and --format/--output text ask for different outputs")
    plain = run_tpuctl("config", "show", "--format", "text", cwd=tmp_path, env={**os.environ, "NO_GCE_CHECK": "true"})
    assert plain.returncode == 0 and "SETTING" in plain.stdout

"""Config files: precedence, and hostile files that must end in one clear error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_tpuctl
from tpuctl import config
from tpuctl.errors import TpuctlError
from tpuctl.launch.options import CONFIG_KEYS

EXAMPLE = str(ROOT / "examples" / "train_keras.py")


def _dry_run_workers(cwd: Path, user_file: Path, *flags: str) -> int:
    result = run_tpuctl("launch", EXAMPLE, "--dry-run", *flags, cwd=cwd, env={**os.environ, "TPUCTL_CONFIG": str(user_file)})
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split(":")[1].split()[0])


def test_flag_beats_project_file_beats_user_file(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text("[launch]\nworkers = 3\n")
    assert _dry_run_workers(tmp_path, user) == 3
    (tmp_path / "tpuctl.toml").write_text("[launch]\nworkers = 4\n")
    assert _dry_run_workers(tmp_path, user) == 4
    assert _dry_run_workers(tmp_path, user, "--workers", "2") == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[launch\n", "is not valid TOML"),
        ("launch = 3\n", "[launch] must be a table"),
        ("[launch]\nworkerz = 2\n", "unknown setting launch.workerz"),
        ("[launch]\nworkers = '2'\n", "launch.workers must be an integer"),
        ("[launch]\nworkers = true\n", "launch.workers must be an integer"),
        ("[launch]\nscope = 1\n", "launch.scope must be true or false"),
        ("[launch]\nworkers = 0\n", "0 is not in the range x>=1"),
        ("[launch]\nstrategy = 'magic'\n", "'magic' is not one of"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "tpuctl.toml").write_text(text)
    result = run_tpuctl("launch", EXAMPLE, "--dry-run", cwd=tmp_path, env={**os.environ, "TPUCTL_CONFIG": "/nonexistent"})
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unreadable_config_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "tpuctl.toml"
    folder.mkdir()  # a directory where a file should be
    with pytest.raises(TpuctlError, match="cannot read config file"):
        config.read_file(folder)


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_gives_settings_or_a_tpuctl_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "hostile.toml"
    path.write_text(text, encoding="utf-8")
    os.environ["TPUCTL_CONFIG"] = str(path)
    try:
        values = config.section_defaults("launch", CONFIG_KEYS)
    except TpuctlError:
        return
    finally:
        del os.environ["TPUCTL_CONFIG"]
    assert set(values) <= set(CONFIG_KEYS)


def test_documented_example_file_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "user.toml"
    path.write_text('[launch]\nworkers = 2\nmodel-dir = "gs://b/r"\nmax-restarts = 3\nstart-timeout = 600\nscope = false\n')
    os.environ["TPUCTL_CONFIG"] = str(path)
    try:
        values = config.section_defaults("launch", CONFIG_KEYS)
    finally:
        del os.environ["TPUCTL_CONFIG"]
    assert values == {"workers": 2, "model_dir": "gs://b/r", "max_restarts": 3, "start_timeout": 600, "scope": False}

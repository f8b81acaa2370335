"""Config files: precedence, and hostile files that must end in one clear error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_tpuctl
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.launch_options import CONFIG_KEYS
from tpuctl.settings import files as config

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
        ("[launch]\nworkers = 0\n", "0 is not in the range"),
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


# Hostile files (issue 12): each ends in one TpuctlError, never a traceback or a hang.


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 20_000 + "]" * 20_000 + "\n",
        "[launch]\nx = " + "{a = " * 20_000 + "1" + "}" * 20_000 + "\n",
        "a" + ".a" * 20_000 + " = 1\n",  # dotted keys: parsed without recursion, but 20,000 tables deep
        "[" + ".".join(["t"] * 20_000) + "]\n",
    ],
    ids=["arrays", "inline-tables", "dotted-keys", "table-header"],
)
def test_a_config_nested_20000_deep_is_one_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(TpuctlError, match="nest"):
        config.read_file(path)


@pytest.mark.parametrize("value", ['log_dir = "a\\u0000b"', 'python = "py\\u0000"', 'model_dir = "gs://b/\\u0000"', '"k\\u0000" = 1'])
def test_a_nul_byte_in_a_config_value_is_one_error(tmp_path: Path, value: str) -> None:
    path = tmp_path / "nul.toml"
    path.write_text(f"[launch]\n{value}\n")
    with pytest.raises(TpuctlError, match="NUL byte"):
        config.read_file(path)


def test_a_nul_byte_in_the_config_path_is_one_error() -> None:
    with pytest.raises(TpuctlError, match="NUL byte"):
        config.read_file(Path("a\x00b.toml"))


@pytest.mark.parametrize("where", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_as_config_is_refused_without_reading(tmp_path: Path, where: str) -> None:
    path = Path(where)
    if where == "fifo":
        path = tmp_path / "fifo.toml"
        os.mkfifo(path)
    with pytest.raises(TpuctlError, match="not a regular file"):
        config.read_file(path)


def test_a_huge_config_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(TpuctlError, match="larger than"):
        config.read_file(path)


def test_an_integer_of_5000_digits_is_one_error(tmp_path: Path) -> None:
    # Found by tests/unit/test_fuzz_parsers.py: tomllib's int() meets Python's 4300-digit limit.
    path = tmp_path / "big.toml"
    path.write_text("[launch]\nworkers = " + "9" * 5000 + "\n")
    with pytest.raises(TpuctlError, match="not valid TOML"):
        config.read_file(path)


def test_config_show_says_which_config_files_exist(tmp_path: Path) -> None:
    """Both places are looked in; one that holds no file is said so, not listed as read (issue 30)."""
    user = tmp_path / "user.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUCTL_")}
    result = run_tpuctl("config", "show", env={**env, "TPUCTL_CONFIG": str(user), "NO_GCE_CHECK": "true"}, cwd=tmp_path)
    assert f"config files (highest first): {tmp_path / 'tpuctl.toml'} (none there), {user} (none there)" in result.stderr
    user.write_text('[launch]\nworkers = 2\n')
    result = run_tpuctl("config", "show", env={**env, "TPUCTL_CONFIG": str(user), "NO_GCE_CHECK": "true"}, cwd=tmp_path)
    assert f"{tmp_path / 'tpuctl.toml'} (none there), {user}\n" in result.stderr

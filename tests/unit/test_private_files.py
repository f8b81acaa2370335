"""What tpuctl writes: private where it may hold --env values, never through an unexpected symlink,
never wider than the file was (issue 12, Exposure)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_tpuctl
from tpuctl import config
from tpuctl.cli import main
from tpuctl.errors import TpuctlError
from tpuctl.launch import private_files

NOOP = ROOT / "benchmarks" / "scripts" / "noop.py"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_launch_keeps_env_values_to_this_user(tmp_path: Path) -> None:
    logs = tmp_path / "runs" / "one"
    result = run_tpuctl(
        "launch", str(NOOP), "--workers", "2", "--strategy", "none", "--env", "SECRET_TOKEN=hunter2", "--log-dir", str(logs), timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    attempt = logs / "attempt-1"
    assert "hunter2" in (attempt / "plan.json").read_text()  # the record is complete, and private:
    assert _mode(attempt / "plan.json") == 0o600
    assert _mode(logs / "outcome.json") == 0o600
    assert _mode(attempt) == 0o700
    assert _mode(logs) == 0o700 and _mode(logs.parent) == 0o700  # folders tpuctl made


def test_an_existing_log_dir_keeps_its_mode_but_what_tpuctl_writes_is_private(tmp_path: Path) -> None:
    logs = tmp_path / "shared-logs"
    logs.mkdir(mode=0o755)
    os.chmod(logs, 0o755)
    result = run_tpuctl("launch", str(NOOP), "--strategy", "none", "--env", "K=v", "--log-dir", str(logs), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _mode(logs) == 0o755  # the user's folder, the user's choice
    assert _mode(logs / "attempt-1") == 0o700
    assert _mode(logs / "outcome.json") == 0o600


def test_write_private_replaces_a_planted_symlink_instead_of_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = tmp_path / "plan.json"
    planted.symlink_to(victim)
    private_files.write_private(planted, "{}\n")
    assert victim.read_text() == "precious\n"
    assert not planted.is_symlink() and planted.read_text() == "{}\n"
    assert _mode(planted) == 0o600


def test_private_dir_tightens_its_own_folder_only_when_asked(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    os.chmod(folder, 0o755)
    private_files.private_dir(folder, tighten=False)
    assert _mode(folder) == 0o755
    private_files.private_dir(folder)
    assert _mode(folder) == 0o700
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        private_files.private_dir(tmp_path / "file")


# -- tf-config --format dir ----------------------------------------------------


def _tf_config(*args: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(["tf-config", *args])
    assert isinstance(exited.value.code, int)
    return exited.value.code


def test_tf_config_dir_refuses_a_symlinked_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    victim = tmp_path / "bashrc"
    victim.write_text("precious\n")
    out = tmp_path / "tfc"
    out.mkdir()
    (out / "worker-0.json").symlink_to(victim)
    assert _tf_config("--workers", "1", "--format", "dir", str(out)) == 1
    err = capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    assert "symlink" in err and len(err.strip().splitlines()) <= 2 and "Traceback" not in err  # Error line + hint line


def test_tf_config_dir_files_are_written_whole_with_the_usual_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    old = os.umask(0o022)
    try:
        assert _tf_config("--workers", "2", "--format", "dir", str(tmp_path)) == 0
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-0.json", "worker-1.json"]  # no temporary files left
    assert _mode(tmp_path / "worker-0.json") == 0o644


# -- the config file init writes ----------------------------------------------


def test_a_symlinked_config_stays_a_symlink_and_keeps_its_mode(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "tpuctl.toml"
    real.write_text("# mine\n[cloud]\nproject = \"old-project\"\n")
    os.chmod(real, 0o600)
    link = tmp_path / "config" / "config.toml"
    link.parent.mkdir()
    link.symlink_to(real)
    assert config.update_section(link, "cloud", {"project": "new-project"})
    assert link.is_symlink() and link.resolve() == real
    assert "new-project" in real.read_text() and "# mine" in real.read_text()
    assert _mode(real) == 0o600
    assert [p.name for p in dotfiles.iterdir()] == ["tpuctl.toml"]


def test_init_never_widens_a_config_mode_and_new_configs_are_private(tmp_path: Path) -> None:
    narrow = tmp_path / "narrow.toml"
    narrow.write_text("[cloud]\nzone = \"a\"\n")
    os.chmod(narrow, 0o400 | 0o200)
    config.update_section(narrow, "cloud", {"zone": "b"})
    assert _mode(narrow) == 0o600
    fresh = tmp_path / "new" / "config.toml"
    config.update_section(fresh, "cloud", {"zone": "b"})
    assert _mode(fresh) == 0o600


def test_a_config_write_failure_is_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(TpuctlError, match="cannot write"):
        config.update_section(blocked / "config.toml", "cloud", {"zone": "b"})


# -- what the screen shows -----------------------------------------------------


def test_dry_run_hides_values_of_secret_looking_variables_but_json_keeps_them(tmp_path: Path) -> None:
    args = ("launch", str(NOOP), "--dry-run", "--env", "HF_TOKEN=hf_abcdef", "--env", "AWS_SECRET_ACCESS_KEY=wJalr", "--env", "TF_CPP_MIN_LOG_LEVEL=2")
    shown = run_tpuctl(*args, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "hf_abcdef" not in shown.stdout and "wJalr" not in shown.stdout
    assert "HF_TOKEN='<hidden: 9 characters>'" in shown.stdout
    assert "TF_CPP_MIN_LOG_LEVEL=2" in shown.stdout  # not a secret: shown, so the plan can still be checked
    as_json = run_tpuctl(*args, "--json", timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    assert "hf_abcdef" in as_json.stdout  # the exact request, for tools


@pytest.mark.parametrize(
    ("name", "hidden"),
    [("HF_TOKEN", True), ("WANDB_API_KEY", True), ("DB_PASSWORD", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
     ("MY_SECRET", True), ("KEY", True), ("TF_CPP_MIN_LOG_LEVEL", False), ("KEYRING_BACKEND", False), ("BATCH_SIZE", False)],
)
def test_secret_looking_names(name: str, hidden: bool) -> None:
    assert (private_files.shown_value(name, "v") != "v") is hidden

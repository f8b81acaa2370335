"""What tpuctl writes: private where it may hold --env values, never through an unexpected symlink,
never wider than the file was (issue 12, Exposure)."""

from __future__ import annotations

import io
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_tpuctl, tpuctl_cmd
from tpuctl.cli import main
from tpuctl.inputs import private_files
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.console import logs
from tpuctl.settings import files as config

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


# -- folders of others, planted links, shared log dirs (issue 29) ------------------------------

NOBODY = 65534
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user (chown) needs root")


def _planted_attempt(logs: Path, victim: Path) -> None:
    """The attack: attempt-1/ open to everyone, its worker log a link to a file of the victim's."""
    (logs / "attempt-1").mkdir(parents=True)
    os.chmod(logs / "attempt-1", 0o777)
    (logs / "attempt-1" / "worker-0.log").symlink_to(victim)
    victim.write_text("precious\n")


def _refused_and_untouched(result: subprocess.CompletedProcess[str], logs: Path, victim: Path, problem: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert problem in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in logs.rglob("*")) == ["attempt-1", "worker-0.log"]  # nothing written: no plan.json, no outcome


@AS_ROOT
def test_a_log_dir_another_user_owns_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    logs, victim = tmp_path / "shared", tmp_path / "victim"
    logs.mkdir()
    _planted_attempt(logs, victim)
    for path in (logs, logs / "attempt-1"):
        os.chown(path, NOBODY, NOBODY)
    os.chmod(logs, 0o777)
    result = run_tpuctl("launch", str(NOOP), "--strategy", "none", "--env", "API_TOKEN=t0k3n", "--log-dir", str(logs), timeout=120)
    _refused_and_untouched(result, logs, victim, f"belongs to uid {NOBODY}")


def test_a_log_dir_other_users_can_write_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    logs, victim = tmp_path / "open", tmp_path / "victim"
    logs.mkdir()
    _planted_attempt(logs, victim)
    os.chmod(logs, 0o777)
    result = run_tpuctl("launch", str(NOOP), "--strategy", "none", "--log-dir", str(logs), timeout=120)
    _refused_and_untouched(result, logs, victim, "is writable by other users (mode 0777)")


@AS_ROOT
def test_an_attempt_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir(mode=0o700)
    os.chown(attempt, NOBODY, NOBODY)
    with pytest.raises(TpuctlError, match=f"belongs to uid {NOBODY}") as caught:
        private_files.private_dir(attempt)
    assert "\n" not in str(caught.value)


def test_tpuctls_own_folders_are_never_symlinks_but_a_users_log_dir_may_be_one_of_theirs(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "attempt-1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TpuctlError, match="not a directory"):
        private_files.private_dir(tmp_path / "attempt-1")
    assert private_files.private_dir(tmp_path / "attempt-1", tighten=False) == tmp_path / "attempt-1"


def test_a_log_file_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "worker-0.log").symlink_to(victim)
    shown = io.StringIO()
    for append in (False, True):
        logs.pump(io.BytesIO(b"overwrite\n"), "[w0]", logs.LineWriter(shown), tmp_path / "worker-0.log", logs.new_tail(), append=append)
    assert victim.read_text() == "precious\n"
    assert shown.getvalue().count("cannot write log") == 2 and shown.getvalue().count("overwrite") == 2  # the terminal still has it


def test_a_second_launch_into_a_used_log_dir_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first = run_tpuctl("launch", str(NOOP), "--strategy", "none", "--log-dir", str(logs), timeout=120)
    assert first.returncode == 0, first.stderr
    before = (logs / "outcome.json").read_text()
    again = run_tpuctl("launch", str(NOOP), "--strategy", "none", "--log-dir", str(logs), timeout=120)
    assert again.returncode == 2 and f"--log-dir {logs} already holds a launch" in again.stderr, again.stderr
    assert "pass a new --log-dir" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert (logs / "outcome.json").read_text() == before


def test_a_log_dir_in_use_by_a_running_launch_is_refused(tmp_path: Path) -> None:
    logs, go = tmp_path / "logs", tmp_path / "go"
    script = tmp_path / "wait.py"
    script.write_text(f"import os, time\nprint('started', flush=True)\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n")
    running = subprocess.Popen(tpuctl_cmd("launch", str(script), "--strategy", "none", "--log-dir", str(logs)), stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout is not None and "started" in running.stdout.readline()
        second = run_tpuctl("launch", str(NOOP), "--strategy", "none", "--log-dir", str(logs), timeout=120)
        assert second.returncode == 2, second.stderr
        assert f"--log-dir {logs} is in use by a running launch (" in second.stderr and f"pid {running.pid})" in second.stderr
    finally:
        go.write_text("")
        assert running.wait(timeout=120) == 0
    assert sorted(p.name for p in logs.iterdir()) == ["attempt-1", "outcome.json", "run.json", "timeline.jsonl"]
    assert [p.name for p in (logs / "attempt-1").iterdir() if p.suffix == ".log"] == ["worker-0.log"]


@pytest.mark.parametrize("damage", ["nobody", "open", "link"])
def test_the_bind_shim_cache_follows_the_private_folder_rule(tmp_path: Path, damage: str) -> None:
    """The cache holds code every worker preloads: a folder another user owns or can write, or a link planted in
    its place, would let them pick that code. The shim is then not used (the launch warns), nothing is built there."""
    from tpuctl.backends.local import bindshim

    folder = tmp_path / "bindshim"
    if damage == "link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        folder.symlink_to(elsewhere)
    else:
        folder.mkdir(mode=0o700)
        if damage == "nobody":
            os.chown(folder, NOBODY, NOBODY)
        else:
            folder.chmod(0o777)
    with pytest.raises(bindshim.Unavailable, match="not a private folder of this user") as refused:
        bindshim.library(tmp_path)
    assert "\n" not in str(refused.value)
    assert list(folder.iterdir()) == []

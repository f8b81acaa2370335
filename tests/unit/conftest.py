"""Fixtures the unit modules share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user file, gcloud config or TPUCTL_* variable of the machine leaks in; cwd is empty."""
    for name in list(os.environ):
        if name.startswith(("TPUCTL_", "CLOUDSDK_", "TF_CONFIG")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "user.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("import sys\nprint('ARGV', sys.argv[1:])\n")
    monkeypatch.chdir(work)
    return tmp_path

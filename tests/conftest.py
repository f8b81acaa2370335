"""Shared helpers: run the real CLI in a subprocess, and check for leftover processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.standins.fixtures import google_standin  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "integration" / "scripts"

# google.auth must never probe a metadata server from a test.
os.environ.setdefault("NO_GCE_CHECK", "true")


def tpuctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpuctl", *args]


def run_tpuctl(*args: str, timeout: float = 300, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tpuctl_cmd(*args), capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def read_pids(folder: Path) -> list[int]:
    return [int(p.read_text()) for p in folder.glob("*.pid") if p.read_text().strip()]


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "pids"
    folder.mkdir()
    return folder

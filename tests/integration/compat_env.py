"""The second worker environment of the compatibility tests, and helpers to read what their scripts print.

`make compat-env` (a prerequisite of `make test`) builds `.venv-tf215`: TensorFlow 2.15 with
tensorflow-estimator (tests/integration/scripts/compat/requirements-tf215.txt), the oldest TensorFlow
tpuctl's workers are tested with. Tests reach it through `tf215_env()` (test_compat_tf215.py makes it a
fixture), which returns its interpreter and what is installed there. Where it is missing, those tests skip and say why and how to
build it; with TPUCTL_REQUIRE_COMPAT_ENV=1 (or CI set) they fail instead, so CI cannot skip them quietly.
TPUCTL_TF215_PYTHON=PATH uses another interpreter that has TensorFlow 2.15 instead of .venv-tf215.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from tests.conftest import ROOT

COMPAT_VENV = ROOT / ".venv-tf215"
REQUIREMENTS = ROOT / "tests" / "integration" / "scripts" / "compat" / "requirements-tf215.txt"
BUILD = "make compat-env"

# Distributions whose versions the tests look at (read from metadata: TensorFlow is not imported).
_PACKAGES = ("tensorflow", "tensorflow-cpu", "tensorflow-estimator", "keras", "tf-keras", "numpy")
_QUERY = (
    "import importlib.metadata as m, json, sys\n"
    "found = {}\n"
    f"for name in {_PACKAGES!r}:\n"
    "    try:\n"
    "        found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'packages': found}))\n"
)


@dataclass(frozen=True)
class WorkerEnv:
    """An interpreter for `tpuctl launch --python`, and what it has installed."""

    python: Path
    tf_version: str
    python_version: str
    packages: dict[str, str] = field(default_factory=dict)


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("TPUCTL_REQUIRE_COMPAT_ENV", "") not in ("", "0") or os.environ.get("CI", "") not in ("", "0", "false"):
        pytest.fail(f"{reason} (TPUCTL_REQUIRE_COMPAT_ENV or CI is set: this environment must exist here)", pytrace=False)
    pytest.skip(reason)


def _last_error_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:") or "Error" in line]
    return (errors or lines or ["(empty log)"])[-1][:300]


def _describe(python: Path, fix: str) -> WorkerEnv:
    try:
        result = subprocess.run([str(python), "-c", _QUERY], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        _unavailable(f"{python} does not run ({error}); {fix}")
    if result.returncode != 0:
        _unavailable(f"{python} does not run (exit {result.returncode}: {result.stderr.strip()[-200:]}); {fix}")
    report = json.loads(result.stdout)
    packages: dict[str, str] = report["packages"]
    tf_version = packages.get("tensorflow-cpu") or packages.get("tensorflow") or ""
    if not tf_version.startswith("2.15.") or "tensorflow-estimator" not in packages:
        _unavailable(
            f"{python} has TensorFlow {tf_version or 'none'} and tensorflow-estimator {packages.get('tensorflow-estimator', 'none')}, "
            f"not 2.15 with Estimator; {fix}"
        )
    return WorkerEnv(python=python, tf_version=tf_version, python_version=report["python"], packages=packages)


def tf215_env() -> WorkerEnv:
    """The TF 2.15 worker environment, or a skip (a failure where it is required) saying why and how to fix it."""
    override = os.environ.get("TPUCTL_TF215_PYTHON")
    if override:
        return _describe(Path(override), "TPUCTL_TF215_PYTHON must name a Python with tensorflow-cpu==2.15.* and tensorflow-estimator==2.15.*")
    python = COMPAT_VENV / "bin" / "python"
    failed = COMPAT_VENV / "install-failed.txt"
    if failed.exists():
        _unavailable(
            f"building {COMPAT_VENV.name} (TensorFlow 2.15 for the workers) failed: {_last_error_line(failed)} "
            f"(full log: {failed}). It needs the package registry (pip install -r {REQUIREMENTS.relative_to(ROOT)}) and "
            f"Python 3.9-3.11 (TensorFlow 2.15 has no wheels for newer). Fix that, then run `{BUILD}` "
            f"(or `{BUILD} PYTHON=python3.11`)"
        )
    if not (COMPAT_VENV / ".installed").exists() or not python.exists():
        _unavailable(
            f"{COMPAT_VENV.name} (TensorFlow 2.15 for the workers) is not built: run `{BUILD}` "
            f"(`make test` does it first; ~30-40 s from the package registry)"
        )
    return _describe(python, f"rebuild it: rm -rf {COMPAT_VENV.name} && {BUILD}")


def reports(stdout: str, script: str) -> dict[str, dict[str, object]]:
    """The one JSON line each worker's script printed, by worker tag ("worker:0"), from a launch's console."""
    found: dict[str, dict[str, object]] = {}
    for line in stdout.splitlines():
        if not line.startswith("[") or "] {" not in line:
            continue
        tag, _, text = line[1:].partition("] ")
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("script") == script:
            found[tag] = record
    return found


def outcome(result: subprocess.CompletedProcess[str]) -> str:
    """Everything a failed launch said, for an assertion message."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-3000:]}"


if __name__ == "__main__":  # python -m tests.integration.compat_env: what the fixture would find
    try:
        print(tf215_env())
    except (pytest.skip.Exception, pytest.fail.Exception) as error:
        print(f"{type(error).__name__}: {error}")
        sys.exit(1)


def trained_in_sync(chief: dict[str, object], other: dict[str, object], model_dir: Path) -> None:
    """What custom_loop_mwms.py's two workers report, checked: one model trained in sync (the reduced losses and the
    final weights agree bit for bit, the loss fell), and the chief alone saved its checkpoint."""
    assert chief["losses"] == other["losses"]
    assert chief["weights_sha256"] == other["weights_sha256"]
    losses = chief["losses"]
    assert isinstance(losses, list) and sum(losses[-3:]) < sum(losses[:3]), losses
    assert chief["is_chief"] is True and other["is_chief"] is False
    assert chief["saved"] == "ckpt-1" and other["saved"] is None
    # the chief's checkpoint alone, beside the run's view tpuctl publishes (MODEL_DIR/tpuctl/RUN_ID/view.json)
    assert sorted(p.name for p in model_dir.iterdir()) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index", "tpuctl"]

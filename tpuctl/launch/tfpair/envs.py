"""The environments a rehearsal runs a TPU image's TensorFlow in: one venv per TensorFlow line, Python and pins, under
tpuctl's cache (platformdirs: ~/.cache/tpuctl/rehearse/ on Linux, XDG_CACHE_HOME honoured), built once by pip from
the package index (pip's own configuration: PIP_INDEX_URL, pip.conf) and reused by every later rehearsal.

A build is atomic: the venv is made in a temporary folder beside its place, pip installs into it, a `.ready` marker is
written last, and only then is the folder renamed into place. A failed, interrupted or timed-out build leaves nothing
that is used: its temporary folder is removed (one left by a killed tpuctl is removed by the next build of the same
environment), and pip's output stays in a log beside it for the error line to name. Two launches building the same
environment at once each build their own; the first rename wins and the other uses it.

TPUCTL_REHEARSE_PYTHON_<X>_<Y> (TPUCTL_REHEARSE_PYTHON_2_15=/opt/tf215/bin/python) names an interpreter that already
has that TensorFlow line, used instead of building one (checked first: it must have it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.safety import reaper
from tpuctl.tpu.software import PYTHONS_FOR_TENSORFLOW

READY = ".ready"
BUILDING = ".building-"
# pip install of tensorflow-cpu 2.21 took ~25 s from the registry (FIELD-NOTES); 30 minutes is a slow link, not a hang.
BUILD_TIMEOUT_S = 1800.0
VENV_TIMEOUT_S = 300.0  # `python -m venv` with ensurepip: seconds
OVERRIDE = "TPUCTL_REHEARSE_PYTHON_{}_{}"
_PYTHON_VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"


def pins(tensorflow: tuple[int, ...]) -> tuple[str, ...]:
    """What pip installs for a TensorFlow line: its CPU build (tensorflow on macOS, where tensorflow-cpu has no wheels)
    with the Keras that line brings itself (Keras 3 from 2.16: its wheels require keras>=3); up to 2.15 also
    tensorflow-estimator of the same line and numpy<2, as the compatibility tests' TensorFlow 2.15 has them
    (tests/integration/scripts/compat/requirements-tf215.txt)."""
    line = f"{tensorflow[0]}.{tensorflow[1]}.*"
    build = "tensorflow" if sys.platform == "darwin" else "tensorflow-cpu"
    if tuple(tensorflow[:2]) >= (2, 16):
        return (f"{build}=={line}",)
    return (f"{build}=={line}", f"tensorflow-estimator=={line}", "numpy<2")


def python_in(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@dataclass(frozen=True)
class Env:
    """One environment: where it lives, the Python it is built from and what pip installs into it."""

    folder: Path
    base_python: str
    pins: tuple[str, ...]

    @property
    def python(self) -> Path:
        return python_in(self.folder)

    @property
    def log(self) -> Path:
        return self.folder.with_name(self.folder.name + ".log")

    @property
    def ready(self) -> bool:
        return (self.folder / READY).is_file() and self.python.exists()


def cache_root() -> Path:
    from platformdirs import user_cache_path  # here, not at the top: `--help` imports nothing it need not

    return user_cache_path("tpuctl") / "rehearse"


def python_version(python: str) -> tuple[int, int]:
    """The X.Y of an interpreter (this one's in-process), bounded."""
    if python == sys.executable:
        return sys.version_info[0], sys.version_info[1]
    try:
        done = reaper.run([python, "-c", _PYTHON_VERSION], timeout=20.0, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        major, minor = done.stdout.strip().split(".")
        return int(major), int(minor)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        raise TpuctlError(f"cannot run {python} to build the rehearsal's environment from it") from None


def planned(tensorflow: tuple[int, ...], base_python: str, extra: Sequence[str] = (), root: Path | None = None) -> Env:
    """The environment for a TensorFlow line built from `base_python`, plus `extra` pins; refused in one line where
    that TensorFlow has no wheels for that Python (software.PYTHONS_FOR_TENSORFLOW)."""
    py = python_version(base_python)
    line = (tensorflow[0], tensorflow[1])
    supported = PYTHONS_FOR_TENSORFLOW.get(line)
    if supported is not None and not supported[0] <= py <= supported[1]:
        (lo, hi) = supported
        raise TpuctlError(
            f"TensorFlow {line[0]}.{line[1]} has wheels for Python {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}, and the rehearsal's environment "
            f"would be built from Python {py[0]}.{py[1]} ({base_python})",
            hint=f"give --python with a Python {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]} to build it from",
        )
    wanted = (*pins(tensorflow), *extra)
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    folder = (root or cache_root()) / f"tf{line[0]}.{line[1]}-py{py[0]}.{py[1]}-{digest}"
    return Env(folder, base_python, wanted)


def override(tensorflow: tuple[int, ...]) -> tuple[str, str] | None:
    """The variable naming an interpreter for this TensorFlow line, and its value, where set."""
    name = OVERRIDE.format(tensorflow[0], tensorflow[1])
    value = os.environ.get(name, "")
    return (name, value) if value else None


def ensure(env: Env, notice: Callable[[str], None]) -> None:
    """The environment, built now where it is not ready yet (see the module's docstring)."""
    if env.ready:
        return
    root = env.folder.parent
    root.mkdir(parents=True, exist_ok=True)
    _sweep(root, env.folder.name)
    building = root / f"{BUILDING}{env.folder.name}-{os.getpid()}-{secrets.token_hex(4)}"
    notice(
        f"building the rehearsal's environment once: {' '.join(env.pins)} into {env.folder} (TensorFlow's CPU build: about 1.6 GB "
        f"and half a minute from the package index; pip's output: {env.log})"
    )
    try:
        with open(env.log, "wb") as log:
            _step([env.base_python, "-m", "venv", str(building)], log, VENV_TIMEOUT_S, env)
            pip = [str(python_in(building)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *env.pins]
            _step(pip, log, BUILD_TIMEOUT_S, env)
        (building / READY).write_text(json.dumps({"pins": list(env.pins), "python": env.base_python, "built": time.time()}) + "\n")
        _into_place(building, env)
    finally:
        shutil.rmtree(building, ignore_errors=True)  # gone already where it was moved into place


def _step(argv: list[str], log: object, timeout: float, env: Env) -> None:
    try:
        done = reaper.run(argv, timeout=timeout, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
    except subprocess.TimeoutExpired:
        raise TpuctlError(f"building the rehearsal's environment took more than {timeout:g}s: stopped", hint=f"pip's output: {env.log}") from None
    except OSError as err:
        raise TpuctlError(f"cannot build the rehearsal's environment: {argv[0]}: {err.strerror or err}") from None
    if done.returncode:
        raise TpuctlError(f"could not build the rehearsal's environment ({' '.join(env.pins)}): {_last_error(env.log)}", hint=f"pip's output: {env.log}")


def _last_error(log: Path) -> str:
    """pip's own words for the failure: its last ERROR line, else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()[-200:] if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if line.startswith("ERROR:")]
    return one_line((errors or lines or ["no output"])[-1], 300)


def _into_place(building: Path, env: Env) -> None:
    """Rename the finished build into place; where another launch's build got there first, that one is used."""
    if not env.folder.exists():
        with contextlib.suppress(OSError):  # another build renamed its own in between: it is ready, and used
            os.rename(building, env.folder)
    if not env.ready:  # tpuctl only renames finished builds into place: this folder is someone else's
        raise TpuctlError(f"{env.folder} is in the way of the rehearsal's environment: it is not one tpuctl built", hint=f"remove {env.folder}")


def _sweep(root: Path, name: str) -> None:
    """Temporary folders of this environment's builds whose tpuctl is gone (killed mid-build): removed."""
    for path in root.glob(f"{BUILDING}{name}-*"):
        pid = path.name.removeprefix(f"{BUILDING}{name}-").split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

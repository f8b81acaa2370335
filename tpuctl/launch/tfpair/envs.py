"""The environments a rehearsal runs in: one venv per TensorFlow line, Python, pins and run's requirements, under
tpuctl's cache (platformdirs: ~/.cache/tpuctl/rehearse/ on Linux, XDG_CACHE_HOME honoured), built once by pip from
the package index (--index-url, else pip's own configuration: PIP_INDEX_URL, pip.conf) and reused by every later
rehearsal.

- A TPU image's TensorFlow line (`planned`): its CPU build and Keras, plus the run's requirements.
- The run's requirements over an interpreter that already has the image's TensorFlow (`over`): a venv over it with its
  site-packages visible, as the TPU hosts' environments are made (tpuctl/backends/ssh/environment/host_env.py,
  make_venv), so the script sees what the hosts will: that TensorFlow, and the requirements beside it.

Either way TensorFlow's pins win: they go to pip as constraints, so a requirement that needs another TensorFlow
(tensorflow-text, tf-keras) fails the build in pip's words rather than replacing the TensorFlow rehearsed.

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

from tpuctl.endings import exit_words
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.inputs.redact import url_credentials_hidden
from tpuctl.safety import reaper
from tpuctl.tpu.software import PYTHONS_FOR_TENSORFLOW

READY = ".ready"
BUILDING = ".building-"
# pip install of tensorflow-cpu 2.21 took ~25 s from the registry (FIELD-NOTES); 30 minutes is a slow link, not a hang.
BUILD_TIMEOUT_S = 1800.0
VENV_TIMEOUT_S = 300.0  # `python -m venv` with ensurepip: seconds
OVERRIDE = "TPUCTL_REHEARSE_PYTHON_{}_{}"
_PYTHON_VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"
# An interpreter's own sys.path beyond its standard library, where it is itself a venv: a venv made from it sees only
# its base interpreter's site-packages, so these are named in a .pth file of the new one (host_env.py's HOST_PATHS).
_OWN_PATHS = (
    "import json, sys, sysconfig; std = {sysconfig.get_paths()[k] for k in ('stdlib', 'platstdlib')}; "
    "print(json.dumps([p for p in sys.path if p and p not in std and not p.endswith(('.zip', 'lib-dynload'))] if sys.prefix != sys.base_prefix else []))"
)
_PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"
BASE_PTH = "tpuctl-base.pth"


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


def constraints(tensorflow: tuple[int, ...]) -> tuple[str, ...]:
    """TensorFlow's pins as constraints, for an environment that also gets requirements: whichever build a requirement
    pulls in (tensorflow-text and tf-keras require `tensorflow`) is of the line rehearsed."""
    line = f"{tensorflow[0]}.{tensorflow[1]}.*"
    return (f"tensorflow=={line}", f"tensorflow-cpu=={line}")


def python_in(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@dataclass(frozen=True)
class Env:
    """One environment: where it lives, the Python it is built from and what pip installs into it (the TensorFlow
    line's pins, then the run's requirements), under which constraints, from which index (None: pip's configuration);
    `over_base`: a venv over `base_python` with its site-packages visible."""

    folder: Path
    base_python: str
    pins: tuple[str, ...]
    constraints: tuple[str, ...] = ()
    index_url: str | None = None
    over_base: bool = False

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


def planned(tensorflow: tuple[int, ...], base_python: str, extra: Sequence[str] = (), root: Path | None = None, index_url: str | None = None) -> Env:
    """The environment for a TensorFlow line built from `base_python`, plus `extra` requirements (TensorFlow's pins
    their constraints); refused in one line where that TensorFlow has no wheels for that Python
    (software.PYTHONS_FOR_TENSORFLOW)."""
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
    wanted, bound = (*pins(tensorflow), *extra), constraints(tensorflow) if extra else ()
    folder = (root or cache_root()) / f"tf{line[0]}.{line[1]}-py{py[0]}.{py[1]}-{_digest(wanted, bound, index_url)}"
    return Env(folder, base_python, wanted, bound, index_url)


def over(base_python: str, tensorflow: Sequence[str], requirements: Sequence[str], root: Path | None = None, index_url: str | None = None) -> Env:
    """The run's requirements in a venv over `base_python`, which has the TensorFlow rehearsed: `tensorflow` its exact
    pins (tensorflow==2.21.0), constraints that keep it. One per interpreter (its path is in the key: the venv runs it)."""
    py = python_version(base_python)
    digest = _digest((base_python, *requirements), tuple(tensorflow), index_url)
    return Env((root or cache_root()) / f"over-py{py[0]}.{py[1]}-{digest}", base_python, tuple(requirements), tuple(tensorflow), index_url, over_base=True)


def _digest(wanted: Sequence[str], bound: Sequence[str], index_url: str | None) -> str:
    """What names an environment: everything pip is given (a changed requirement is another environment). The plain
    TensorFlow line's digest is what it was before requirements came in, so its environments stay in use."""
    text = "\n".join(wanted) + ("".join(f"\n-c {line}" for line in bound) + (f"\n--index-url {index_url}" if index_url else ""))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


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
    notice(f"building the rehearsal's environment once: {_contents(env)} into {env.folder} ({_cost(env)}; pip's output: {env.log})")
    try:
        with open(env.log, "wb") as log:
            _step([env.base_python, "-m", "venv", *(["--system-site-packages"] if env.over_base else []), str(building)], log, VENV_TIMEOUT_S, env)
            if env.over_base:
                _see_base(env, building)
            bound = building / "tpuctl-constraints.txt"
            bound.write_text("".join(line + "\n" for line in env.constraints))
            pip = [str(python_in(building)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-c", str(bound), *env.pins]
            _step(pip, log, BUILD_TIMEOUT_S, env)
        marker = {"pins": list(env.pins), "constraints": list(env.constraints), "python": env.base_python, "built": time.time()}
        (building / READY).write_text(json.dumps(marker) + "\n")
        _into_place(building, env)
    finally:
        shutil.rmtree(building, ignore_errors=True)  # gone already where it was moved into place


def _contents(env: Env) -> str:
    """What an environment holds, in words (the index's credentials never shown)."""
    if env.over_base:
        return f"{' '.join(env.pins)} over {env.base_python} (its site-packages visible; kept: {' '.join(env.constraints)})"
    return " ".join(env.pins) + (f" from {url_credentials_hidden(env.index_url)}" if env.index_url else "")


def _cost(env: Env) -> str:
    return "the run's requirements alone" if env.over_base else "TensorFlow's CPU build: about 1.6 GB and half a minute from the package index"


def _see_base(env: Env, building: Path) -> None:
    """Where the base interpreter is itself a venv, its own site-packages named in a .pth file of the new venv, after
    the venv's own: the base's packages (its TensorFlow) are seen, and pip installs only what they lack."""
    paths = json.loads(_ask(env.base_python, _OWN_PATHS))
    if paths:
        purelib = Path(_ask(str(python_in(building)), _PURELIB).strip())
        (purelib / BASE_PTH).write_text("".join(path + "\n" for path in paths))


def _ask(python: str, code: str) -> str:
    try:
        done = reaper.run([python, "-c", code], timeout=60.0, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, env=_quiet_env(None))
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TpuctlError(f"cannot build the rehearsal's environment: {python} did not answer ({err})") from None
    if done.returncode:
        raise TpuctlError(f"cannot build the rehearsal's environment: {python}: {one_line(done.stderr, 300, last=True) or exit_words(done.returncode)}")
    return str(done.stdout)


def _quiet_env(index_url: str | None) -> dict[str, str]:
    """This environment for pip and the interpreters asked, less PYTHONPATH (it would be seen as the base's own paths,
    and pip would count what is there as installed); the run's index in PIP_INDEX_URL, never on a command line."""
    environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    return {**environ, "PIP_INDEX_URL": index_url} if index_url else environ


def _step(argv: list[str], log: object, timeout: float, env: Env) -> None:
    try:
        done = reaper.run(argv, timeout=timeout, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False, env=_quiet_env(env.index_url))
    except subprocess.TimeoutExpired:
        raise TpuctlError(f"building the rehearsal's environment took more than {timeout:g}s: stopped", hint=f"pip's output: {env.log}") from None
    except OSError as err:
        raise TpuctlError(f"cannot build the rehearsal's environment: {argv[0]}: {err.strerror or err}") from None
    if done.returncode:
        what = one_line(" ".join(env.pins), 200)
        raise TpuctlError(f"could not build the rehearsal's environment ({what}): {_last_error(env.log)}", hint=f"pip's output: {env.log}")


def _last_error(log: Path) -> str:
    """pip's own words for the failure: its last ERROR line (a conflict's first, with what caused it), else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()[-200:] if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if line.startswith("ERROR:") and not line.startswith("ERROR: ResolutionImpossible")]
    said = (errors or lines or ["no output"])[-1]
    if "The conflict is caused by:" in lines:  # pip's resolver names the requirements that clash on the lines after it
        causes = lines[lines.index("The conflict is caused by:") + 1 :]
        causes = causes[: next((i for i, line in enumerate(causes) if line.startswith("To fix")), len(causes))]
        said = said.replace(" because these package versions have conflicting dependencies.", ":") + " " + "; ".join(causes)
    return one_line(said, 400)


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

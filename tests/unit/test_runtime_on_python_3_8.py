"""The runtime shipped to hosts imports under the oldest Python a host runs (TPU VM images of TensorFlow 2.12 and older:
3.8). Syntax alone does not tell: a `dict[str, Any]` alias or a `A | B` union evaluated at import fails only there."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tpuctl.launch.runtime_files import runtime_paths

# Imported by the script's own imports only (TensorFlow's stand-ins of a rehearsal need TensorFlow itself).
NEEDS = ("tensorflow", "jax", "keras", "numpy")
PROBE = """
import importlib, json, sys
needs, bad = sys.argv[1].split(","), {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in needs:
            bad[name] = repr(err)
    except BaseException as err:
        bad[name] = repr(err)
print(json.dumps(bad))
"""


def test_every_runtime_module_imports_on_python_3_8() -> None:
    bases = [*sorted(glob.glob(f"{Path.home()}/.pyenv/versions/3.8*/bin/python3.8")), shutil.which("python3.8") or ""]
    python = next((b for b in bases if b and os.access(b, os.X_OK)), None)
    if python is None:
        pytest.skip("no Python 3.8 on this machine (a TPU VM image of TensorFlow 2.12 and older runs 3.8)")
    modules = [p[:-3].replace("/", ".").removesuffix(".__init__") for p in runtime_paths() if not p.endswith("__main__.py")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-c", PROBE, ",".join(NEEDS), *modules], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "{}", done.stdout

"""Regenerate the event files in this folder with TensorFlow's own writers (see README.md).

    .venv/bin/python tests/data/tfevents/make_fixtures.py

Each script under scripts/ runs in the interpreter named below, writing into a scratch
folder; the event files it leaves are copied here under stable names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TF221 = ROOT / ".venv" / "bin" / "python"
TF215 = ROOT / ".venv-tf215" / "bin" / "python"
# name -> (interpreter, script, extra environment); a Keras fit leaves train/ and validation/ files
FIXTURES = {
    "tf2.21-summary": (TF221, "summaries.py", {}),
    "tf2.15-summary": (TF215, "summaries.py", {}),
    "keras3-fit": (TF221, "keras_fit.py", {}),
    "tf-keras-fit": (TF221, "keras_fit.py", {"TF_USE_LEGACY_KERAS": "1"}),
    "tf2.15-keras2-fit": (TF215, "keras_fit.py", {}),
    "tensorboard-writer": (TF221, "tensorboard_writer.py", {}),
}


def main() -> None:
    for name, (python, script, env) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as scratch:
            done = subprocess.run(
                [str(python), str(HERE / "scripts" / script), scratch],
                env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **env},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                sys.exit(f"{name}: {done.stderr[-2000:]}")
            for path in sorted(Path(scratch).rglob("*.tfevents.*")):
                part = path.parent.name if path.parent != Path(scratch) else ""
                target = HERE / (f"{name}-{part}.tfevents" if part else f"{name}.tfevents")
                shutil.copyfile(path, target)
                print(f"{target.name}: {target.stat().st_size} bytes")


if __name__ == "__main__":
    main()

"""This tpuctl, and nothing else of its environment, on the path of a worker run by another Python."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def put_tpuctl_on_path(env: MutableMapping[str, str], folder: Path) -> None:
    """Link this tpuctl package into `folder` and put `folder` first on env's PYTHONPATH.

    A --python from another environment must import this very tpuctl (for
    `python -m tpuctl.runtime`), but putting our own site-packages on its path
    would drag every other package of this environment (a second TensorFlow)
    into the worker: so a folder holding only a link to the package.
    """
    link = folder / "tpuctl"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        link.symlink_to(_PACKAGE_DIR, target_is_directory=True)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))

"""Ship templates/ in the wheel: pyproject.toml's build_py and sdist commands (not a template).

The templates live at the repository's top level, outside the `tpuctl` package, so setuptools'
package data cannot name them. The wheel's build copies them to `tpuctl/script_templates/`,
where tpuctl/scaffold.py looks first; an editable install builds nothing and reads templates/
in the checkout. The sdist carries templates/ as it is, so a wheel built from it has them too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py as _build_py
from setuptools.command.sdist import sdist as _sdist

HERE = Path(__file__).resolve().parent
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


class BuildPy(_build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # pip install -e: tpuctl reads templates/ where it is
        target = Path(self.build_lib) / "tpuctl" / "script_templates"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(HERE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_build.py"))


class Sdist(_sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        shutil.copytree(HERE, Path(base_dir) / "templates", ignore=SKIP, dirs_exist_ok=True)

"""Real wheels, made in a test: what pip reads of a project (its metadata, its files), without a build or a network.

A wheel is a zip archive of the project's files and a `NAME-VERSION.dist-info` folder (PEP 427): METADATA (its name,
version, Requires-Dist, Requires-Python: the core metadata spec), WHEEL, RECORD, and entry_points.txt for its console
scripts. pip resolves and installs these as any other (it writes each file's hash into RECORD as it installs); a folder
of them is an index for `--find-links`, and tests/standins/package_index.py serves one over HTTP. Made in the test
process, with no pip run: the one way the tests make wheels (a `pip wheel` of a source package costs seconds each).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from pathlib import Path


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    files: Mapping[str, str | bytes] | None = None,
    requires: tuple[str, ...] = (),
    *,
    requires_python: str | None = None,
    scripts: Mapping[str, str] | None = None,
) -> Path:
    """`NAME-VERSION-py3-none-any.whl` in `folder`, holding `files` (path -> text or bytes, deflated as pip's own
    builds are, so a file of zeros makes a small wheel that installs large), declaring `requires` (Requires-Dist),
    `requires_python` and an extra, `extra-one`, that adds nothing; `scripts`: console scripts, NAME -> "module:function"."""
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}"
    info = f"{stem}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nProvides-Extra: extra-one\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    metadata += f"Requires-Python: {requires_python}\n" if requires_python else ""
    members: dict[str, str | bytes] = {
        **(files or {}),
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tpuctl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if scripts:
        members[f"{info}/entry_points.txt"] = "[console_scripts]\n" + "".join(f"{script} = {target}\n" for script, target in scripts.items())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for member, content in members.items():
            wheel.writestr(member, content)
        wheel.writestr(f"{info}/RECORD", "".join(f"{member},,\n" for member in [*members, f"{info}/RECORD"]))
    return path

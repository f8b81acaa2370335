"""Real wheels, made in a test: what pip reads of a project (its metadata, its files), without a build or a network.

A wheel is a zip archive of the project's files and a `NAME-VERSION.dist-info` folder (PEP 427): METADATA, WHEEL and
RECORD. pip resolves and installs these as any other; a folder of them is an index for `--find-links`."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str, files: Mapping[str, str] | None = None, requires: tuple[str, ...] = ()) -> Path:
    """`NAME-VERSION-py3-none-any.whl` in `folder`, holding `files` (path -> text) and declaring `requires`
    (Requires-Dist) and an extra, `extra-one`, that adds nothing."""
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}"
    info = f"{stem}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nProvides-Extra: extra-one\n"
    members = {
        **(files or {}),
        f"{info}/METADATA": metadata + "".join(f"Requires-Dist: {requirement}\n" for requirement in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tpuctl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in members.items():
            wheel.writestr(member, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{member},,\n" for member in [*members, f"{info}/RECORD"]))
    return path

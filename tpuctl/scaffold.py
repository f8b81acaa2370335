"""`tpuctl new`: the script templates of the repository's top-level templates/, found and copied.

The templates are plain folders (`templates/NAME/`: a training script, its README, and a
`template.toml` with a one-line description and the command that runs it), kept outside the
package so that a newcomer reads them as the project's own examples. A wheel carries them as
`tpuctl/script_templates/` (the build copies them there: templates/_build.py); a checkout or
an editable install reads templates/ itself. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs import parse as inputs
from tpuctl.inputs import private_files
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

_HERE = Path(__file__).resolve().parent
# Where the templates are, first found wins: inside an installed wheel, then beside the package in a checkout.
LOCATIONS = (_HERE / "script_templates", _HERE.parent / "templates")
METADATA = "template.toml"  # read by tpuctl, not copied: the new folder holds only what the user runs and reads
_NOT_COPIED = {METADATA, "__pycache__"}


@dataclass(frozen=True)
class Template:
    name: str
    description: str
    run: str  # the command that runs it, from inside the new folder
    path: Path


def root() -> Path:
    """The folder holding the templates; a tpuctl without one was installed wrongly, which is worth saying."""
    for location in LOCATIONS:
        if location.is_dir():
            return location
    raise TpuctlError(
        "this tpuctl has no script templates", hint=f"looked in {', '.join(map(str, LOCATIONS))}; reinstall tpuctl from its source", exit_code=FAILED
    )


def _read(folder: Path) -> Template:
    text = inputs.read_small_text(folder / METADATA, f"template {folder.name}'s {METADATA}", exit_code=FAILED) or ""
    data = tomllib.loads(text)
    return Template(folder.name, str(data["description"]), str(data["run"]), folder)


def available() -> list[Template]:
    """Every template, by name: each folder of the templates that has a template.toml."""
    base = root()
    return [_read(folder) for folder in sorted(base.iterdir()) if (folder / METADATA).is_file()]


def find(name: str) -> Template:
    """The template called `name`; an unknown one is refused naming the known ones."""
    known = available()
    for template in known:
        if template.name == name:
            return template
    names = ", ".join(t.name for t in known)
    raise TpuctlError(f"no template {inputs.shown(name)}", hint=f"one of: {names}; `tpuctl new --list` describes them")


def _target(directory: str) -> Path:
    """`directory` as a new or empty folder to write into; anything else is refused before a byte is written."""
    inputs.check_text(directory, "DIR")
    if any(not c.isprintable() for c in directory):
        raise TpuctlError(f"DIR {inputs.shown(directory)} has control characters in its name", hint="name a plain folder")
    path = Path(directory)
    try:
        looping = path.is_symlink() and not path.exists()
        is_file, is_dir = path.exists() and not path.is_dir(), path.is_dir()
        empty = not is_dir or next(os.scandir(path), None) is None
    except OSError as error:  # a name too long, a folder that cannot be read
        raise TpuctlError(f"DIR {inputs.shown(directory)}: {error.strerror}", hint="name a new or empty folder") from None
    if looping:
        raise TpuctlError(f"DIR {inputs.shown(directory)} is a broken or looping symlink", hint="name a new or empty folder")
    if is_file:
        raise TpuctlError(f"DIR {inputs.shown(directory)} exists and is not a folder", hint="name a new or empty folder")
    if not empty:
        raise TpuctlError(f"DIR {inputs.shown(directory)} is not empty", hint="tpuctl new writes only into a new or empty folder; nothing was changed")
    if is_dir:  # whoever else owns or can write it could plant a symlinked subfolder where a template file goes
        private_files.check_private(path, follow=True, hint="name a new folder, or an empty one of yours (chmod go-w); nothing was written")
    return path


def write(name: str, directory: str) -> list[Path]:
    """Copy template `name` into `directory` (new or empty); return the files written, relative to it.

    Files are created exclusively ('x'), so a file that appears in the folder meanwhile is never overwritten."""
    template = find(name)
    target = _target(directory)
    sources = sorted(p for p in template.path.rglob("*") if p.is_file() and not _NOT_COPIED & set(p.relative_to(template.path).parts))
    written: list[Path] = []
    try:
        target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            relative = source.relative_to(template.path)
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            with source.open("rb") as src, (target / relative).open("xb") as dst:
                shutil.copyfileobj(src, dst)
            written.append(relative)
    except FileExistsError as error:
        raise TpuctlError(f"{error.filename} appeared while tpuctl new wrote into {inputs.shown(directory)}", hint="not overwritten", exit_code=USAGE) from None
    except OSError as error:
        raise TpuctlError(f"cannot write into {inputs.shown(directory)}: {error.strerror}", exit_code=FAILED) from None
    return written

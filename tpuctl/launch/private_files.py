"""How tpuctl writes files: never through a symlink it did not mean to follow, never wider than needed.

A launch's plan, manifest and outcome can hold `--env` values (tokens, keys), so
they are written 0600 inside 0700 folders: on a shared machine another user can
read neither. Every write goes to a temporary file beside the target and is
renamed over it, so a reader never sees half a file and a symlink planted at the
target is replaced, not followed (rename never follows its destination).

Three ways to write, for three kinds of file:
  write_private   tpuctl's own records (plan.json, outcome.json, manifest.yaml): 0600.
  write_new_file  files the user asked for (tf-config --format dir): a symlink at
                  the target is refused, the mode is the usual 0666 less the umask.
  write_through   the user's own config file, which may be a symlink into a dotfiles
                  repository: the link's target is replaced, keeping its mode (as
                  editors do); a new file is 0600.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from tpuctl.errors import FAILED, TpuctlError

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
# Variable names whose values human output hides (`launch --dry-run`); --json and the files keep them.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASS(WORD|WD)?($|_)|(^|_)(API_?)?KEY($|_)|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION", re.IGNORECASE)


def shown_value(name: str, value: str) -> str:
    """`value` as human output shows it: hidden when the name looks like a secret's.

    The plan on screen is for checking names and shapes; values such as tokens
    would otherwise land in terminal scrollback, CI logs and pasted bug reports.
    """
    return f"<hidden: {len(value)} characters>" if value and _SECRET_NAME.search(name) else value


def private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Create `path` and its missing parents as 0700 folders.

    `tighten`: an existing `path` of this user's is narrowed to 0700 too (tpuctl's
    own attempt folders); leave it False for a folder the user named (--log-dir),
    whose mode is theirs to choose.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a concurrent launch made it first
            folder.mkdir(mode=PRIVATE_DIR)
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    if tighten and path not in missing:
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600, replacing whatever was there (a symlink included)."""
    _replace(path, text, PRIVATE_FILE)


def write_new_file(path: Path, text: str) -> None:
    """Write a file the user asked for; a symlink at `path` is refused in one line (TpuctlError)."""
    if path.is_symlink():
        raise TpuctlError(f"{path} is a symlink; tpuctl does not write through it", hint="remove it or pick another folder", exit_code=FAILED)
    _replace(path, text, 0o666 & ~_umask())


def write_through(path: Path, text: str) -> Path:
    """Replace the file `path` names, following symlinks to the real file, and keep its mode.

    Returns the file written. A new file is 0600: a config file may name credentials.
    """
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = PRIVATE_FILE
    _replace(target, text, mode)
    return target


def _replace(path: Path, text: str, mode: int) -> None:
    """Temporary file in the same folder (created 0600 by mkstemp), given `mode`, renamed over `path`."""
    import tempfile  # here, not at the top: `launch --help` imports this module

    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            if mode != PRIVATE_FILE:
                os.fchmod(stream.fileno(), mode)
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _umask() -> int:
    """The process umask; os.umask can only read it by setting it, so set it back at once."""
    current = os.umask(0o022)
    os.umask(current)
    return current

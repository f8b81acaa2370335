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

Every folder tpuctl writes into goes through `private_dir`: made 0700, and refused
when it exists but another user owns it or can write it. `hold_new` / `is_held`:
a file whose lock lives exactly as long as the process that made it, so a record
names a live process only while that process lives (never a recycled pid).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from tpuctl.inputs.errors import FAILED, TpuctlError

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def private_dir(path: Path, *, tighten: bool = True, hint: str | None = None) -> Path:
    """Create `path` and its missing parents as 0700 folders; refuse an existing one that is not this user's own.

    `tighten`: tpuctl's own folder (an attempt folder, the registry): a symlink in its
    place is refused and one of this user's is narrowed to 0700. Leave it False for a
    folder the user named (--log-dir): it may be their symlink to a folder of theirs, and
    its mode is theirs to choose, as long as no other user can write it. `hint`: what
    the user can do instead (default: remove it, tpuctl makes it afresh).
    """
    missing = [p for p in (path, *path.parents) if not p.exists() and not p.is_symlink()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a concurrent launch made it first
            folder.mkdir(mode=PRIVATE_DIR)
    info = check_private(path, follow=not tighten, hint=hint)
    if tighten and path not in missing and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
    return path


def check_private(folder: Path, *, follow: bool = False, hint: str | None = None) -> os.stat_result:
    """The folder's stat, once it is known to be a folder of this user's that no one else can write.

    Whoever else owns or can write a folder tpuctl writes into can plant a symlink where
    a log or record goes (tpuctl would overwrite its target) and read what lands there.
    Refused in one line (TpuctlError, exit 2); a plain file in its place is NotADirectoryError.
    `follow`: a symlink is followed, if it is this user's (or root's) own.
    """
    link = os.lstat(folder)
    info = os.stat(folder) if follow and stat.S_ISLNK(link.st_mode) else link
    me = os.getuid()
    if stat.S_ISLNK(link.st_mode) and not follow:
        problem = "is not a directory (a symlink?)"
    elif stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
        problem = f"is a symlink that belongs to uid {link.st_uid}, not to this user ({me})"
    elif not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    elif info.st_uid != me:
        problem = f"belongs to uid {info.st_uid}, not to this user ({me})"
    elif stat.S_IMODE(info.st_mode) & 0o022:
        problem = f"is writable by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    else:
        return info
    raise TpuctlError(f"{folder} {problem}; tpuctl writes only into folders of yours that others cannot write",
                      hint=hint or f"remove {folder}; tpuctl recreates it private (0700)")


def hold_new(path: Path, text: str) -> int:
    """Create `path` afresh (0600; never an existing file, never through a symlink), lock it, write `text`.

    The lock lasts as long as the returned descriptor is open, that is at most as long as
    this process: `is_held` then tells a live owner from a dead one, whatever became of its
    pid. FileExistsError when `path` exists. The lock is taken before the text is written,
    so a complete file that nobody holds is certainly a dead owner's.
    """
    import fcntl  # here, not at the top: `launch --help` imports this module

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return fd


def is_held(path: Path) -> bool:
    """True while the process that made `path` with `hold_new` keeps its descriptor open.

    OSError when `path` cannot be opened (FileNotFoundError: no such file)."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


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


def replace_in(folder: int, name: str, text: str, mode: int = PRIVATE_FILE) -> None:
    """Write `text` as `name` in the folder open as `folder` (a descriptor checked once: a path swapped meanwhile cannot
    send the file elsewhere): a temporary file made there afresh (0600), given `mode`, renamed over `name`, so a symlink
    there is replaced, never followed. What every write here does, in the folder its path names."""
    import secrets

    temporary = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE, dir_fd=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            if mode != PRIVATE_FILE:
                os.fchmod(stream.fileno(), mode)
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise


def _replace(path: Path, text: str, mode: int) -> None:
    """Temporary file in the same folder, given `mode`, renamed over `path` (replace_in, in `path`'s folder)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        replace_in(folder, path.name, text, mode)
    finally:
        os.close(folder)


def _umask() -> int:
    """The process umask; os.umask can only read it by setting it, so set it back at once."""
    current = os.umask(0o022)
    os.umask(current)
    return current

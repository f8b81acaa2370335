"""What is this user's own, checked once and then held: a folder opened as it was checked, a file of theirs.

What tpuctl deletes or signals on a record's word, and where it writes a run's files, is decided by these checks
(issue 46: nothing written, deleted or signalled through a link that leaves the user's own folders): a folder is
opened as it was found to be theirs and closed to other users (check_private), and what is done in it goes by name
in that open folder, so a path changed meanwhile cannot send the deletion or the file elsewhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.private_files import check_private


def open_own(path: Path, what: str, nothing: str, *, follow: bool = False, hint: str | None = None) -> int | None:
    """The folder `path`, open as it was checked (whatever its path leads to later) once it is this user's own and no
    one else can write it (check_private; `follow`: a symlink of the user's to it is followed); None where it is gone.
    Else one line: `WHAT PATH is ...; NOTHING` (`what`: the run records folder, run X's log folder)."""
    try:
        info = check_private(path, follow=follow)
        directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except TpuctlError as err:  # not yours, a symlink, writable by others: one line, exit 2
        raise TpuctlError(f"{what} {err.message}; {nothing}", hint=hint or err.hint, exit_code=err.exit_code) from None
    except OSError as err:
        raise TpuctlError(f"{what} {one_line(str(path))} cannot be checked: {err.strerror or err}; {nothing}", exit_code=FAILED) from None
    opened = os.fstat(directory)
    if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
        os.close(directory)
        raise TpuctlError(f"{what} {one_line(str(path))} changed while it was checked; {nothing}", exit_code=FAILED)
    return directory


def mine(info: os.stat_result) -> bool:
    """A regular file of this user's (an lstat: a symlink is none)."""
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()

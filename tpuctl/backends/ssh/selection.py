"""Which files --sync sends, and how much that is, decided on this machine before anything connects.

In a git checkout git lists them: `git ls-files -co --exclude-standard` (tracked files, and untracked ones
that .gitignore, .git/info/exclude and core.excludesFile leave), less what `.tpuctlignore` files exclude
(`git ls-files -coi --exclude-per-directory=.tpuctlignore`), so both follow git's rules by construction.
Elsewhere (no checkout, no git) ignore_rules.py applies the same rules itself. `__pycache__` never goes.

Each path is then looked at without following links: a regular file goes; a symbolic link goes as a link
when its target is relative and stays inside the folder, else it is left out (the link is never followed,
its target never read); a directory (a nested repository, a submodule) and a FIFO, socket or device are left
out; a file this user cannot read stops the launch, since rsync would fail on it halfway.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field

from tpuctl.backends.ssh.ignore_rules import walk
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.inputs.parse import format_size
from tpuctl.safety import reaper

DEFAULT_LIMIT = 1 << 30  # per host; a data set beside the script is a job for a bucket, not for --sync
NEVER = ("__pycache__",)
GIT_TIMEOUT_S = 120.0
_SHOWN = 3  # the largest files a refusal names; a dry run shows a few more
LIMIT_HINT = "add them to .tpuctlignore or .gitignore, raise --sync-limit SIZE, or pass --sync-large"


@dataclass(frozen=True)
class Selection:
    """What --sync sends from `folder`: each file or link (relative path, bytes), sorted by path, what is left
    out and why, and who chose the files ("git" or "ignore files")."""

    folder: str
    files: tuple[tuple[str, int], ...]
    left_out: tuple[tuple[str, str], ...] = ()
    chooser: str = "ignore files"
    links: frozenset[str] = field(default_factory=frozenset)

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)

    def largest(self, count: int = _SHOWN) -> list[tuple[str, int]]:
        return sorted(self.files, key=lambda item: (-item[1], item[0]))[:count]

    def summary(self, hosts: int) -> str:
        """`sync: 124 files, 3.1 MiB to each of 4 hosts (12.4 MiB in all)`."""
        each = f"to each of {hosts} hosts ({format_size(self.size * hosts)} in all)" if hosts > 1 else "to 1 host"
        return f"sync: {len(self.files)} file(s), {format_size(self.size)} {each}"

    def left_out_line(self) -> str | None:
        if not self.left_out:
            return None
        named = ", ".join(f"{path} ({why})" for path, why in self.left_out[:5])
        more = f" and {len(self.left_out) - 5} more" if len(self.left_out) > 5 else ""
        return f"sync: left out: {named}{more}"

    def over(self, limit: int) -> str | None:
        """Why the selection may not go without --sync-large, or None."""
        if self.size <= limit:
            return None
        largest = ", ".join(f"{path} ({format_size(size)})" for path, size in self.largest())
        return f"--sync would send {format_size(self.size)} to each host, over the {format_size(limit)} limit; largest: {largest}"

    def to_json(self, hosts: int, limit: int, large: bool) -> dict[str, object]:
        return {
            "summary": self.summary(hosts),
            "chooser": self.chooser,
            "files": [list(item) for item in self.files],
            "links": sorted(self.links),
            "bytes": self.size,
            "hosts": hosts,
            "bytes_in_all": self.size * hosts,
            "limit": limit,
            "over_limit": self.over(limit) is not None and not large,
            "left_out": [list(item) for item in self.left_out],
        }


def select(folder: str) -> Selection:
    """The files --sync sends from `folder` (see the module's docstring)."""
    listed = git_listing(folder)
    chooser = "git" if listed is not None else "ignore files"
    paths = listed if listed is not None else list(walk(folder))
    files, left_out, unreadable, links = [], [], [], set()
    root = os.path.realpath(folder)
    for path in sorted(set(paths)):
        if any(part in NEVER for part in path.split("/")):
            continue
        full = os.path.join(folder, path)
        try:
            info = os.lstat(full)
        except FileNotFoundError:
            continue  # tracked but deleted here: nothing to send
        except OSError as err:
            unreadable.append(f"{path} ({err.strerror})")
            continue
        why = _not_sent(full, info, root)
        if why is not None:
            left_out.append((path, why))
        elif stat.S_ISREG(info.st_mode) and not os.access(full, os.R_OK):
            unreadable.append(path)
        else:
            files.append((path, info.st_size))
            if stat.S_ISLNK(info.st_mode):
                links.add(path)
    if unreadable:
        raise TpuctlError(
            f"--sync cannot read {len(unreadable)} file(s) in {folder}: " + ", ".join(unreadable[:5]),
            hint="make them readable, or add them to .tpuctlignore",
        )
    return Selection(folder, tuple(files), tuple(left_out), chooser, frozenset(links))


def _not_sent(full: str, info: os.stat_result, root: str) -> str | None:
    """Why a listed path is left out, or None when it goes."""
    if stat.S_ISREG(info.st_mode):
        return None
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(full)
        if os.path.isabs(target):
            return f"a symbolic link to {target}: absolute links are not sent"
        resolved = os.path.realpath(full)
        if os.path.commonpath([root, resolved]) != root:
            return f"a symbolic link out of the folder, to {target}"
        return None
    if stat.S_ISDIR(info.st_mode):
        return "a git repository of its own"
    return "a FIFO, socket or device"


def git_listing(folder: str) -> list[str] | None:
    """The paths git would have in `folder` (relative to it), or None when it is not in a git checkout or git is missing."""
    git = shutil.which("git")
    if git is None:
        return None
    inside = _git(git, folder, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.strip() != b"true":
        return None
    kept = _git(git, folder, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    dropped = _git(git, folder, "ls-files", "-z", "--cached", "--others", "--ignored", "--directory", "--exclude-per-directory=.tpuctlignore")
    if kept is None or dropped is None:
        raise TpuctlError(f"git could not list the files of {folder}", hint="run `git ls-files` there to see why")
    excluded = [os.fsdecode(entry) for entry in dropped.split(b"\0") if entry]
    gone = {path for path in excluded if not path.endswith("/")}
    folders = tuple(path for path in excluded if path.endswith("/"))
    listed = [os.fsdecode(entry) for entry in kept.split(b"\0") if entry]
    return [path.rstrip("/") if path.endswith("/") else path for path in listed if path not in gone and not path.startswith(folders)]


def _git(git: str, folder: str, *args: str) -> bytes | None:
    """stdout of `git -C folder ARGS`, or None when git fails there."""
    import subprocess

    try:
        done = reaper.run([git, "-C", folder, *args], capture_output=True, check=False, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as err:
        raise TpuctlError(f"git failed in {folder}: {one_line(str(err))}") from None
    return done.stdout if done.returncode == 0 else None

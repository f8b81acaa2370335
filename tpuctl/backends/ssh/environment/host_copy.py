# An environment built once and handed to the other hosts of the same Python, instead of pip on each: the third
# part of the host's program, sent after cache.py's and host_env.py's text and before host_build.py's
# (environment/remote.py), written as they are (standard library, old Python 3 syntax, no backslash, no multi-line
# string).
#
# The host that built the lock's environment packs it (`pack-env KEY`: a tar on stdout, its markers left out); the
# launcher keeps that once and sends it after a header to each other host whose environment has the same KEY (the
# lock and the same Python: executable, version, platform), which unpacks it (`copy KEY SIZE`) into a scratch folder
# beside its place, makes the paths that name the sender's folder name its own, and renames it into place with
# .ready written last, as a build does. What the tar may hold is what a venv holds: relative names, folders, files,
# and the links a venv makes (bin/python*, lib64), no member through a link, no more bytes than the header said.
#
# Which files name the venv's own folder, checked on an environment pip built (pip 23, CPython 3.8-3.12): bin/'s
# scripts (shebangs, activate*) and pyvenv.cfg (home, and `command` from 3.11). RECORD names a script relative to
# site-packages (../../../bin/NAME), INSTALLER says "pip", the only .pth of tpuctl's names the host Python's own
# folders, and a lock installs no direct URL (no direct_url.json). The .pyc files name the folder they were compiled
# in (co_filename), which CPython replaces with the source's path as it loads them: SourceLoader.get_code passes the
# source path to _compile_bytecode, which calls _imp._fix_co_filename (Lib/importlib/_bootstrap_external.py, in
# every CPython 3); their source-mtime check holds because the tar keeps each file's mtime in whole seconds.

import os
import sys

TYPE_CHECKING = False  # typing costs the start; mypy treats this name as True
if TYPE_CHECKING:
    from typing import Any, NoReturn

    # At run time these come from cache.py's and host_env.py's text, sent ahead of this file's.
    from tpuctl.backends.ssh.environment.host_env import (
        CHUNK,
        LOCK_FILE,
        READY,
        deadline_left,
        env_python,
        fail,
        lock_digest,
        out_of_room,
        own_folder,
        ready_lock,
        remove,
        reply,
        sweep,
        tpuctl_cache,
        write_atomic,
    )

HEX = "0123456789abcdef"
ROOM_EXTRA = 64 << 20  # beyond what an environment's files need: the venv itself, pip's own work, what runs in it


def hex_name(value: object) -> str:
    text = str(value)
    if not text or len(text) > 64 or any(char not in HEX for char in text):
        fail("input", "the request is not one tpuctl sends")
    return text


# Checked before writing, so that a host without room says how much it lacks instead of failing half way.
def room(folder: str, needed: int) -> None:
    import shutil

    if shutil.disk_usage(folder).free < needed:
        fail("disk", out_of_room(folder, needed))


# A venv names its own folder in bin/'s scripts and pyvenv.cfg (above: nothing else pip writes does): `old` becomes `new`.
def relocate(folder: str, old: str, new: str) -> None:
    before, after = old.encode(), new.encode()
    scripts = os.path.join(folder, "bin")
    paths = [os.path.join(scripts, name) for name in os.listdir(scripts)] + [os.path.join(folder, "pyvenv.cfg")]
    for path in paths:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > CHUNK:
            continue
        with open(path, "rb") as handle:
            data = handle.read()
        if before in data:
            with open(path, "wb") as handle:
                handle.write(data.replace(before, after))


# A finished environment in its scratch folder renamed into place, its lock and .ready written last: nothing
# half-made is ever found at the key's path (another launch's finished one there is kept, the leftover of one is not).
def place(fresh: str, target: str, lock: "list[dict[str, Any]]") -> None:
    import json

    write_atomic(os.path.join(fresh, LOCK_FILE), json.dumps(lock, sort_keys=True))
    write_atomic(os.path.join(fresh, READY), "")
    try:
        os.rename(fresh, target)
    except OSError:
        if ready_lock(os.path.basename(target)) is None:
            remove(target)
            os.rename(fresh, target)


def marker(name: str) -> bool:
    return name in (READY, LOCK_FILE) or name.startswith(".setup-")


# The environment KEY as a tar on stdout, without its markers (.ready, its lock, --setup's): the receiver writes its
# own. Folders come before what they hold; each file's mtime in whole seconds (a .pyc records its source's so).
def pack_env(key: str) -> None:
    import tarfile

    folder = os.path.join(tpuctl_cache(), "envs", hex_name(key))
    if ready_lock(key) is None:
        fail("copy", "no environment " + key + " on this host")

    def plain(info: "Any") -> "Any":
        info.mtime, info.uid, info.gid, info.uname, info.gname = int(info.mtime), 0, 0, "", ""
        return info

    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT) as stream:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            inside = os.path.relpath(root, folder)
            for name in sorted(dirs + files):
                if inside == "." and marker(name):
                    continue
                arcname = name if inside == "." else inside + "/" + name
                stream.add(os.path.join(root, name), arcname=arcname, recursive=False, filter=plain)


# The environment KEY from the tar after the header (SIZE bytes, the launcher's count): room checked first, unpacked
# beside its place, the sender's folder (header "origin") renamed in its paths, its lock and .ready written last.
def copy(header: "dict[str, Any]", deadline: float) -> None:
    key, request, size = hex_name(header.get("key")), hex_name(header.get("request")), int(header["size"])
    lock = header.get("lock")
    origin = str(header.get("origin") or "")
    if not isinstance(lock, list) or lock_digest(lock) != header.get("lock_hash") or size < 0:
        fail("input", "the lock sent does not match its digest")
    if not os.path.isabs(origin) or os.path.basename(origin) != key:
        fail("input", "the request is not one tpuctl sends")
    envs = own_folder("envs")
    target = os.path.join(envs, key)
    built = ready_lock(key) is None
    if built:
        sweep(envs)
        room(envs, size + ROOM_EXTRA)
        fresh = os.path.join(envs, ".new-" + os.urandom(8).hex())
        os.mkdir(fresh, 0o700)
        try:
            unpack(Bounded(sys.stdin.buffer, size), fresh, size, deadline)
            if not os.path.lexists(os.path.join(fresh, "bin", "python")):
                fail("copy", "the environment sent has no bin/python")
            relocate(fresh, origin, target)
            place(fresh, target, lock)
        finally:
            remove(fresh)
    write_atomic(os.path.join(own_folder("envs", "requests"), request), key + chr(10))
    reply({"python": env_python(key), "built": built})


# A reader of the stream that refuses to go past `size` bytes: the tar may not be longer than the launcher said.
class Bounded:
    def __init__(self, stream: "Any", size: int) -> None:
        self.stream = stream
        self.left = size

    def read(self, count: int = -1) -> bytes:
        wanted = self.left + 1 if count < 0 else min(count, self.left + 1)
        data = self.stream.read(wanted) if wanted else b""
        self.left -= len(data)
        if self.left < 0:
            fail("copy", "the environment sent is larger than said")
        return bytes(data)


# A venv's tar into `folder`, refusing whatever a venv does not hold: a name that is absolute, has a `..`, or is
# given twice; a member whose folder the tar did not make before it (so none is written through a link); a link
# other than bin/python* or lib64 -> lib; a device, fifo or hard link; members larger in all than `size`.
def unpack(source: "Any", folder: str, size: int, deadline: float) -> None:
    import tarfile

    folders = set([""])  # the folders the tar made, "" its top
    taken = set()  # type: set[str]
    left = size
    with tarfile.open(fileobj=source, mode="r|") as stream:
        for member in stream:
            deadline_left(deadline)
            name = member.name
            parts = name.split("/")
            if name in taken or name.startswith("/") or any(part in ("", ".", "..") for part in parts) or marker(name):
                refuse(name, "a name that is not one of a venv's")
            if "/".join(parts[:-1]) not in folders:
                refuse(name, "outside a folder the environment made")
            left -= max(0, member.size)
            if left < 0:
                fail("copy", "the environment sent is larger than said (" + shown(name) + ")")
            taken.add(name)
            path = os.path.join(folder, *parts)
            if member.isdir():
                os.mkdir(path, (member.mode & 0o755) | 0o700)
                folders.add(name)
            elif member.isfile():
                data = stream.extractfile(member)
                assert data is not None
                write_member(data, path, member.size, (member.mode & 0o755) | 0o600)
            elif member.issym() and venv_link(parts, member.linkname):
                os.symlink(member.linkname, path)
            else:
                refuse(name, "not a file, folder or a link a venv has")
            if not member.issym():
                os.utime(path, (member.mtime, member.mtime))


def venv_link(parts: "list[str]", target: str) -> bool:
    if parts == ["lib64"]:
        return target == "lib"
    return len(parts) == 2 and parts[0] == "bin" and parts[1].startswith("python") and bool(target) and chr(0) not in target


def write_member(data: "Any", path: str, size: int, mode: int) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(handle, "wb") as out:
        left = size
        while left > 0:
            chunk = data.read(min(CHUNK, left))
            if not chunk:
                fail("copy", "the environment sent ends inside " + shown(path))
            out.write(chunk)
            left -= len(chunk)


def shown(name: str) -> str:
    return repr(name[:200])


def refuse(name: str, why: str) -> "NoReturn":
    fail("copy", "the environment sent holds " + shown(name) + ", " + why)

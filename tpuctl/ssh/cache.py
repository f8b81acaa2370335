# The runtime cache on an ssh host: tpuctl's worker runtime, shipped as source, kept at
# XDG_CACHE_HOME/tpuctl/runtime/DIGEST (~/.cache/...), one folder per content digest.
#
# Shared by both ends like wire.py: the launcher imports it (the manifest and its digest);
# its text is sent ahead of agent.py's (the check, at every launch) and ahead of
# install.py's (the copy, only when the check fails). So, as in wire.py: the standard
# library only, syntax an old Python 3 reads, no backslash, the why in comments.
#
# A folder's manifest.txt holds one "SHA256 SIZE PATH" line per file, sorted; the folder's
# name is the SHA-256 of that text. A folder is used only when it is a real folder of this
# user, closed to others, whose files are exactly its manifest's (Python's __pycache__
# folders aside): anything else is replaced by a fresh copy, never repaired in place.

import os
import stat

TYPE_CHECKING = False  # typing costs the agent's start; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any  # noqa: F401 - named in a type comment (no variable annotations here)

MANIFEST = "manifest.txt"
PYCACHE = "__pycache__"


# Where this user's shipped runtimes live on this host.
def runtime_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tpuctl", "runtime")


# SHA-256 from the interpreter's built-in module where it has one (_sha256 up to Python 3.11,
# _sha2 from 3.12): importing hashlib loads OpenSSL, 4 ms of the agent's start. Found once: a
# failed import is not remembered, and each costs a search of sys.path.
SHA256 = []  # type: list[Any]


def sha256_hex(data: bytes) -> str:
    if not SHA256:
        for name in ("_sha256", "_sha2", "hashlib"):
            try:
                SHA256.append(__import__(name).sha256)
                break
            except ImportError:
                continue
    return str(SHA256[0](data).hexdigest())


# The manifest of (path, bytes) pairs, as bytes: the one text both ends digest.
def manifest_of(files: "Iterable[tuple[str, bytes]]") -> bytes:
    lines = [sha256_hex(data) + " " + str(len(data)) + " " + path for path, data in sorted(files)]
    return ("".join(line + chr(10) for line in lines)).encode("utf-8")


def digest_of(manifest: bytes) -> str:
    return sha256_hex(manifest)


# Why `path` (a folder tpuctl keeps its runtimes under) must not be used; "" when it may.
# Folders we create are 0700; one that others can write to, or that is someone else's
# (a `sudo tpuctl` leaves root's), could hand a worker code that is not ours.
def unsafe_folder(path: str) -> str:
    try:
        info = os.lstat(path)
    except OSError as err:
        return "cannot use " + path + ": " + str(err.strerror)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return path + " is not a folder (a symbolic link or a file)"
    if info.st_uid != os.getuid():
        return path + " belongs to another user (uid " + str(info.st_uid) + ")"
    if info.st_mode & 0o022:
        return path + " is writable by other users (mode " + oct(stat.S_IMODE(info.st_mode)) + ")"
    return ""


# (path, SHA-256, size) of each line of a manifest; ValueError when it is not one.
def read_manifest_text(manifest: bytes) -> "list[tuple[str, str, int]]":
    entries = []
    for line in manifest.decode("utf-8").splitlines():
        digest, size, path = line.split(" ", 2)
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "" in parts or len(digest) != 64:
            raise ValueError("bad manifest line")
        entries.append((path, digest, int(size)))
    return entries


# A file's bytes, never through a symbolic link; None when it is not a regular file of ours.
def read_own_file(path: str) -> "bytes | None":
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None
        chunks = []  # type: list[bytes]
        while True:
            chunk = os.read(fd, 1048576)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


# What stands between this host and the runtime DIGEST in its cache: "" nothing; else why
# a fresh copy must be installed; "!" and why when tpuctl must neither use nor replace it
# (a folder above it that others control, a copy that is someone else's).
def runtime_problem(digest: str) -> str:
    root = runtime_root()
    if not os.path.lexists(root):
        return "missing"
    for path in (os.path.dirname(root), root):
        problem = unsafe_folder(path)
        if problem:
            return "!" + problem
    return runtime_state(os.path.join(root, digest), digest)


# Why `folder` is not the runtime `digest` names, as runtime_problem says it.
def runtime_state(folder: str, digest: str) -> str:
    try:
        info = os.lstat(folder)
    except OSError:
        return "missing"
    if stat.S_ISDIR(info.st_mode) and info.st_uid != os.getuid():
        return "!" + folder + " belongs to another user (uid " + str(info.st_uid) + ")"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder (a symbolic link or a file)"
    if info.st_mode & 0o077:
        return "it is open to other users (mode " + oct(stat.S_IMODE(info.st_mode)) + ")"
    manifest = read_own_file(os.path.join(folder, MANIFEST))
    try:
        if manifest is None or digest_of(manifest) != digest:
            raise ValueError("not this runtime's")
        entries = read_manifest_text(manifest)
    except ValueError:
        return "its " + MANIFEST + " does not match"
    shipped = {MANIFEST}
    for path, sha, size in entries:
        data = read_own_file(os.path.join(folder, path))
        if data is None or len(data) != size or sha256_hex(data) != sha:
            return path + " differs from what was shipped"
        shipped.add(path)
    for top, dirs, files in os.walk(folder):
        if os.path.basename(top) == PYCACHE:
            dirs[:] = []
            continue
        here = os.path.relpath(top, folder)
        for name in files:
            if os.path.normpath(os.path.join(here, name)) not in shipped:
                return os.path.join(here, name) + " was not shipped"
        for name in dirs:
            if os.path.islink(os.path.join(top, name)):
                return os.path.join(here, name) + " is a symbolic link"
    return ""

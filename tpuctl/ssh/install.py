# The runtime installer: runs on an ssh host as `python -S -c <source> DIGEST` only when the
# agent found no good copy of the runtime DIGEST in the host's cache; the source is cache.py's
# text followed by this file's (remote_source.install_source). Its stdin is the shipment
# (tpuctl/launch/runtime_files.py): zlib of the manifest, a NUL, then every file's bytes in
# manifest order. Written like cache.py: standard library, old Python 3, no backslash.
#
# The copy is made in a fresh 0700 folder beside the cache's, checked exactly as the agent
# checks it, and renamed into place: a worker never sees half a copy. A bad copy found there is
# moved aside first and deleted; a good one another launch put there meanwhile is kept.

import os
import sys
import zlib

TYPE_CHECKING = False  # typing costs the start; mypy treats this name as True
if TYPE_CHECKING:
    from typing import NoReturn

    # At run time these come from cache.py's text, sent ahead of this file's.
    from tpuctl.ssh.cache import read_manifest_text, runtime_root, runtime_state, unsafe_folder


class Failed(Exception):
    pass


# Raised, not exited, so that the temporary folder is removed on the way out.
def fail(problem: str) -> "NoReturn":
    raise Failed(problem)


# The runtime root, each missing folder on the way made 0700 (os.makedirs gives its mode only to
# the last); fail() when it or the folder above is not this user's alone.
def prepare_root() -> str:
    root = runtime_root()
    missing = []
    path = root
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        os.mkdir(path, 0o700)
    for path in (os.path.dirname(root), root):
        problem = unsafe_folder(path)
        if problem:
            fail(problem)
    return root


def read_stdin() -> bytes:
    chunks = []  # type: list[bytes]
    while True:
        chunk = os.read(0, 1048576)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# The shipment's files under `folder`, then its manifest.
def write_copy(folder: str, digest: str, shipment: bytes) -> None:
    manifest, _, body = shipment.partition(bytes(1))
    entries = read_manifest_text(manifest)
    offset = 0
    for path, _, size in entries:
        target = os.path.join(folder, path)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        write_file(target, body[offset : offset + size])
        offset += size
    if offset != len(body):
        fail("the runtime shipped is damaged (" + str(len(body) - offset) + " bytes too many)")
    write_file(os.path.join(folder, "manifest.txt"), manifest)


# Remove a folder tpuctl made (or a link in its place), never following a link out of it.
def remove(path: str) -> None:
    import shutil

    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def install(digest: str) -> None:
    root = prepare_root()
    folder = os.path.join(root, digest)
    problem = runtime_state(folder, digest)
    if not problem:
        return  # another launch put a good copy there meanwhile
    if problem.startswith("!"):
        fail(problem[1:])
    fresh = os.path.join(root, ".new-" + os.urandom(8).hex())
    aside = os.path.join(root, ".old-" + os.urandom(8).hex())
    os.mkdir(fresh, 0o700)
    try:
        try:
            write_copy(fresh, digest, zlib.decompress(read_stdin()))
        except (ValueError, zlib.error):
            fail("the runtime shipped is damaged")
        problem = runtime_state(fresh, digest)
        if problem:
            fail("the runtime copied does not check: " + problem)
        if os.path.lexists(folder):
            os.rename(folder, aside)
        try:
            os.rename(fresh, folder)
        except OSError:
            if runtime_state(folder, digest):
                raise
    finally:
        for path in (fresh, aside):
            if os.path.lexists(path):
                remove(path)


if __name__ == "__main__":
    try:
        install(sys.argv[1])
    except Failed as failed:
        os.write(2, (str(failed) + chr(10)).encode("utf-8", "replace"))
        os._exit(3)
    except OSError as err:
        os.write(2, ("cannot install tpuctl's runtime in " + runtime_root() + ": " + str(err.strerror or err) + chr(10)).encode("utf-8", "replace"))
        os._exit(3)

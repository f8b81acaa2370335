# Shared by both ends of an ssh launch: tpuctl imports this module, and ships
# its text, ahead of agent.py's, as the remote agent's source (see
# session.agent_source), so the launcher and the agent cannot drift apart.
#
# Hence it is written to run as plain source under `python -S` on an old
# Python 3: the standard library only (modules the interpreter loads anyway),
# no f-strings, no variable annotations, annotations quoted, no backslash
# (the source must read the same under any remote shell once quoted).
# Comment lines are dropped before it is sent, docstrings would not be: so the
# why of each function is in comments.

import os
import stat

TYPE_CHECKING = False  # typing costs the agent's start; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Collection

NUL = chr(0)
MAX_DEPTH = 200


# key, value, key, value... as one hex word: one shell word and one line for any text.
def pack(pairs: "list[tuple[str, str]]") -> str:
    return NUL.join(key + NUL + value for key, value in pairs).encode("utf-8", "surrogateescape").hex()


# pack's pairs back.
def unpack(text: str) -> "list[tuple[str, str]]":
    words = bytes.fromhex(text.strip()).decode("utf-8", "surrogateescape").split(NUL)
    return [(words[i], words[i + 1]) for i in range(0, len(words) - 1, 2)]


# Relative path -> (size, whole-second mtime) of each regular file: what --sync compares. Folders deeper than
# MAX_DEPTH are not walked (os.walk recurses a level a frame before Python 3.12: RecursionError near 1,000); their
# files count as missing, so --sync sends them again, which is safe.
def manifest(folder: str, exclude: "Collection[str]") -> "dict[str, tuple[int, int]]":
    found = {}  # type: dict[str, tuple[int, int]]
    for top, dirs, files in os.walk(folder):
        deep = top.count(os.sep) - folder.count(os.sep) >= MAX_DEPTH
        dirs[:] = [] if deep else [d for d in dirs if d not in exclude]
        for name in files:
            path = os.path.join(top, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found[os.path.relpath(path, folder)] = (info.st_size, int(info.st_mtime))
    return found


# A manifest as pairs to pack: ("file", path), ("stat", "SIZE MTIME") for each file.
def manifest_pairs(files: "dict[str, tuple[int, int]]") -> "list[tuple[str, str]]":
    pairs = []
    for path, (size, mtime) in files.items():
        pairs += [("file", path), ("stat", str(size) + " " + str(mtime))]
    return pairs


# manifest_pairs' files back; pairs with other keys are skipped.
def read_manifest(pairs: "list[tuple[str, str]]") -> "dict[str, tuple[int, int]]":
    files = {}  # type: dict[str, tuple[int, int]]
    path = ""
    for key, value in pairs:
        if key == "file":
            path = value
        elif key == "stat":
            size, mtime = value.split()
            files[path] = (int(size), int(mtime))
    return files

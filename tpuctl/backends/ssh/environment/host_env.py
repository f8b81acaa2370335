# The environments tpuctl keeps on an ssh host for --requirements and --setup: runs there as
# `python -S -c <source> COMMAND ARGS...`, where the source is tpuctl/ssh/cache.py's text followed by
# this file's, host_copy.py's and host_build.py's (environment/remote.py), with a JSON header as the
# first line of its stdin. Its answer is one line on stdout: REPLY and a JSON object ("error" set when
# it failed). The launcher imports this module too, for the names both ends must agree on (REPLY,
# lock_digest, env_key, COMPLETE, CHUNK, MAX_WHEEL_BYTES).
#
# Standard library only, syntax an old Python 3 reads, no backslash, no multi-line string, the why
# in comments (they are dropped before it is sent), as cache.py and install.py.
#
# What lives where, under the host's cache (XDG_CACHE_HOME, else ~/.cache):
#   tpuctl/envs/KEY/                a venv over the host's Python (its site-packages visible), the lock's
#                                   wheels installed; used only once KEY/.ready exists (written last)
#   tpuctl/envs/KEY/tpuctl-lock.json   the lock it was built from; .setup-HASH: --setup HASH ran there
#   tpuctl/envs/requests/REQUEST    the KEY the requirements REQUEST were last built as (the warm path)
#   tpuctl/wheels/LOCK/             the lock's wheels, .complete once each was checked against the lock
# An environment is built in tpuctl/envs/.new-RANDOM and renamed into place: a half-built one is never
# used, and a failed build is removed (one killed on its way is removed by a later build, after an hour).
#
# Commands:
#   probe REQUEST SETUP LOCK   the warm path, no child process: the host's Python, the environment the
#                              request was built as and whether it is ready, whether --setup SETUP ran
#                              there, whether the wheels of LOCK (or of that environment) are here
#   resolve                    header {requirements, index_url}: one resolution in a scratch venv (pip's
#                              dry run and report), the wheels downloaded and checked; answers the lock
#   build                      header {key, request, lock, source}: the environment KEY from the lock's
#                              wheels (source: "local", "stdin" (a tar after the header), or "gcs")
#   pack LOCK                  the lock's wheels as a tar on stdout (no reply line)
#   pack-env KEY               the environment KEY as a tar on stdout, its markers left out (no reply line)
#   copy KEY SIZE              header {request, lock, origin}: the environment KEY from a tar of SIZE bytes after
#                              the header (pack-env's on the host that built it, at `origin`), no pip (host_copy.py)
#   setup                      header {key, hash, command, workdir}: --setup in the environment

import os
import sys

TYPE_CHECKING = False  # typing costs the start; mypy treats this name as True
if TYPE_CHECKING:
    from typing import Any, NoReturn

    # At run time these come from cache.py's text, sent ahead of this file's.
    from tpuctl.ssh.cache import runtime_root, unsafe_folder

REPLY = "tpuctl-environment "
LOCK_FILE = "tpuctl-lock.json"
READY = ".ready"
COMPLETE = ".complete"
HEADER_LIMIT = 16 << 20  # a header is a lock (~200 bytes a package) or a requirements file
LOG_TAIL = 64 << 10  # bytes of pip's log an answer carries back
STALE_S = 3600.0  # a .new- folder this old belongs to a build that was killed on its way
CHUNK = 1 << 20
MAX_WHEEL_BYTES = 16 << 30  # one wheel (a host fetches none larger, a lock names none): the largest on PyPI are a few GiB
LOW_ROOM = 1 << 20  # a child failed where less than this is free: the disk was full, whatever its output could say


class Failed(Exception):
    def __init__(self, kind: str, message: str, log: str = "") -> None:
        Exception.__init__(self, message)
        self.kind = kind
        self.log = log


# Raised, not exited, so that scratch folders are removed on the way out.
def fail(kind: str, message: str, log: str = "") -> "NoReturn":
    raise Failed(kind, message, log)


def reply(answer: "dict[str, Any]") -> None:
    import json

    line = chr(10) + REPLY + json.dumps(answer, sort_keys=True) + chr(10)
    os.write(1, line.encode("utf-8", "replace"))


# ---- what both ends agree on --------------------------------------------------------------------


# A project's name as PEP 503 normalises it (the index's folder, the lock's key).
def canonical(name: str) -> str:
    out = []
    for char in name.lower():
        out.append("-" if char in "-_." else char)
    text = "".join(out)
    while "--" in text:
        text = text.replace("--", "-")
    return text


def sha256_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# The lock as one text, one "NAME==VERSION FILE SHA256 SIZE" line per wheel, sorted: what its digest is of.
def lock_text(lock: "list[dict[str, Any]]") -> str:
    lines = sorted(
        canonical(str(item["name"])) + "==" + str(item["version"]) + " " + str(item["file"]) + " " + str(item["sha256"]) + " " + str(item["size"])
        for item in lock
    )
    return "".join(line + chr(10) for line in lines)


def lock_digest(lock: "list[dict[str, Any]]") -> str:
    return sha256_of(lock_text(lock).encode("utf-8"))[:32]


# An environment's key: the lock and the Python it is built over (its path, version and platform), so that a
# host whose Python differs gets an environment of its own.
def env_key(lock_hash: str, facts: "dict[str, Any]") -> str:
    parts = [lock_hash, str(facts.get("executable")), str(facts.get("version")), str(facts.get("platform")), "1"]
    return sha256_of(chr(10).join(parts).encode("utf-8"))[:32]


# ---- the host's folders -------------------------------------------------------------------------


def tpuctl_cache() -> str:
    return os.path.dirname(runtime_root())


# A folder under tpuctl's cache, each missing one on the way made 0700; fail() when one is not this user's alone.
def own_folder(*parts: str) -> str:
    path = tpuctl_cache()
    for part in ("", *parts):
        path = os.path.join(path, part) if part else path
        if not os.path.lexists(path):
            os.makedirs(path, 0o700)
            os.chmod(path, 0o700)
        problem = unsafe_folder(path)
        if problem:
            fail("unsafe", problem)
    return path


def read_small(path: str, limit: int = 1 << 20) -> "str | None":
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    return None if len(data) > limit else data.decode("utf-8", "replace")


def write_atomic(path: str, text: str) -> None:
    fresh = path + ".new-" + os.urandom(6).hex()
    with open(fresh, "w") as handle:
        handle.write(text)
    os.replace(fresh, path)


def remove(path: str) -> None:
    import shutil

    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


def sweep(folder: str) -> None:
    import time

    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            old = time.time() - os.lstat(path).st_mtime > STALE_S
        except OSError:
            continue
        if name.startswith(".new-") and old:
            remove(path)


def facts() -> "dict[str, Any]":
    import sysconfig

    return {"executable": sys.executable, "version": sys.version, "platform": sysconfig.get_platform(), "tag": sys.implementation.cache_tag}


def env_python(key: str) -> str:
    return os.path.join(tpuctl_cache(), "envs", key, "bin", "python")


def ready_lock(key: str) -> "list[dict[str, Any]] | None":
    import json

    folder = os.path.join(tpuctl_cache(), "envs", key)
    if not os.path.isfile(os.path.join(folder, READY)):
        return None
    text = read_small(os.path.join(folder, LOCK_FILE), HEADER_LIMIT)
    try:
        lock = json.loads(text or "")
    except ValueError:
        return None
    return lock if isinstance(lock, list) else None


def wheels_ready(lock_hash: str) -> bool:
    return bool(lock_hash) and os.path.isfile(os.path.join(tpuctl_cache(), "wheels", lock_hash, COMPLETE))


# ---- the warm path ------------------------------------------------------------------------------


def probe(request: str, setup: str, lock_hash: str) -> None:
    key = (read_small(os.path.join(tpuctl_cache(), "envs", "requests", request), 200) or "").strip()
    answer = {"facts": facts(), "key": None, "lock": None, "setup": False}  # type: dict[str, Any]
    kept = [lock_hash]
    if key and all(char in "0123456789abcdef" for char in key):
        lock = ready_lock(key)
        if lock is not None:
            answer.update(key=key, lock=lock, python=env_python(key))
            answer["setup"] = bool(setup) and os.path.isfile(os.path.join(tpuctl_cache(), "envs", key, ".setup-" + setup))
            kept.append(lock_digest(lock))
    answer["wheels"] = [digest for digest in kept if wheels_ready(digest)]  # the locks whose wheels this host keeps
    reply(answer)


# ---- children -----------------------------------------------------------------------------------


def deadline_left(deadline: float) -> float:
    import time

    left = deadline - time.monotonic()
    if left <= 0:
        fail("timeout", "ran out of time")
    return left


# A child with its output in `log`, in a session of its own, killed (its whole group) at the deadline.
def run(argv: "list[str]", log: str, deadline: float, env: "dict[str, str] | None" = None) -> int:
    import subprocess

    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return wait(proc, deadline)


# A child's status by the deadline; past it, or on any error, its whole group killed (a timeout is Failed "timeout").
def wait(proc: "Any", deadline: float) -> int:
    import signal
    import subprocess

    try:
        return int(proc.wait(deadline_left(deadline)))
    except BaseException as err:
        try:  # noqa: SIM105 - contextlib costs the start
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        if isinstance(err, subprocess.TimeoutExpired):
            fail("timeout", "ran out of time")
        raise


def tail(log: str) -> str:
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - LOG_TAIL))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def pip_env(index_url: str) -> "dict[str, str]":
    env = dict(os.environ)
    # Never a prompt (it would wait for no one), no version check against PyPI, a host's pip.conf `user = true`
    # (which a venv refuses) overridden, a bounded wait on an index that does not answer.
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_USER="0", PIP_RETRIES="2", PIP_TIMEOUT="30")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    if index_url:
        env["PIP_INDEX_URL"] = index_url  # in the environment, not on a command line other users may read
    return env


# ---- a venv over the host's Python --------------------------------------------------------------


# The host's own sys.path beyond its standard library, when its Python is itself a venv (a launch's --python
# that is one): a venv made from it sees only the base interpreter's site-packages, so those folders are named
# in a .pth file of the new one, after its own site-packages, as the host's interpreter has them.
HOST_PATHS = (
    "import json, sys, sysconfig; std = set(sysconfig.get_paths()[k] for k in ('stdlib', 'platstdlib')); "
    "print(json.dumps([sys.prefix != sys.base_prefix, [p for p in sys.path if p and p not in std and not p.endswith(('.zip', 'lib-dynload'))]]))"
)


def make_venv(folder: str, log: str, deadline: float) -> str:
    import json
    import subprocess

    status = run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", folder], log, deadline, pip_env(""))
    if status != 0 and no_room_after(log):
        fail("disk", no_room_after(log), tail(log))
    if status != 0:
        fail("venv", sys.executable + " could not make a venv (apt-get install python3-venv gives one): " + last_line(tail(log)), tail(log))
    argv = [sys.executable, "-c", HOST_PATHS]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=pip_env(""), timeout=deadline_left(deadline))
    is_venv, paths = json.loads(done.stdout.decode())
    python = os.path.join(folder, "bin", "python")
    if is_venv and paths:
        site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], stdout=subprocess.PIPE, timeout=deadline_left(deadline))
        with open(os.path.join(site.stdout.decode().strip(), "tpuctl-host.pth"), "w") as handle:
            handle.write("".join(path + chr(10) for path in paths))
    return python


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1]


# What pip's log says went wrong, as (kind, message): the requirement it names where it names one.
def pip_failure(log: str) -> "tuple[str, str]":
    text = tail(log)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if no_room_after(log):
        return "disk", no_room_after(log)
    if "No module named pip" in text:
        return "pip", sys.executable + " has no pip (apt-get install python3-pip gives it one)"
    for line in lines:
        if line.startswith("ERROR: Cannot install") or line.startswith("ERROR: ResolutionImpossible"):
            causes = [cause for cause in lines if cause.startswith("The user requested") or " depends on " in cause]
            return "conflict", "conflicting requirements: " + ("; ".join(causes) or line[len("ERROR: ") :])
    for line in lines:
        if line.startswith("ERROR: No matching distribution found for "):
            wanted = line[len("ERROR: No matching distribution found for ") :]
            unreachable = any("Could not fetch URL" in cause or "NewConnectionError" in cause or "Max retries exceeded" in cause for cause in lines)
            if unreachable:
                return "index", "the package index could not be reached (" + wanted + " not found)"
            return "unresolvable", "no wheel of " + wanted + " for this host's Python and platform (or no such version on the index)"
        if "Hashes are required" in line or "THESE PACKAGES DO NOT MATCH THE HASHES" in line or "not pinned" in line:
            return "hashes", last_line(text)
    return "pip", last_line(text)


# Where a child's output says the disk was full (ENOSPC, as pip and Python word it: "[Errno 28] No space left on
# device: 'PATH'"): the path where it names one, "" where it names none, None where the disk was not full.
def full_disk(text: str) -> "str | None":
    marker = "No space left on device"
    lines = [line for line in text.splitlines() if marker in line]
    if not lines:
        return None
    named = lines[-1].split(marker, 1)[1].strip(" :")
    return named.strip(chr(34) + chr(39)) if named[:1] in (chr(34), chr(39)) else ""


# Whether a child that failed ran out of disk, in out_of_room's words ("" where not): its output says so, or, where the
# disk was too full to hold even that, the folder of its log (the scratch folder it wrote in) has next to nothing free.
def no_room_after(log: str) -> str:
    import shutil

    folder = os.path.dirname(log)
    where = full_disk(tail(log))
    if where is None:
        try:
            if shutil.disk_usage(folder).free >= LOW_ROOM:
                return ""
        except OSError:
            return ""
    return out_of_room(where or folder)


# A disk too full for what tpuctl writes, in words a user acts on: the folder, what is free there, what was needed
# (where known: a check before writing knows it, a write that failed does not), and what of tpuctl's own may go.
def out_of_room(path: str, needed: int = 0) -> str:
    import shutil

    folder = path
    while os.path.dirname(folder) != folder and (not os.path.isdir(folder) or os.path.basename(folder).startswith(".new-")):
        folder = os.path.dirname(folder)  # a scratch folder is removed on the way out: its place is named
    try:
        free = mib(shutil.disk_usage(folder).free) + " free"
    except OSError:
        free = "free space unknown"
    need = ", about " + mib(needed) + " needed" if needed else ""
    cache = tpuctl_cache()
    mine = "the environments and wheels of runs no longer needed are in " + cache + "/envs and " + cache + "/wheels"
    return "out of disk space in " + folder + " (" + free + need + "): free space on that disk (" + mine + ")"


def mib(size: int) -> str:
    return str(round(size / 1048576.0, 1)) + " MiB"


# Exactly these (name, version) wheels, by pip download (no dependency of theirs: the resolution chose those), each
# checked against the hash the index gave where it gave one (pip checks too); their lock, from the files that came.
def fetch_pins(python: str, expected: "dict[tuple[str, str], str]", folder: str, log: str, deadline: float, index_url: str) -> "list[dict[str, Any]]":
    os.makedirs(folder, 0o700, exist_ok=True)
    if not expected:
        return []
    hashed = all(expected.values())  # pip's hash-checking mode is all or nothing
    lines = [name + "==" + version + (" --hash=sha256:" + digest if hashed else "") for (name, version), digest in sorted(expected.items())]
    listing = folder + "-pins.txt"
    with open(listing, "w") as handle:
        handle.write("".join(line + chr(10) for line in lines))
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", folder, "-r", listing]
    if run(argv, log, deadline, pip_env(index_url)) != 0:
        fail(*pip_failure(log), log=tail(log))
    lock = []
    for name in sorted(os.listdir(folder)):
        parts = name[: -len(".whl")].split("-") if name.endswith(".whl") else []
        key = (canonical(parts[0]), parts[1]) if len(parts) >= 5 else ("", "")
        if key not in expected:
            fail("pip", "pip downloaded " + name + ", which the resolution did not choose")
        digest, size = file_sha256(os.path.join(folder, name))
        if expected[key] and expected[key] != digest:
            fail("hashes", name + " does not match the hash the index gave for it")
        lock.append({"name": key[0], "version": key[1], "file": name, "sha256": digest, "size": size})
    missing = sorted(set(expected) - set((item["name"], item["version"]) for item in lock))
    if missing:
        fail("pip", "pip downloaded no wheel of " + ", ".join(name + "==" + version for name, version in missing))
    return lock


def file_sha256(path: str) -> "tuple[str, int]":
    import hashlib

    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                return digest.hexdigest(), size
            digest.update(chunk)
            size += len(chunk)


# A folder of checked wheels moved to tpuctl/wheels/LOCK (unless a complete one is there), .complete last.
def keep_wheels(folder: str, lock: "list[dict[str, Any]]") -> str:
    wheels = own_folder("wheels")
    target = os.path.join(wheels, lock_digest(lock))
    if os.path.isfile(os.path.join(target, COMPLETE)):
        return target
    write_atomic(os.path.join(folder, COMPLETE), lock_text(lock))
    if os.path.lexists(target):
        remove(target)
    try:
        os.rename(folder, target)
    except OSError as err:
        if err.errno == 18:  # EXDEV: the cache's wheels folder is on another disk than the scratch folder's
            copied_into(folder, wheels, target)
        elif not os.path.isfile(os.path.join(target, COMPLETE)):
            raise
    return target


# `folder` copied beside `target` (in `parent`, the same disk), then renamed into place: never half there.
def copied_into(folder: str, parent: str, target: str) -> None:
    import shutil

    staged = os.path.join(parent, ".new-" + os.urandom(8).hex())
    try:
        shutil.copytree(folder, staged)
        os.rename(staged, target)
    except OSError:
        if not os.path.isfile(os.path.join(target, COMPLETE)):
            raise
    finally:
        remove(staged)


def read_header() -> "dict[str, Any]":
    import json

    line = sys.stdin.buffer.readline(HEADER_LIMIT)
    if not line.endswith(bytes([10])):
        fail("input", "the request is not one tpuctl sends")
    header = json.loads(line.decode("utf-8"))
    if not isinstance(header, dict):
        fail("input", "the request is not one tpuctl sends")
    return header

"""Keeps local workers' TensorFlow servers on loopback: a bind() shim preloaded into each worker.

TensorFlow's gRPC server binds the wildcard address (grpc_server_lib.cc builds
"0.0.0.0:" + port; no option or variable changes it), and it has no
authentication. A local launch's TF_CONFIG names 127.0.0.1 only, so the
server needs no other interface. The ways to keep it there, weighed in
docs/security.md: a private network namespace (loses outbound access unless a
user-mode network such as slirp4netns or pasta is added, and needs
unprivileged user namespaces), a host firewall (needs root), or this: a small
C library (bindshim.c beside this file) that LD_PRELOAD puts in front of libc's
bind() in the local workers only, and that turns a wildcard bind of the
worker's own reserved port into a loopback bind. It works for an ordinary user
wherever there is a C compiler and a dynamic loader that honours LD_PRELOAD
(glibc and musl Linux).

It is compiled once per source version and machine type, with the system C
compiler, into the user's cache folder (0700), and reused: a launch pays one
stat() for it, a worker nothing measurable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from tpuctl.cluster import worker_contract as contract
from tpuctl.endings import exit_words
from tpuctl.safety import reaper

SOURCE = Path(__file__).with_name("bindshim.c")
COMPILERS = ("cc", "gcc", "clang")
COMPILE_TIMEOUT_S = 120


class Unavailable(Exception):
    """The shim cannot apply here; the message says why, in a few words."""


def library(cache_dir: Path | None = None) -> Path:
    """The compiled shim, built on first use; raises Unavailable where it cannot apply."""
    if not sys.platform.startswith("linux"):
        # macOS's dyld drops DYLD_INSERT_LIBRARIES for SIP-protected binaries (any /usr/bin python),
        # and has no RTLD_NEXT bind() interposition that survives that; Windows has no preload at all.
        raise Unavailable(f"not Linux ({sys.platform})")
    import hashlib  # here: `launch --help` imports this module, and OpenSSL's load is not free

    key = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    folder = _cache_folder(cache_dir)
    built = folder / f"bindshim-{key}-{os.uname().machine}.so"
    if any(c in str(built) for c in " :\t\n"):
        raise Unavailable(f"its cache path {built} has a space or colon, which LD_PRELOAD cannot carry")
    try:
        info = os.lstat(built)
    except FileNotFoundError:
        _compile(built)
        info = os.lstat(built)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o022:
        raise Unavailable(f"{built} is not a private file of this user; remove it")
    return built


def worker_env(env: MutableMapping[str, str], shim: Path, *ports: int) -> None:
    """Preload the shim into one worker and name the ports it keeps on loopback (its TensorFlow server's,
    its profiler server's, which binds the wildcard address too).

    LD_PRELOAD is appended to, never replaced: a user's own preloads stay.
    """
    current = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{current}:{shim}" if current else str(shim)
    env[contract.LOOPBACK_PORTS] = ",".join(map(str, ports))


def warning(reason: str) -> str:
    """The one line a launch prints when its workers stay reachable from other machines."""
    return (
        f"warning: cannot keep the workers' TensorFlow servers on loopback ({reason}); they listen on all interfaces "
        "without authentication: block their ports with a firewall (docs/security.md), or pass --expose to accept this"
    )


def _cache_folder(cache_dir: Path | None) -> Path:
    """The per-user cache folder; someone else's, or one others can write, would let them pick the code our workers run."""
    if cache_dir is None:
        from platformdirs import user_cache_path

        cache_dir = user_cache_path("tpuctl")
    from tpuctl.inputs.errors import TpuctlError
    from tpuctl.inputs.private_files import private_dir

    folder = cache_dir / "bindshim"
    try:
        return private_dir(folder)  # the rule every folder tpuctl writes into follows
    except TpuctlError as err:
        raise Unavailable(f"not a private folder of this user: {err.message}") from None
    except OSError as err:
        raise Unavailable(f"cannot create {folder}: {err.strerror}") from None


def _compiler(environ: Mapping[str, str]) -> str:
    wanted = environ.get("CC", "").split()
    candidates = (wanted[0],) if wanted else COMPILERS
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise Unavailable("no C compiler: " + ("$CC " + wanted[0] if wanted else "cc, gcc or clang") + " not on PATH")


def _compile(target: Path) -> None:
    """Compile into a temporary file beside `target`, check it loads, rename it into place (atomic:
    a concurrent launch either finds nothing or the whole library)."""
    compiler = _compiler(os.environ)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    argv = [compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE), "-ldl"]
    try:
        try:
            done = reaper.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise Unavailable(f"{compiler} did not run: {err}") from None
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if line.strip()), exit_words(done.returncode))
            raise Unavailable(f"{compiler} failed: {first.strip()}")
        _check_loads(partial)
        os.chmod(partial, 0o700)
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def _check_loads(path: Path) -> None:
    """A library this interpreter cannot load (wrong architecture, a broken toolchain) would make
    every worker's loader print an error; find out once, here. Loading it into tpuctl changes
    nothing: RTLD_LOCAL keeps its bind() out of tpuctl's own symbol lookups."""
    import ctypes

    try:
        ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
    except OSError as err:
        raise Unavailable(f"the compiled shim does not load: {err}") from None

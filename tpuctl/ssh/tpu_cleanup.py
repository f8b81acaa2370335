"""What `--cleanup` runs on every TPU host before a launch: free the TPU from a previous run.

A crashed or orphaned training process keeps /dev/accel* (or /dev/vfio/N) open,
and libtpu refuses to start while /tmp/libtpu_lockfile is held ("TPU in use").
The script kills the processes of this user that hold either, then removes a
lock file nobody holds any more. It runs with the host's python3 and prints
one line per thing it did, which tpuctl shows prefixed by the host.
"""

from __future__ import annotations

LOCKFILE = "/tmp/libtpu_lockfile"
CLEANUP_TIMEOUT_S = 60.0  # per ssh try: the script waits 5 s for what it killed; the rest is ssh connecting

_SCRIPT = r"""
import os, re, signal, sys, time
lock = sys.argv[1]
me = os.getpid()
held = re.compile(r"^/dev/accel\d+$|^/dev/vfio/\d+$")

def holders():
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == me:
            continue
        try:
            if os.stat("/proc/" + pid).st_uid != os.getuid():
                continue
            for fd in os.listdir("/proc/%s/fd" % pid):
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if target == lock or held.match(target):
                    found[int(pid)] = target
                    break
        except OSError:
            continue
    return found

stale = holders()
for pid, target in sorted(stale.items()):
    try:
        os.kill(pid, signal.SIGKILL)
        print("killed stale process %d holding %s" % (pid, target))
    except OSError as err:
        print("could not kill %d holding %s: %s" % (pid, target, err.strerror))
deadline = time.time() + 5
while stale and holders() and time.time() < deadline:
    time.sleep(0.1)
if os.path.exists(lock) and not holders():
    os.remove(lock)
    print("removed stale " + lock)
if not stale and not os.path.exists(lock):
    print("TPU free: nothing to clean")
"""


def cleanup_argv(python: str = "python3", lockfile: str = LOCKFILE) -> list[str]:
    return [python, "-c", _SCRIPT, lockfile]

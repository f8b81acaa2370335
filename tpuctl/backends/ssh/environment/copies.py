"""One install instead of one a host: the lock's environment built on one host, then copied to every other host
whose environment has the same key (the same lock over the same Python: executable, version, platform).

The builder packs its finished venv (`pack-env`, a tar over the ssh connection the launcher already has); the
launcher keeps it once, in a file that starts with the request's header, and sends that file to each other host
(at most --fanout at a time), which unpacks it beside its place and renames its paths (host_copy.py). Unpacking
costs a host a small part of what pip's install of the same wheels does (unzipping, compiling every module, the
checks); on hosts that share CPUs (this machine's benchmark) that is what one build saves on each. On a slice whose
hosts each have their own CPUs the installs run truly at once, and the copy adds the builder's time and a transfer
ahead of the others: measured in benchmarks/README.md.

Not with a run's bucket: the hosts then fetch the lock's wheels from the bucket themselves and build at once, as
before; a copy would carry the whole environment (unpacked, a few times the wheels' size) through the launcher once
a host, which the bucket is there to spare a laptop's uplink.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from tpuctl.backends.ssh.environment import remote
from tpuctl.backends.ssh.environment.host_env import MAX_WHEEL_BYTES
from tpuctl.backends.ssh.environment.wheels import cache_writes, launcher_cache, pull
from tpuctl.inputs.private_files import private_dir
from tpuctl.ssh.client_args import SshOptions

# An environment's tar: its wheels unpacked (a few times their size) and compiled. The host cannot say its size before
# it has packed it, so the bound is a fixed one, past any venv a lock of wheels of MAX_WHEEL_BYTES makes: a tar
# larger is a host writing without end, which would fill this machine's disk.
ENV_TAR_LIMIT = 4 * MAX_WHEEL_BYTES


def builders(hosts: Sequence[str], keys: Mapping[str, str], ready: Mapping[str, str], holders: Sequence[str]) -> dict[str, str]:
    """Which host each key's environment comes from: one that has it ready already, else the one that builds it (a
    host keeping the lock's wheels where one of that key does: it needs none sent)."""
    sources = {keys[host]: host for host in reversed(list(ready)) if host in keys}
    for key in dict.fromkeys(keys[host] for host in hosts):
        if key not in sources:
            group = [host for host in hosts if keys[host] == key]
            sources[key] = next((host for host in group if host in holders), group[0])
    return sources


def payload(ssh: SshOptions, python: str, sender: str, key: str, header: bytes, scrub: Callable[[str], str]) -> tuple[IO[bytes], int]:
    """The file each receiver reads on its stdin: `header`, then the environment `key` as `sender` packs it; and the
    tar's size (the receivers' bound, and what they check their room against)."""
    root = launcher_cache()
    with cache_writes(root, "keep an environment to copy"):
        private_dir(root)
        stream = tempfile.NamedTemporaryFile(dir=root, prefix=".env-")  # noqa: SIM115 - the caller closes it
    try:
        with cache_writes(root, "keep an environment to copy"):
            stream.write(header)
            stream.flush()
            pull(ssh, sender, remote.command(python, "pack-env", key), stream, "its environment", scrub, limit=ENV_TAR_LIMIT)
        stream.seek(0, os.SEEK_END)
        return stream, stream.tell() - len(header)
    except BaseException:
        stream.close()
        raise

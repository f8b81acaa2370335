"""How tpuctl reaches a host: the `ssh` command line, with the user's settings first."""

from __future__ import annotations

import glob
import os
import shlex
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError, one_line
from tpuctl.inputs.parse import read_small_text, tool_file
from tpuctl.safety import reaper

DEFAULT_FANOUT = 16
CONNECT_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 10
CONTROL_PERSIST = "60s"
SSH_G_TIMEOUT_S = 30  # `ssh -G` reads files and resolves nothing: seconds mean something blocks
MAX_INCLUDE_DEPTH = 16  # OpenSSH's own limit on nested Include (READCONF_MAX_DEPTH)
SSH_FAILED = 255  # ssh's own status when it could not connect or lost the connection
_SUN_PATH_MAX = 104  # the smallest sockaddr_un path among the systems OpenSSH runs on


def control_dir() -> Path:
    """Where ControlMaster sockets live: $TMPDIR/tpuctl-$UID/ssh, private to this user."""
    for base in (Path(tempfile.gettempdir()), Path("/tmp")):
        folder = base / f"tpuctl-{os.getuid()}" / "ssh"
        # ssh binds "<ControlPath>.<16 random chars>" first; %C is 40 hex digits.
        if len(str(folder)) + 1 + 40 + 17 < _SUN_PATH_MAX:
            break
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = folder.stat()
    except OSError as err:
        raise TpuctlError(f"cannot create the ssh control dir {folder}: {err.strerror}", exit_code=FAILED) from None
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise TpuctlError(f"{folder} must be a private directory of this user (mode 0700)", hint=f"remove {folder}")
    return folder


@dataclass(frozen=True)
class SshOptions:
    """How to reach hosts: what `ssh` gets besides the host (and how hard to try)."""

    user: str | None = None
    key: str | None = None
    options: tuple[str, ...] = ()  # each as `ssh -o VALUE`
    config: str | None = None  # as `ssh -F FILE`
    fanout: int = DEFAULT_FANOUT  # hosts being connected at the same time
    attempts: int = CONNECT_ATTEMPTS  # connection tries per host
    connect_timeout: int = CONNECT_TIMEOUT_S
    control_path: str | None = None  # default: control_dir()/%C

    def base(self) -> list[str]:
        """`ssh` and every option, without a host. The user's own -o values come
        first, because ssh keeps the first value it is given for an option."""
        argv = ["ssh"]
        if self.config:
            argv += ["-F", self.config]
        for option in self.options:
            argv += ["-o", option]
        if self.key:
            argv += ["-i", self.key]
        if self.user:
            argv += ["-l", self.user]
        control = self.control_path or str(control_dir() / "%C")
        for option in (
            "BatchMode=yes",
            "ControlMaster=auto",
            f"ControlPath={control}",
            f"ControlPersist={CONTROL_PERSIST}",
            f"ConnectTimeout={self.connect_timeout}",
            "ServerAliveInterval=15",
            "ServerAliveCountMax=4",
            "ClearAllForwardings=yes",
        ):
            argv += ["-o", option]
        return [*argv, "-T", "-x"]

    def command(self, host: str | HostEntry, remote: Sequence[str]) -> list[str]:
        """The full `ssh ... HOST COMMAND` argv; `remote` is quoted once, here."""
        name, port = (host.host, host.port) if isinstance(host, HostEntry) else (host, None)
        argv = self.base()
        if port is not None:
            argv += ["-p", str(port)]
        return [*argv, "--", name, remote_command(remote)]

    def check(self, host: str) -> None:
        """Let ssh itself validate the options and config file, without connecting (`ssh -G`)."""
        argv = [arg for arg in self.base() if arg not in ("-T", "-x")]
        try:
            done = reaper.run([*argv, "-G", "--", host], capture_output=True, text=True, timeout=SSH_G_TIMEOUT_S, check=False)
        except FileNotFoundError:
            raise TpuctlError("ssh (OpenSSH client) is not installed", hint="e.g. apt-get install openssh-client") from None
        except subprocess.TimeoutExpired:
            raise TpuctlError(
                f"ssh -G did not finish reading its configuration within {SSH_G_TIMEOUT_S}s", hint="check --ssh-config and the files it includes"
            ) from None
        if done.returncode != 0:
            problem = one_line(done.stderr, last=True) or f"ssh -G {exit_words(done.returncode)}"
            raise TpuctlError(f"ssh rejects the options: {problem}", hint="check --ssh-option / --ssh-config", exit_code=USAGE)


def checked_config(path: str) -> str:
    """An ssh config file (`--ssh-config`) and every file it includes, checked as small regular files.

    ssh reads them with no size limit (`/dev/zero` grew it to 12 GB) and blocks on a FIFO;
    refused here in one line instead. Include patterns are expanded as ssh does: `~`, globs,
    and relative paths under ~/.ssh."""
    pending = [(path, 0)]
    while pending:
        name, depth = pending.pop()
        text = read_small_text(Path(tool_file(name, "ssh config file")), "ssh config file") or ""
        for target in _includes(text):
            for found in sorted(glob.glob(target)):
                if depth + 1 > MAX_INCLUDE_DEPTH:
                    raise TpuctlError(f"ssh config file {path} includes files more than {MAX_INCLUDE_DEPTH} levels deep")
                pending.append((found, depth + 1))
    return path


def _includes(text: str) -> list[str]:
    """The file patterns of a config text's `Include` lines, as ssh would look them up."""
    patterns = []
    for line in text.splitlines():
        words = line.strip().replace("=", " ", 1).split(None, 1)
        if len(words) == 2 and words[0].lower() == "include":
            try:
                targets = shlex.split(words[1], comments=True)
            except ValueError:
                continue  # ssh -G reports the unbalanced quote itself
            for target in targets:
                expanded = os.path.expanduser(target)
                patterns.append(expanded if os.path.isabs(expanded) else str(Path.home() / ".ssh" / expanded))
    return patterns


def remote_command(argv: Sequence[str]) -> str:
    """One shell command line from an argv list: every word quoted exactly once."""
    if not argv:
        raise ValueError("empty remote command")
    return "exec " + shlex.join(argv)

"""Real OpenSSH servers on loopback ports, one per test "host", for the ssh backend's tests and benchmark.

Each sshd runs in its own mount namespace (`unshare -m`) with a private tmpfs on
/run, because sshd insists on /run/sshd and the machine's own /run must stay
untouched. A client key, a host key, a known_hosts file and an ssh config with
aliases `host1`..`hostN` (all 127.0.0.1, one port each) are written to a
private folder; `ssh -F <config> host2` then reaches the second server.

Each host's user has a home of its own in that folder (`home<N>`, with a stock ~/.bashrc), as separate machines
have: the namespace's /etc/passwd is a copy that names it, so sshd starts every session there and a path relative
to the home (a TPU VM's work folder, a relative --remote-dir) lands in it, never in this machine's own home.

A "fresh" cluster's hosts are as a TPU VM tpuctl just made: each sshd's namespace also hides, under empty
tmpfs mounts, everything of the launching side's that the hosts could otherwise read (this checkout, the
launcher's virtual environment and the checkout it was installed from, the home folder, the test session's
temporary folders), so a host has the system Python and what tpuctl ships (FreshHost).

Needs root (unshare -m, sshd's privilege separation). When /usr/sbin/sshd is
missing it is installed with apt-get (openssh-server, and rsync for --sync).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
PACKAGES = ("openssh-server", "rsync")
# What Debian's /etc/skel/.bashrc does for a non-interactive shell: nothing.
STOCK_BASHRC = "# a fresh host's ~/.bashrc (tests/integration/sshd.py)\ncase $- in *i*) ;; *) return;; esac\n"


def ensure_openssh() -> str | None:
    """Install openssh-server (and rsync) when sshd is missing; a reason string when that is impossible."""
    if os.geteuid() != 0:
        return "the sshd fixture needs root (unshare -m, sshd privilege separation)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is missing"
    if SSHD.exists() and shutil.which("ssh"):
        return None
    if shutil.which("apt-get") is None:
        return "sshd is missing and apt-get is not available to install openssh-server"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    return None if SSHD.exists() else "openssh-server installed, but /usr/sbin/sshd is still missing"


# The PATH sshd gives root's sessions (Debian's OpenSSH: the superuser's default path): where a host finds `python3`.
SESSION_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class FreshHost:
    """What a fresh host's namespace does before sshd starts: `hidden`, this machine's folders covered by empty tmpfs
    mounts (outermost only); `packages`, (this launcher's site-packages, the hosts' system Python's own site folder):
    bound there read-only, so the system Python finds TensorFlow where a TPU VM image installs it (pip as root, into
    /usr/local/lib/python3.X/dist-packages), not in the launcher's environment, which the host cannot see; None where
    the hosts' Python is another version than the launcher's, whose TensorFlow it could not load."""

    hidden: tuple[str, ...]
    packages: tuple[str, str] | None
    python: str  # the hosts' python3, as their sessions' PATH finds it
    why_no_packages: str = ""

    @classmethod
    def of_this_machine(cls, factory: pytest.TempPathFactory) -> FreshHost:
        import sysconfig

        import tpuctl
        from tests.conftest import ROOT

        python = shutil.which("python3", path=SESSION_PATH)
        if python is None:
            pytest.skip(f"no python3 on the hosts' PATH ({SESSION_PATH})")
        places = [ROOT, Path(tpuctl.__file__).resolve().parents[1], Path.home(), factory.getbasetemp()]
        if sys.prefix != sys.base_prefix:  # a venv: it, and the checkouts its editable installs point into
            site = Path(sysconfig.get_paths()["purelib"])
            places += [Path(sys.prefix), Path(sys.prefix).resolve(), *_pth_folders(site)]
        if os.environ.get("XDG_STATE_HOME"):
            places.append(Path(os.environ["XDG_STATE_HOME"]))  # the launcher's run records (tests/conftest.py)
        hidden = _outermost([str(place.resolve()) for place in places])
        for folder in hidden:
            if _under(os.path.realpath(python), folder) or _under(str(SSHD), folder):
                pytest.skip(f"the hosts' {python} or {SSHD} is inside {folder}, which a fresh host must not see")
        done = subprocess.run([python, "-c", "import site, sys; print(sys.version_info[0], sys.version_info[1]); print(*site.getsitepackages(), sep='\\n')"],
                              capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
        major, minor, *sites = done.stdout.split()
        target = next((folder for folder in sites if os.path.isdir(folder)), None)
        if (int(major), int(minor)) != sys.version_info[:2] or target is None or sys.prefix == sys.base_prefix:
            why = f"the hosts' {python} is Python {major}.{minor}, the launcher's TensorFlow is built for {sys.version_info[0]}.{sys.version_info[1]}"
            return cls(hidden, None, python, why if target is not None else f"the hosts' {python} has no site-packages folder")
        return cls(hidden, (sysconfig.get_paths()["purelib"], target), python)

    def commands(self, folder: Path) -> str:
        """The namespace's mounts, before sshd starts: the packages bound first (their source is hidden next), the
        folders hidden, then the cluster's own folder (keys, caches, the hosts' homes) bound back in place."""
        steps = [f"mkdir /run/keep && mount --bind {shlex.quote(str(folder))} /run/keep"]
        if self.packages is not None:
            source, target = map(shlex.quote, self.packages)
            steps.append(f"mount --bind {source} {target} && mount -o remount,bind,ro {target}")
        steps += [f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(hidden)}" for hidden in self.hidden]
        steps.append(f"mkdir -p {shlex.quote(str(folder))} && mount --bind /run/keep {shlex.quote(str(folder))}")
        return " && ".join(steps) + " && "


def _pth_folders(site: Path) -> list[Path]:
    """The folders a site-packages' .pth files add to sys.path (an editable install's checkout)."""
    found = []
    for pth in site.glob("*.pth"):
        for line in pth.read_text(errors="replace").splitlines():
            if line.strip() and not line.startswith(("#", "import")) and os.path.isabs(line.strip()) and os.path.isdir(line.strip()):
                found.append(Path(line.strip()))
    return found


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(folders: list[str]) -> tuple[str, ...]:
    """Each folder once, none inside another (a tmpfs over a parent hides its children already)."""
    kept: list[str] = []
    for folder in sorted(set(folders), key=len):
        if not any(_under(folder, outer) for outer in kept):
            kept.append(folder)
    return tuple(kept)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SshCluster:
    """N sshd processes on 127.0.0.1 and the client-side files that reach them as host1..hostN."""

    folder: Path
    count: int
    ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    dead_port: int = 0
    # Extra environment for the sessions of some hosts ({"host2": {"PYTHONPATH": ...}}): a host whose
    # environment differs from the others'. Values must not contain spaces (sshd's SetEnv syntax).
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    fresh: FreshHost | None = None  # hosts that see nothing of this machine's (FreshHost)
    # Hosts whose tpuctl environments folder (XDG_CACHE_HOME/tpuctl/envs) is a disk of its own this small ({"host3":
    # "1m"}, tmpfs's size=): a host without room for an environment. inside() reads what the host sees there.
    small_disks: dict[str, str] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.folder / "ssh_config"

    def aliased(self, path: Path, hosts: list[tuple[str, int]]) -> Path:
        """An ssh config at `path` that sends each (host, port) of `hosts` to that sshd (a TPU VM's host IPs, as the
        stand-in gives them), then this cluster's own host1..hostN."""
        aliases = [line for host, port in hosts for line in (f"Host {host}", "  HostName 127.0.0.1", f"  Port {port}", "")]
        path.write_text("\n".join(aliases) + self.config.read_text())
        return path

    def cache(self, index: int) -> Path:
        """host<index>'s XDG_CACHE_HOME (where tpuctl keeps the runtime it ships)."""
        return self.folder / f"cache{index}"

    def home(self, index: int) -> Path:
        """host<index>'s user's home: where its ssh sessions start."""
        return self.folder / f"home{index}"

    def inside(self, index: int, path: Path) -> Path:
        """`path` as host<index> sees it, through its sshd's mount namespace (a small disk mounted there, say)."""
        return Path(f"/proc/{self.procs[index - 1].pid}/root") / path.relative_to("/")

    @property
    def hosts(self) -> list[str]:
        return [f"host{i}" for i in range(1, self.count + 1)]

    @property
    def ssh_args(self) -> list[str]:
        return ["ssh", "-F", str(self.config)]

    def start(self) -> SshCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        host_key, client_key = self.folder / "host_key", self.folder / "client_key"
        for key in (host_key, client_key):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        public_host_key = (self.folder / "host_key.pub").read_text().split()[:2]
        self.ports = [free_port() for _ in range(self.count)]
        # A port that was free a moment ago and that nobody listens on: an unreachable host.
        self.dead_port = free_port()
        known = [f"[127.0.0.1]:{port} {' '.join(public_host_key)}" for port in self.ports]
        (self.folder / "known_hosts").write_text("\n".join(known) + "\n")
        self._write_client_config(client_key)
        try:
            for index, port in enumerate(self.ports, start=1):
                self.procs.append(self._start_sshd(index, port, host_key, client_key))
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_client_config(self, client_key: Path) -> None:
        lines = []
        for host, port in zip(self.hosts, self.ports):
            lines += [f"Host {host}", "  HostName 127.0.0.1", f"  Port {port}", ""]
        lines += ["Host hostdead", "  HostName 127.0.0.1", f"  Port {self.dead_port}", ""]
        lines += [
            "Host *",
            "  User root",
            f"  IdentityFile {client_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.folder / 'known_hosts'}",
            "  StrictHostKeyChecking yes",
            "  LogLevel ERROR",
            "",
        ]
        self.config.write_text("\n".join(lines))

    def _start_sshd(self, index: int, port: int, host_key: Path, client_key: Path) -> subprocess.Popen[bytes]:
        config = self.folder / f"sshd_config.{index}"
        config.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    "PermitRootLogin prohibit-password",
                    f"AuthorizedKeysFile {client_key}.pub",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PidFile none",
                    "MaxStartups 200:30:400",
                    "MaxSessions 64",
                    "LogLevel ERROR",
                    # Each "host" its own cache (tpuctl's shipped runtime), as separate machines have,
                    # and none of it in this machine's own ~/.cache.
                    # sshd keeps only its first SetEnv line: every variable goes on this one.
                    " ".join(["SetEnv", f"XDG_CACHE_HOME={self.cache(index)}", *(f"{k}={v}" for k, v in self.env.get(f"host{index}", {}).items())]),
                    "",
                ]
            )
        )
        hiding = self.fresh.commands(self.folder) if self.fresh is not None else ""
        small = self.small_disks.get(f"host{index}")
        envs = shlex.quote(str(self.cache(index) / "tpuctl" / "envs"))
        disk = f"mkdir -p {envs} && mount -t tmpfs -o size={shlex.quote(small)},mode=0700 tmpfs {envs} && " if small else ""
        passwd = shlex.quote(str(self._passwd(index)))
        script = f"mount -t tmpfs tmpfs /run && mkdir -m 0755 /run/sshd && mount --bind {passwd} /etc/passwd && {hiding}{disk}exec {SSHD} -D -e -f {config}"
        log = open(self.folder / f"sshd.{index}.log", "ab")  # noqa: SIM115 - owned by the process
        try:
            return subprocess.Popen(
                ["unshare", "-m", "sh", "-c", script], stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            log.close()

    def _passwd(self, index: int) -> Path:
        """host<index>'s /etc/passwd: this machine's, its user's home moved to home(index), which gets a stock ~/.bashrc,
        as a freshly made machine has. sshd runs commands with the user's `bash -c`, which reads ~/.bashrc; a developer's
        own (this machine's runs `pyenv init`, about 0.17 s a session) would otherwise run in every remote session."""
        home = self.home(index)
        home.mkdir(mode=0o700, exist_ok=True)
        (home / ".bashrc").write_text(STOCK_BASHRC)
        user = pwd.getpwuid(os.geteuid())
        lines = []
        for line in Path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) == 7 and fields[0] == user.pw_name:
                fields[5] = str(home)
            lines.append(":".join(fields))
        passwd = self.folder / f"passwd.{index}"
        passwd.write_text("\n".join(lines) + "\n")
        passwd.chmod(0o644)
        return passwd

    def _wait_listening(self, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        for index, (port, proc) in enumerate(zip(self.ports, self.procs), start=1):
            while True:
                if proc.poll() is not None:
                    log = (self.folder / f"sshd.{index}.log").read_text(errors="replace")
                    raise RuntimeError(f"sshd for host{index} exited ({proc.returncode}): {log.strip()}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > end:
                        raise RuntimeError(f"sshd for host{index} is not listening on {port}") from None
                    time.sleep(0.02)

    def stop(self) -> None:
        """Stop every server and end its open connections (each runs in a child sshd of its own
        session), so that no ControlMaster of a test outlives it."""
        for proc in self.procs:
            for child in _children(proc.pid):
                with contextlib.suppress(OSError):
                    os.kill(child, signal.SIGTERM)
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def running_cluster(
    factory: pytest.TempPathFactory,
    count: int,
    env: dict[str, dict[str, str]] | None = None,
    *,
    fresh: bool = False,
    small_disks: dict[str, str] | None = None,
) -> Iterator[SshCluster]:
    """The body of a module-scoped fixture: `count` sshd hosts (`env`: extra environment for some of them, by
    host name; `fresh`: hosts that see nothing of this machine's, FreshHost; `small_disks`: SshCluster's), or a skip
    that says why there are none."""
    reason = ensure_openssh()
    if reason:
        pytest.skip(reason)
    hiding = FreshHost.of_this_machine(factory) if fresh else None
    hosts = SshCluster(factory.mktemp("sshd"), count, env=dict(env or {}), fresh=hiding, small_disks=dict(small_disks or {})).start()
    try:
        yield hosts
    finally:
        hosts.stop()

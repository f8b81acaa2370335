"""Fan-out over ssh: time from the command to every host running a trivial command, as ratios in one run.

Hosts: 32 real sshd on loopback ports (tests/integration/sshd.py, needs root; sshd
and pdsh are installed with apt-get when missing), each with a stock root .bashrc
as a fresh machine has, reached as host1..host32 through a private ssh config. The trivial command is scripts/stamp.py, which
writes the time it started to a file of its own and exits.

For N = 2, 8 and 32 hosts:
    tpuctl       tpuctl launch scripts/stamp.py --hosts host1,...,hostN --strategy none
                 (a fresh ControlMaster dir every run: every connection is a full handshake)
    tpuctl-warm  the same, with the previous run's ControlMasters still up (informational)
    tpuctl-ship  tpuctl, with every host's cache emptied first: the runtime is shipped (informational)
    pdsh         pdsh -R ssh -f 32 -w host1,...,hostN PYTHON scripts/stamp.py DIR
    ssh-loop     ssh HOST PYTHON scripts/stamp.py DIR, one host after the other

Measured per run: "all running" = the latest start time written by stamp.py minus
the moment the command was started, "wall" = until the command exited, "CPU" =
the CPU time the whole machine spent meanwhile (/proc/stat: launcher, ssh clients,
sshd, remote shells and Pythons - every host is this machine, so they share its CPUs),
and "local CPU" = what the launching machine alone would spend: the command and the
ssh clients it waited for (getrusage of children).
Targets, on "all running" medians: tpuctl t(32)/t(2) <= 1.5; tpuctl <= 1.2x pdsh.

Runs are interleaved (every round runs each subject once for each N, in a rotating
order), after one untimed warm-up round (--no-warm-up, as --smoke has it, leaves it
out: the warm subject's masters then come up in its first runs), and medians are reported. This is a measurement, not a test: it exits 0
even when a target is missed.

    .venv/bin/python benchmarks/ssh_fanout.py [--runs N] [--hosts 2,8,32] [--kex ALGORITHM] [--no-warm-up]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.integration.sshd import SshCluster, ensure_openssh  # noqa: E402

STAMP = HERE / "scripts" / "stamp.py"
SCALE_TARGET = 1.5
PDSH_TARGET = 1.2
RUN_TIMEOUT_S = 180


def ensure_pdsh() -> str | None:
    """pdsh's path, installing it with apt-get when missing; None when that is impossible."""
    found = shutil.which("pdsh")
    if found or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "pdsh"]):
        subprocess.run(command, env=env, capture_output=True, check=False)
    return shutil.which("pdsh")


def short_tmpdir(prefix: str) -> Path:
    """A TMPDIR short enough for ControlMaster socket paths."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def end_masters(tmpdir: Path) -> None:
    """Stop the ControlMaster processes whose sockets live under tmpdir (ours, by pid)."""
    marker = str(tmpdir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if argv.startswith(b"ssh: ") and marker in argv:
            try:
                os.kill(int(entry.name), signal.SIGTERM)
            except OSError:
                pass


class Subjects:
    def __init__(self, cluster: SshCluster, pdsh: str | None) -> None:
        self.cluster = cluster
        self.pdsh = pdsh
        self.warm_tmp = short_tmpdir("tfw")
        self.env = {**os.environ, "NO_COLOR": "1"}

    def commands(self) -> dict[str, Callable[[list[str], Path], tuple[list[str], dict[str, str], Path | None]]]:
        found: dict[str, Callable[[list[str], Path], tuple[list[str], dict[str, str], Path | None]]] = {
            "tpuctl": self.tpuctl_cold,
            "tpuctl-warm": self.tpuctl_warm,
            "tpuctl-ship": self.tpuctl_ship,
        }
        if self.pdsh:
            found["pdsh"] = self.pdsh_command
        found["ssh-loop"] = self.ssh_loop
        return found

    def _tpuctl(self, hosts: list[str], stamps: Path) -> list[str]:
        """One launch per log dir (a folder holds one launch), so each run gets its own beside its stamps."""
        return [
            *tpuctl_command(), "launch", str(STAMP), "--hosts", ",".join(hosts), "--ssh-config", str(self.cluster.config),
            "--strategy", "none", "--log-dir", str(stamps.parent / f"logs-{stamps.name}"), "--", str(stamps),
        ]

    def tpuctl_cold(self, hosts: list[str], stamps: Path) -> tuple[list[str], dict[str, str], Path | None]:
        tmp = short_tmpdir("tfc")
        return self._tpuctl(hosts, stamps), {**self.env, "TMPDIR": str(tmp)}, tmp

    def tpuctl_ship(self, hosts: list[str], stamps: Path) -> tuple[list[str], dict[str, str], Path | None]:
        """A first launch ever: no ControlMaster, and no host has tpuctl's runtime in its cache yet."""
        for index in range(1, len(hosts) + 1):
            shutil.rmtree(self.cluster.cache(index) / "tpuctl", ignore_errors=True)
        return self.tpuctl_cold(hosts, stamps)

    def tpuctl_warm(self, hosts: list[str], stamps: Path) -> tuple[list[str], dict[str, str], Path | None]:
        return self._tpuctl(hosts, stamps), {**self.env, "TMPDIR": str(self.warm_tmp)}, None

    def pdsh_command(self, hosts: list[str], stamps: Path) -> tuple[list[str], dict[str, str], Path | None]:
        assert self.pdsh is not None
        env = {**self.env, "PDSH_SSH_ARGS": f"-F {self.cluster.config} -a -x -l%u %h"}
        return [self.pdsh, "-R", "ssh", "-f", "32", "-w", ",".join(hosts), sys.executable, str(STAMP), str(stamps)], env, None

    def ssh_loop(self, hosts: list[str], stamps: Path) -> tuple[list[str], dict[str, str], Path | None]:
        line = "; ".join(
            f"ssh -F {self.cluster.config} {host} {sys.executable} {STAMP} {stamps} || exit 1" for host in hosts
        )
        return ["sh", "-c", line], self.env, None


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent (user, nice, system, irq, softirq), from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6))
    return busy / os.sysconf("SC_CLK_TCK")


Measure = tuple[float, float, float, float]  # all running, wall, machine CPU, local CPU (seconds)


def children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children, with the children they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], env: dict[str, str], stamps: Path, hosts: int) -> Measure:
    cpu, local = machine_cpu_s(), children_cpu_s()
    start_wall = time.time()
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    wall = time.perf_counter() - start
    cpu, local = machine_cpu_s() - cpu, children_cpu_s() - local
    if done.returncode != 0:
        raise SystemExit(f"benchmark command failed with status {done.returncode}: {argv[0]} ...\n{done.stderr[-2000:]}")
    written = [float(p.read_text()) for p in stamps.iterdir()]
    if len(written) != hosts:
        raise SystemExit(f"{len(written)} of {hosts} hosts ran the command: {argv[0]} ...")
    return max(written) - start_wall, wall, cpu, local


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of every subject at every host count (default 5)")
    parser.add_argument("--hosts", default="2,8,32", help="host counts (default 2,8,32)")
    parser.add_argument(
        "--kex", help="KexAlgorithms for every subject's ssh, e.g. curve25519-sha256 (default: OpenSSH's own)"
    )
    parser.add_argument(
        "--warm-up", action=argparse.BooleanOptionalAction, default=True, help="an untimed round of every job first (default: on)"
    )
    args = parse_args(parser, runs=1, hosts="1,2", warm_up=False)  # smoke: one host and a fan-out to two
    runs = max(1, args.runs)
    counts = sorted({int(n) for n in args.hosts.split(",")})

    reason = ensure_openssh()
    if reason:
        raise SystemExit(f"cannot start sshd servers: {reason}")
    pdsh = ensure_pdsh()
    print(f"ssh fan-out: {max(counts)} sshd on loopback, python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print(f"key exchange: {args.kex or 'OpenSSH default'}")
    print(f"tpuctl: {' '.join(tpuctl_command())}; pdsh: {pdsh or 'not found (anchor skipped)'}")
    print(f"runs: {runs} per subject and host count, interleaved, after {'one warm-up' if args.warm_up else 'no warm-up'} each")

    with tempfile.TemporaryDirectory(prefix="tpuctl-fanout-") as tmp:
        work = Path(tmp)
        cluster = SshCluster(work / "sshd", max(counts)).start()
        if args.kex:  # the config ends with its `Host *` block, which this line joins
            with cluster.config.open("a") as config:
                config.write(f"  KexAlgorithms {args.kex}\n")
        subjects = Subjects(cluster, pdsh)
        cold_dirs: list[Path] = []
        try:
            commands = subjects.commands()
            names = list(commands)
            results: dict[tuple[str, int], list[Measure]] = {(n, c): [] for n in names for c in counts}
            jobs = [(name, count) for count in counts for name in names]
            serial = 0

            def run(name: str, count: int) -> Measure:
                nonlocal serial
                serial += 1
                stamps = work / f"stamps-{serial}"
                stamps.mkdir()
                argv, env, cold = commands[name](cluster.hosts[:count], stamps)
                try:
                    return time_once(argv, env, stamps, count)
                finally:
                    if cold is not None:
                        end_masters(cold)
                        cold_dirs.append(cold)

            for name, count in jobs if args.warm_up else []:  # warm-up: page cache, .pyc files, and the warm subject's masters
                run(name, count)
            for round_no in range(runs):
                shift = round_no % len(jobs)
                for name, count in jobs[shift:] + jobs[:shift]:
                    results[(name, count)].append(run(name, count))
        finally:
            end_masters(subjects.warm_tmp)
            cluster.stop()
            for folder in [subjects.warm_tmp, *cold_dirs]:
                shutil.rmtree(folder, ignore_errors=True)

    running, walls, cpus, locals_ = (
        {key: statistics.median(m[i] for m in values) for key, values in results.items()} for i in range(4)
    )
    print()
    print(
        f"{'hosts':>5}  {'subject':<12} {'all running s':>13} {'wall s':>8} {'CPU s':>7} {'CPU/host':>9} {'local CPU s':>12}"
        "   runs (all running)"
    )
    for count in counts:
        for name in names:
            values = " ".join(f"{m[0]:.2f}" for m in results[(name, count)])
            cpu = cpus[(name, count)]
            print(
                f"{count:>5}  {name:<12} {running[(name, count)]:>13.3f} {walls[(name, count)]:>8.3f} "
                f"{cpu:>7.2f} {cpu / count:>9.3f} {locals_[(name, count)]:>12.3f}   {values}"
            )
    print()
    print(f"{'check':<40} {'ratio':>6} {'target':>8}  result")
    low, high = counts[0], counts[-1]

    def verdict(label: str, ratio: float, target: float | None) -> None:
        result = "info" if target is None else ("PASS" if ratio <= target else "MISS")
        target_text = "none" if target is None else f"<= {target:.2f}x"
        print(f"{label:<40} {ratio:>5.2f}x {target_text:>8}  {result}")

    if high != low:
        verdict(f"tpuctl t({high}) / t({low})", running[("tpuctl", high)] / running[("tpuctl", low)], SCALE_TARGET)
        if pdsh:
            verdict(f"pdsh t({high}) / t({low})", running[("pdsh", high)] / running[("pdsh", low)], None)
    for count in counts:
        if pdsh:
            verdict(f"tpuctl / pdsh, {count} hosts", running[("tpuctl", count)] / running[("pdsh", count)], PDSH_TARGET)
    for count in counts:
        verdict(f"tpuctl / ssh-loop, {count} hosts", running[("tpuctl", count)] / running[("ssh-loop", count)], None)
    if high != low:
        verdict(f"tpuctl local CPU ({high}) / ({low})", locals_[("tpuctl", high)] / locals_[("tpuctl", low)], None)
        if pdsh:
            verdict(f"pdsh local CPU ({high}) / ({low})", locals_[("pdsh", high)] / locals_[("pdsh", low)], None)
    for count in counts:
        verdict(f"tpuctl-warm / tpuctl, {count} hosts", running[("tpuctl-warm", count)] / running[("tpuctl", count)], None)
    for count in counts:
        verdict(f"tpuctl-ship / tpuctl, {count} hosts", running[("tpuctl-ship", count)] / running[("tpuctl", count)], None)
    print(f"(medians of 'all running'; every host is this machine, so all hosts share its {os.cpu_count()} CPU(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())

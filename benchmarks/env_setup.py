"""Environment setup (launch --requirements) on N hosts: tpuctl against the loop users write, cold, warm, and on a
preempted run's recreated VM, as ratios in one run.

Hosts: N real sshd on loopback ports (tests/integration/sshd.py, needs root), each with its own cache
(XDG_CACHE_HOME, where tpuctl's environments and pip's cache live), reading no pip configuration of this machine's
and doing no pip version check (PIP_DISABLE_PIP_VERSION_CHECK=1, as tpuctl's own pip runs have it). Every host is
this machine: the hosts share its CPUs, which a real slice's hosts do not.

Packages: the tests' PEP 503 index (tests/standins/package_index.py) serving real wheels, made here (as the tests make
theirs: tests/standins/tiny_wheels.py) from generated packages: --packages of them in a tree (each requires the next two), each --py-kb of Python source
and --blob-kb of incompressible bytes (a compiled extension's weight). The requirements file names the root alone,
so a resolution finds the rest. --latency-ms holds every index reply back that long (default 0: a local index has no
network; a real index's round trips are slower: its help gives a measured figure).

1. cold (no environment and no wheel cache on any host, nor in the launcher's cache), interleaved:
     tpuctl   tpuctl launch scripts/env_stamp.py --hosts host1..hostN --requirements R --index-url URL
              --strategy none: the timeline's environment span (environment_begin .. environment_end), and the
              time from the command to the first and to every worker running
     loop     every host at once, as `gcloud ... ssh --worker=all --command "pip install -r requirements.txt"`:
              ssh HOST 'PY -m venv --without-pip --system-site-packages V && (the .pth) && V/bin/python -m pip
              install --index-url URL -r R': a fresh venv over the same Python, made as tpuctl makes its own, which
              sees what the host's Python sees (PY is itself a venv here, so its site-packages are named in a .pth,
              as tpuctl does): both sides' pip install into the same kind of place, among the same installed packages
   Target: tpuctl's environment span <= 0.5x the loop's wall time.
2. warm (each side's cold run done: the same launch again): tpuctl's environment step, every host at once (the
   probe that finds the lock's environment ready); target <= 1 s, which bounds every host's share. The loop's
   `pip install -r` again on its venvs (pip finds every requirement satisfied), for information.
3. restart: `tpuctl launch --new-tpu v4-(8N)` in the TPU stand-in (tests/standins/google_apis.py), its hosts the sshd
   servers, its workers on the VM's own python3 (no --python: one of this machine's is refused for a VM tpuctl
   makes; here the hosts' python3 is the system's, its environments of their own); once attempt 1's workers run,
   every host's cache is removed (the recreated VM's disks are new), the node is PREEMPTED and worker 0's agent
   killed (its host goes down), and the time from then to attempt 2's workers running (the trivial script's start
   is its first step) is taken, with the timeline's spans of attempt 2's environment and the recreate:
     kept     --requirements: attempt 2's hosts are built from the wheels the launcher kept, the index stopped
     index    --setup 'python -m pip install --index-url URL -r R' (what users write in a setup hook): each
              recreated host installs from the index again
   No target (information): what the kept wheels save a restart.

Runs are interleaved (the order flips every round) after one untimed round of each cold side (--no-warm-up, as
--smoke has it, leaves it out); medians are reported. This is a measurement, not a test: it exits 0 even when a
target is missed.

    .venv/bin/python benchmarks/env_setup.py [--hosts 8] [--runs 3] [--restart-runs 2] [--packages 16] [--latency-ms 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from ssh_fanout import end_masters, short_tmpdir  # benchmarks/ssh_fanout.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.integration.sshd import SshCluster, ensure_openssh  # noqa: E402
from tests.standins import catalog  # noqa: E402
from tests.standins.fixtures import standin_env  # noqa: E402
from tests.standins.google_apis import GoogleStandin  # noqa: E402
from tests.standins.new_tpu_cloud import Launch, agent_of_worker  # noqa: E402
from tests.standins.package_index import PackageIndex, Source, build_wheels  # noqa: E402
from tpuctl.backends.ssh.environment.host_env import HOST_PATHS  # noqa: E402
from tpuctl.runs import timeline as tl  # noqa: E402

STAMP = HERE / "scripts" / "env_stamp.py"
COLD_TARGET = 0.5
WARM_TARGET_S = 1.0
RUN_TIMEOUT_S = 900
ZONE = "us-central2-b"  # v4 is offered and priced there in the stand-in
HOST_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


# ---- the packages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Weighted(Source):
    """A generated package with weight: Python source over modules of at most 32 KB, and a data file of random bytes."""

    py_kb: int = 0
    blob_kb: int = 0

    def files(self) -> dict[str, str | bytes]:
        found = super().files()
        left, number = self.py_kb * 1024, 0
        while left > 0:  # modules of plain functions, what pip compiles to .pyc as it installs
            functions: list[str] = []
            while sum(map(len, functions)) < min(left, 32768):
                i = len(functions)
                functions.append(f"def f{i}(x, y=0):\n    return (x * {i} + y) % {i + 7}\n\n\n")
            found[f"{self.module}/part{number}.py"] = "".join(functions)
            left -= sum(map(len, functions))
            number += 1
        if self.blob_kb:
            found[f"{self.module}/native.bin"] = os.urandom(self.blob_kb * 1024)
        return found


def workload(root: Path, count: int, py_kb: int, blob_kb: int) -> tuple[Path, Path, str]:
    """The index's folder of wheels, the requirements file (the tree's root alone) and the root's module."""
    names = [f"tpuctl-bench-p{i:02d}" for i in range(count)]
    sources = [
        Weighted(name, "1.0", tuple(f"{names[j]}>=1.0" for j in (2 * i + 1, 2 * i + 2) if j < count), py_kb=py_kb, blob_kb=blob_kb)
        for i, name in enumerate(names)
    ]
    wheels = build_wheels(sources, root)
    requirements = root / "requirements.txt"
    requirements.write_text(f"{names[0]}>=1.0\n")
    return wheels[0].parent, requirements, sources[0].module


class Index(PackageIndex):
    """The stand-in index, each reply held back `latency_s` (a real index's round trip)."""

    def __init__(self, folder: Path, latency_s: float) -> None:
        super().__init__(folder)
        self.latency_s = latency_s

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        if self.latency_s:
            time.sleep(self.latency_s)
        super()._answer(request)


# ---- the bench ---------------------------------------------------------------------------------------


@dataclass
class Bench:
    cluster: SshCluster
    index: Index
    requirements: Path
    module: str
    work: Path
    serial: int = 0

    def __post_init__(self) -> None:
        """What the hosts' Python sees beyond its standard library, as tpuctl's environment program finds it."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run([sys.executable, "-c", HOST_PATHS], env=env, capture_output=True, text=True, check=True, timeout=60)
        is_venv, paths = json.loads(done.stdout)
        self.host_paths: list[str] = paths if is_venv else []

    def next(self, what: str) -> Path:
        self.serial += 1
        folder = self.work / f"{what}-{self.serial}"
        (folder / "stamps").mkdir(parents=True)
        return folder

    def bare(self, count: int, *, runtime: bool = False) -> None:
        """No environment, wheel, pip cache or loop venv on the first `count` hosts (and no shipped runtime either,
        with `runtime`: a new VM's disk)."""
        for index in range(1, count + 1):
            cache = self.cluster.cache(index)
            tpuctl = [cache / "tpuctl"] if runtime else [cache / "tpuctl" / "envs", cache / "tpuctl" / "wheels"]
            for folder in [cache / "pip", cache / "loop", *tpuctl]:
                shutil.rmtree(folder, ignore_errors=True)

    def loop_venv(self, index: int) -> Path:
        return self.cluster.cache(index) / "loop" / "venv"


@dataclass(frozen=True)
class Launched:
    env_s: float  # the timeline's environment span, attempt 1
    first_s: float  # command start -> the first worker running
    all_s: float  # command start -> every worker running
    wall_s: float  # command start -> its exit
    built: int  # hosts the environment step built
    copied: int  # of those, the hosts that got a copy of another host's build


def stamps(folder: Path, attempt: int) -> list[float]:
    return [float(p.read_text()) for p in folder.glob(f"{attempt}-*") if not p.name.endswith(".part")]


def environment_span(logs: Path, attempt: int) -> tuple[float, int, int]:
    """The attempt's environment span in its timeline (first environment_begin to last environment_end, wall clock),
    the hosts its packages step built, and how many of those got a copy of another host's build."""
    events = [e for e in tl.read((logs / "timeline.jsonl").read_text().splitlines()).events if e.attempt == attempt]
    begins = [e.wall for e in events if e.event == tl.ENV_BEGIN]
    ends = [e for e in events if e.event == tl.ENV_END]
    if not begins or not ends:
        raise SystemExit(f"no environment span for attempt {attempt} in {logs / 'timeline.jsonl'}")
    packages = [e for e in ends if e.fields.get("step") == "packages"]
    built, copied = (sum(int(e.fields.get(name, 0)) for e in packages) for name in ("built", "copied"))
    return max(e.wall for e in ends) - min(begins), built, copied


def tpuctl_launch(bench: Bench, hosts: list[str], launcher_cache: Path) -> Launched:
    run = bench.next("tpuctl")
    masters = short_tmpdir("tfe")
    argv = [
        *tpuctl_command(), "launch", str(STAMP), "--hosts", ",".join(hosts), "--ssh-config", str(bench.cluster.config),
        "--python", sys.executable, "--strategy", "none", "--requirements", str(bench.requirements), "--index-url", bench.index.url,
        "--log-dir", str(run / "logs"), "--", str(run / "stamps"), bench.module,
    ]  # fmt: skip
    env = {**os.environ, "NO_COLOR": "1", "TMPDIR": str(masters), "XDG_CACHE_HOME": str(launcher_cache)}
    start_wall, start = time.time(), time.perf_counter()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    finally:
        end_masters(masters)
        shutil.rmtree(masters, ignore_errors=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tpuctl launch failed with status {done.returncode}:\n{done.stderr[-3000:]}")
    started = stamps(run / "stamps", 1)
    if len(started) != len(hosts):
        raise SystemExit(f"{len(started)} of {len(hosts)} workers ran:\n{done.stderr[-3000:]}")
    span, built, copied = environment_span(run / "logs", 1)
    return Launched(span, min(started) - start_wall, max(started) - start_wall, wall, built, copied)


def loop(bench: Bench, hosts: list[str], *, warm: bool) -> float:
    """The users' loop: ssh to every host at once, a venv made there (cold) and pip install -r from the index; the
    wall time until every host is done, once each venv imports the requirements' root."""
    procs = []
    start = time.perf_counter()
    for number, host in enumerate(hosts, start=1):
        venv = bench.loop_venv(number)
        site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        seen = f"printf '%s\\n' {' '.join(shlex.quote(p) for p in bench.host_paths)} > {site}/host.pth && " if bench.host_paths else ""
        make = "" if warm else f"{sys.executable} -m venv --without-pip --system-site-packages {venv} && {seen}"
        line = f"{make}{venv}/bin/python -m pip install -q --index-url {bench.index.url} -r {bench.requirements}"
        argv = ["ssh", "-F", str(bench.cluster.config), host, line]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [proc.communicate(timeout=RUN_TIMEOUT_S)[0] for proc in procs]
    wall = time.perf_counter() - start
    for host, proc, output in zip(hosts, procs, outputs, strict=True):
        if proc.returncode != 0:
            raise SystemExit(f"the loop's pip install failed on {host} ({proc.returncode}):\n{output[-3000:]}")
    for number in range(1, len(hosts) + 1):
        python = bench.loop_venv(number) / "bin" / "python"
        subprocess.run([str(python), "-c", f"import {bench.module}"], check=True, capture_output=True, timeout=60)
    return wall


# ---- the restart -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Restarted:
    first_s: float  # preemption -> attempt 2's first worker running
    all_s: float  # preemption -> every worker of attempt 2 running
    env_s: float  # attempt 2's environment span
    recreate_s: float  # the recreate span (recreate_begin .. recreate_end)


class Cloud:
    """The TPU stand-in holding one zone of v4-(8N), every address a node there may get mapped to an sshd host."""

    def __init__(self, bench: Bench, hosts: int) -> None:
        self.bench, self.hosts = bench, hosts
        self.type = f"v4-{8 * hosts}"  # 4 chips a host, 2 TensorCores a chip: v4-16 has 2 hosts, v4-64 has 8
        self.g = GoogleStandin(project="tpuctl-bench", seed=0).start()
        self.g.create_delay_s = 0.05
        self.g.set_zones([ZONE], [self.type])
        base = catalog.cidr_block(ZONE).split("/")[0].rsplit(".", 1)[0]
        pairs = [(f"{base}.{n + 2}", bench.cluster.ports[n % hosts]) for n in range(hosts * 8)]  # up to 7 recreates
        self.config = bench.cluster.aliased(bench.work / "ssh_config_tpu", pairs)

    def stop(self) -> None:
        self.g.stop()

    def restart(self, variant: str) -> Restarted:
        bench = self.bench
        run = bench.next(f"restart-{variant}")
        (run / "flags").mkdir()
        env = {**standin_env(self.g, run), "NO_COLOR": "1", "TMPDIR": str(short_tmpdir("tfr"))}
        source = ["--requirements", str(bench.requirements), "--index-url", bench.index.url]
        if variant == "index":
            source = ["--setup", f"python -m pip install -q --index-url {bench.index.url} -r {bench.requirements}"]
        args = [
            str(STAMP), "--new-tpu", self.type, "--zone", ZONE, "--ssh-config", str(self.config),
            "--strategy", "none", "--log-dir", str(run / "logs"), "--env", f"HOLD_FIRST={run / 'flags'}", "--start-timeout", "900",
            *source, "--", str(run / "stamps"), bench.module,
        ]  # fmt: skip
        bench.bare(self.hosts, runtime=True)
        launch = Launch.start(args, env, run)
        stopped = False
        try:
            self._wait(launch, run, 1)
            record = next((Path(env["HOME"]) / ".local" / "state" / "tpuctl" / "records").glob("*.json"))
            facts = json.loads(record.read_text())
            if variant == "kept":
                bench.index.stop()
                stopped = True
            bench.bare(self.hosts, runtime=True)  # the recreated VM's disks are new
            agent = agent_of_worker(facts["run_id"], 1)
            if agent is None:
                raise SystemExit("no agent found for worker 0 of attempt 1")
            preempted = time.time()
            self.g.preempt(ZONE, facts["created_node"])
            os.kill(agent, signal.SIGKILL)  # the preempted host takes worker 0's session with it
            self._wait(launch, run, 2)
            code = launch.finish(timeout=RUN_TIMEOUT_S)
        finally:
            if launch.proc.poll() is None:
                launch.proc.kill()
            if stopped:
                bench.index.start()
            end_masters(Path(env["TMPDIR"]))
            shutil.rmtree(env["TMPDIR"], ignore_errors=True)
        if code != 0:
            raise SystemExit(f"the --new-tpu launch ended with {code}:\n{launch.stderr[-3000:]}")
        second = stamps(run / "stamps", 2)
        span, _, _ = environment_span(run / "logs", 2)
        events = tl.read((run / "logs" / "timeline.jsonl").read_text().splitlines()).events
        recreate = [e.wall for e in events if e.event in (tl.RECREATE_BEGIN, tl.RECREATE_END)]
        return Restarted(min(second) - preempted, max(second) - preempted, span, max(recreate) - min(recreate))

    def _wait(self, launch: Launch, run: Path, attempt: int) -> None:
        end = time.monotonic() + RUN_TIMEOUT_S
        while len(stamps(run / "stamps", attempt)) < self.hosts:
            if launch.proc.poll() is not None or time.monotonic() > end:
                launch.proc.kill()
                raise SystemExit(f"attempt {attempt}'s workers did not all start:\n{launch.stderr[-3000:]}")
            time.sleep(0.05)


# ---- the report --------------------------------------------------------------------------------------


def verdict(label: str, value: float, target: float | None, unit: str = "x") -> None:
    result = "info" if target is None else ("PASS" if value <= target else "MISS")
    target_text = "none" if target is None else f"<= {target:.2f}{unit}"
    print(f"{label:<58} {value:>7.2f}{unit} {target_text:>9}  {result}")


def row(label: str, values: list[float]) -> None:
    print(f"  {label:<44} {statistics.median(values):>8.2f}   {' '.join(f'{v:.2f}' for v in values)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8, choices=(1, 2, 4, 8), help="hosts (default 8; a v4-(8N) for the restart)")
    parser.add_argument("--runs", type=int, default=3, help="cold rounds, each side once a round (default 3), a warm run after each")
    parser.add_argument("--restart-runs", type=int, default=2, help="preempted --new-tpu runs of each variant (default 2; 0: none)")
    parser.add_argument("--packages", type=int, default=16, help="packages the requirements resolve to (default 16)")
    parser.add_argument("--py-kb", type=int, default=200, help="KB of Python source in each package (default 200)")
    parser.add_argument("--blob-kb", type=int, default=1000, help="KB of incompressible data in each package (default 1000)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="every index reply held back this long (default 0: a local index, no network; for scale, a profile of pip against "
        "PyPI from a desktop spent 25 s in 92 page fetches, ~270 ms each: https://github.com/pypa/pip/issues/10467)",
    )
    parser.add_argument(
        "--warm-up", action=argparse.BooleanOptionalAction, default=True, help="an untimed cold run of each side first (default: on)"
    )
    args = parse_args(parser, hosts=2, runs=1, restart_runs=1, packages=3, py_kb=8, blob_kb=16, warm_up=False)
    reason = ensure_openssh()
    if reason:
        raise SystemExit(f"cannot start sshd servers: {reason}")
    count = args.hosts
    print(f"environment setup: {count} sshd hosts on loopback, python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), every host this machine")
    print(f"tpuctl: {' '.join(tpuctl_command())}")

    with tempfile.TemporaryDirectory(prefix="tpuctl-envbench-") as tmp:
        work = Path(tmp)
        built = time.perf_counter()
        folder, requirements, module = workload(work / "packages", args.packages, args.py_kb, args.blob_kb)
        wheels = sorted(folder.glob("*.whl"))
        size = sum(p.stat().st_size for p in wheels)
        print(
            f"packages: {len(wheels)} wheels, {size / 1e6:.1f} MB, made in {time.perf_counter() - built:.1f}s "
            f"({args.py_kb} KB of Python and {args.blob_kb} KB of random bytes each); requirements: {requirements.read_text().strip()}"
        )
        basis = "a local index: no network" if not args.latency_ms else "for scale: pip against PyPI from a desktop, ~270 ms a page fetch (pypa/pip#10467)"
        print(f"index latency: {args.latency_ms:g} ms before every reply ({basis})")
        sys.stdout.flush()
        cluster = SshCluster(work / "sshd", count, env={f"host{i}": dict(HOST_ENV) for i in range(1, count + 1)}).start()
        index = Index(folder, args.latency_ms / 1000).start()
        bench = Bench(cluster, index, requirements, module, work)
        cloud: Cloud | None = None
        try:
            hosts = cluster.hosts
            cold: dict[str, list[float]] = {"env": [], "first": [], "all": [], "wall": [], "loop": []}
            warm: dict[str, list[float]] = {"env": [], "loop": []}
            copies: list[int] = []  # per timed cold run: the hosts that got a copy of the first host's build

            def tpuctl_side(timed: bool) -> None:
                bench.bare(count)
                launcher = bench.next("launcher-cache")
                first = tpuctl_launch(bench, hosts, launcher)
                again = tpuctl_launch(bench, hosts, launcher)
                if first.built != count or again.built != 0:
                    raise SystemExit(f"cold built {first.built} host(s), warm {again.built}: expected {count} and 0")
                if timed:
                    for key, value in (("env", first.env_s), ("first", first.first_s), ("all", first.all_s), ("wall", first.wall_s)):
                        cold[key].append(value)
                    warm["env"].append(again.env_s)
                    copies.append(first.copied)

            def loop_side(timed: bool) -> None:
                bench.bare(count)
                wall = loop(bench, hosts, warm=False)
                again = loop(bench, hosts, warm=True)
                if timed:
                    cold["loop"].append(wall)
                    warm["loop"].append(again)

            sides: list[Callable[[bool], None]] = [tpuctl_side, loop_side]
            if args.warm_up:
                for side in sides:
                    side(False)
            for round_no in range(max(1, args.runs)):
                for side in sides if round_no % 2 == 0 else sides[::-1]:
                    side(True)
                copied = f"{copies[-1]} host(s) copied"
                print(f"round {round_no + 1}: tpuctl environment {cold['env'][-1]:.2f}s ({copied}), loop {cold['loop'][-1]:.2f}s", flush=True)

            restarts: dict[str, list[Restarted]] = {"kept": [], "index": []}
            if args.restart_runs > 0:
                cloud = Cloud(bench, count)
                for round_no in range(args.restart_runs):
                    for variant in ("kept", "index") if round_no % 2 == 0 else ("index", "kept"):
                        restarts[variant].append(cloud.restart(variant))
                    print(f"restart round {round_no + 1}: kept {restarts['kept'][-1].all_s:.2f}s, index {restarts['index'][-1].all_s:.2f}s", flush=True)
        finally:
            if cloud is not None:
                cloud.stop()
            index.stop()
            cluster.stop()

    median = statistics.median
    print()
    print(f"{count} hosts, cold (no environment, no wheel cache anywhere)            median   runs")
    row("tpuctl: environment span (timeline) s", cold["env"])
    row("tpuctl: command -> first worker running s", cold["first"])
    row("tpuctl: command -> every worker running s", cold["all"])
    row("tpuctl: command -> exit s", cold["wall"])
    row("loop: venv + pip install -r on every host s", cold["loop"])
    print(f"{count} hosts, warm (the lock's environment built on every host)")
    row("tpuctl: environment step, every host at once s", warm["env"])
    row("loop: pip install -r again (all satisfied) s", warm["loop"])
    if args.restart_runs > 0:
        print(f"{count} hosts, a preempted --new-tpu {cloud.type if cloud else ''} run's restart, every host's disk new")
        for variant, words in (("kept", "kept wheels, index stopped"), ("index", "--setup pip install from the index")):
            row(f"{words}: preempted -> first worker s", [r.first_s for r in restarts[variant]])
            row(f"{words}: preempted -> every worker s", [r.all_s for r in restarts[variant]])
            row(f"{words}: attempt 2 environment span s", [r.env_s for r in restarts[variant]])
            row(f"{words}: recreate span s", [r.recreate_s for r in restarts[variant]])
    print()
    print(f"{'check':<58} {'value':>8} {'target':>9}  result")
    verdict(f"cold: tpuctl environment / loop, {count} hosts", median(cold["env"]) / median(cold["loop"]), COLD_TARGET)
    verdict(f"cold: tpuctl every worker running / loop, {count} hosts", median(cold["all"]) / median(cold["loop"]), None)
    verdict(f"warm: tpuctl environment step, {count} hosts at once", median(warm["env"]), WARM_TARGET_S, "s")
    verdict(f"warm: tpuctl environment / loop's pip again, {count} hosts", median(warm["env"]) / median(warm["loop"]), None)
    if args.restart_runs > 0:
        kept, fresh = restarts["kept"], restarts["index"]
        verdict("restart: kept / index, preempted -> every worker", median(r.all_s for r in kept) / median(r.all_s for r in fresh), None)
        verdict("restart: kept / index, attempt 2 environment", median(r.env_s for r in kept) / median(r.env_s for r in fresh), None)
    print(f"(medians; every host is this machine, so all hosts share its {os.cpu_count()} CPU(s); index latency {args.latency_ms:g} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

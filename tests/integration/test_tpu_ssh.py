"""`tpuctl ssh NAME --worker all -- CMD` and `--cleanup`: the slice's hosts from the TPU stand-in,
reached through real sshd servers (the stand-in's host IPs are mapped to them in an ssh config)."""

from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import alive, run_tpuctl
from tests.integration.sshd import SshCluster
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.ssh.tpu_cleanup import LOCKFILE

ZONE = "us-central2-b"


# /tmp/libtpu_lockfile is the machine's, not the test session's: a second test suite on this machine (another clone's
# `make test`) plants and cleans it too, and its --cleanup would kill this one's stale process. The sessions take turns.
MACHINE_TURN = Path("/tmp/tpuctl-tests-libtpu-lockfile.turn")
TURN_WAIT_S = 600


@pytest.fixture(scope="module", autouse=True)
def machine_turn() -> Iterator[None]:
    with MACHINE_TURN.open("a") as turn:
        deadline = time.monotonic() + TURN_WAIT_S
        while True:
            try:
                fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, f"another test session held {MACHINE_TURN} for {TURN_WAIT_S} s"
                time.sleep(0.2)
        yield


@pytest.fixture
def slice_env(cluster: SshCluster, google_standin: GoogleStandin, tmp_path: Path) -> tuple[dict[str, str], Path, list[str]]:
    """A READY 2-host v4-16 in the stand-in, and an ssh config that sends its IPs to the two sshd."""
    (name,) = google_standin.add_ready_nodes(ZONE, 1, prefix="pod", accelerator_type="v4-16")
    node = google_standin.node(ZONE, name)
    assert node is not None
    ips = [endpoint.get("accessConfig", {}).get("externalIp") or endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
    assert len(ips) == 2
    config = cluster.aliased(tmp_path / "ssh_config", list(zip(ips, cluster.ports, strict=True)))
    env = {**standin_env(google_standin, tmp_path), "TPUCTL_ZONE": ZONE}
    return env, config, [name, *ips]


def test_command_on_every_worker_with_prefixes_and_status(slice_env: tuple[dict[str, str], Path, list[str]]) -> None:
    env, config, (name, ip0, ip1) = slice_env
    everywhere = run_tpuctl("ssh", name, "--worker", "all", "--ssh-config", str(config), "--", "sh", "-c", "echo hello $((20+1))", env=env)
    assert everywhere.returncode == 0, everywhere.stderr
    assert everywhere.stdout.splitlines() == [f"[worker:0@{ip0}] hello 21", f"[worker:1@{ip1}] hello 21"]
    failing = run_tpuctl("ssh", name, "--worker", "1", "--ssh-config", str(config), "--", "sh", "-c", "echo no; exit 3", env=env)
    assert failing.returncode == 3 and failing.stdout == f"[worker:1@{ip1}] no\n"
    for args, words in (
        (("--worker", "5", "--", "true"), "this TPU VM has workers 0-1"),
        (("--worker", "x", "--", "true"), "give all, a worker number"),
        ((), "give a COMMAND after --, or --cleanup"),
        (("--ssh-option", "NoValue", "--", "true"), "--ssh-option 'NoValue' is not NAME=VALUE"),
    ):
        bad = run_tpuctl("ssh", name, "--ssh-config", str(config), *args, env=env)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and words in bad.stderr, bad.stderr


def test_a_dry_run_prints_each_host_s_command_and_runs_nothing(slice_env: tuple[dict[str, str], Path, list[str]], tmp_path: Path) -> None:
    """Issue 30: `tpuctl ssh` had no --dry-run. The node is looked up (its hosts); nothing connects to them."""
    env, config, (name, ip0, ip1) = slice_env
    mark = tmp_path / "ran"
    dry = run_tpuctl("ssh", name, "--worker", "all", "--ssh-config", str(config), "--dry-run", "--", "touch", str(mark), env=env)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [f"[worker:0@{ip0}]", f"[worker:1@{ip1}]"]
    assert all(f" -- {ip} " in line and f"touch {mark}" in line for line, ip in zip(lines, (ip0, ip1), strict=True))
    assert not mark.exists()


def test_cleanup_frees_a_tpu_held_by_a_stale_process(slice_env: tuple[dict[str, str], Path, list[str]]) -> None:
    env, config, (name, ip0, _) = slice_env
    if os.path.exists(LOCKFILE):
        pytest.skip(f"{LOCKFILE} exists on this machine; not touching a real TPU lock")
    stale = subprocess.Popen([sys.executable, "-c", f"f = open({LOCKFILE!r}, 'w'); import time; time.sleep(600)"])
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(LOCKFILE) and time.monotonic() < deadline:
            time.sleep(0.05)
        result = run_tpuctl("ssh", name, "--worker", "0", "--cleanup", "--ssh-config", str(config), env=env)
        assert result.returncode == 0, result.stderr
        assert f"[worker:0@{ip0}] killed stale process {stale.pid} holding {LOCKFILE}" in result.stdout
        assert f"[worker:0@{ip0}] removed stale {LOCKFILE}" in result.stdout
        stale.wait(timeout=10)
        assert not alive(stale.pid) and not os.path.exists(LOCKFILE)
        again = run_tpuctl("ssh", name, "--worker", "0", "--cleanup", "--ssh-config", str(config), env=env)
        assert again.stdout == f"[worker:0@{ip0}] TPU free: nothing to clean\n"
    finally:
        stale.kill()
        if os.path.exists(LOCKFILE):
            os.remove(LOCKFILE)


def test_launch_on_every_host_of_a_slice_after_cleanup(slice_env: tuple[dict[str, str], Path, list[str]], tmp_path: Path) -> None:
    """`launch --tpu NAME`: one worker per slice host, as gcloud's --worker=all; --cleanup runs first everywhere."""
    from tests.conftest import SCRIPTS

    env, config, (name, ip0, ip1) = slice_env
    out = tmp_path / "argv"
    out.mkdir()
    result = run_tpuctl(
        "launch", str(SCRIPTS / "argv_dump.py"), "--tpu", name, "--ssh-config", str(config), "--cleanup",
        "--strategy", "none", "--log-dir", str(tmp_path / "logs"), "--env", f"ARGV_OUT={out}", "--", "x y",
        env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tpuctl: cleanup on {ip0}: TPU free: nothing to clean" in result.stderr
    assert f"tpuctl: cleanup on {ip1}: TPU free: nothing to clean" in result.stderr
    import json

    dumps = [json.loads((out / f"{index}.json").read_text()) for index in (0, 1)]
    assert [d["argv"][1:] for d in dumps] == [["x y"], ["x y"]]
    assert [json.loads(d["env"]["TF_CONFIG"])["task"]["index"] for d in dumps] == [0, 1]
    _the_run_is_priced_at_its_slices_list_price(env, tmp_path)
    dry = run_tpuctl("launch", str(SCRIPTS / "argv_dump.py"), "--tpu", name, "--ssh-config", str(config), "--cleanup", "--dry-run", env=env, cwd=tmp_path)
    assert dry.returncode == 0 and "cleanup" not in dry.stderr  # a dry run changes nothing anywhere
    # Issue 30: the slice's side of the plan, and this machine's paths planned for its hosts said as such.
    for ip in (ip0, ip1):
        ssh = next(line for line in dry.stdout.splitlines() if line.startswith(f"ssh to {ip}: "))
        argv = shlex.split(ssh.split(": ", 1)[1])
        assert argv[:3] == ["ssh", "-F", str(config)] and argv[-3:-1] == ["--", ip]
        assert shlex.split(argv[-1])[:3] == ["exec", sys.executable, "-S"]
    assert f"remote: workers run in {tmp_path} with {sys.executable}" in dry.stdout
    assert "sync: none" in dry.stdout
    assert f"warning: the hosts will run {sys.executable}, this machine's Python: pass --python" in dry.stdout
    assert f"warning: the hosts must already have {SCRIPTS / 'argv_dump.py'}, this machine's path: pass --sync" in dry.stdout
    both = run_tpuctl("launch", str(SCRIPTS / "argv_dump.py"), "--tpu", name, "--hosts", "h1", env=env, cwd=tmp_path)
    assert both.returncode == 2 and "give one of --hosts, --hostfile, --tpu" in both.stderr


def _the_run_is_priced_at_its_slices_list_price(env: dict[str, str], cwd: Path) -> None:
    """Issue 36: the launch's record keeps the node's type, zone and kind, and its slice's list price from the stand-in's
    catalogue (a v4-16 is 8 chips, 2 hosts: the Pod chip SKU); `runs` and `report` price the wall time at it."""
    import json

    from tests.standins.billing_api import DEFAULT_PRICES

    hourly = 8 * DEFAULT_PRICES[("Tpu-v4 Pod chip", "us-central2", "on-demand")]
    (run,) = json.loads(run_tpuctl("runs", "--json", env=env, cwd=cwd).stdout)
    assert (run["tpu"], run["zone"], run["capacity"]) == ("v4-16", ZONE, "on-demand")
    assert run["price_per_hour"] == pytest.approx(hourly) and run["price_note"].startswith("list prices from the Cloud Billing Catalog")
    assert run["cost_usd"] == round(run["duration_s"] / 3600 * hourly, 2)
    listing = run_tpuctl("runs", env=env, cwd=cwd)
    assert listing.stdout.splitlines()[0].split()[-1] == "COST" and "list price" in listing.stderr
    body = json.loads(run_tpuctl("report", run["run_id"], "--json", env=env, cwd=cwd).stdout)
    assert (body["price_source"], body["tpu"]) == ("list", {"type": "v4-16", "zone": ZONE, "capacity": "on-demand"})
    assert body["cost"] == round(body["wall_s"] / 3600 * hourly, 2) and body["price_per_hour"] == pytest.approx(hourly)
    assert sum(body["lost_cost_by_category"].values()) == pytest.approx(body["lost_cost"], abs=0.01)
    text = run_tpuctl("report", run["run_id"], env=env, cwd=cwd).stdout
    assert f"at {hourly:g} USD/h (list price of v4-16 (on-demand) in {ZONE} as the run started; list prices from" in text
    mine = run_tpuctl("report", run["run_id"], "--price-per-hour", "10", "--json", env=env, cwd=cwd)
    assert json.loads(mine.stdout)["price_source"] == "user" and json.loads(mine.stdout)["price_per_hour"] == 10

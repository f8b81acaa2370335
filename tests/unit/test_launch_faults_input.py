"""Hostile numbers and sizes for launch, tf-config and host lists: one line and exit 2, fast (issue 12).

`inf`, `nan`, `1e300` and negative seconds, huge worker/restart counts, host lists with
a billion slots, a dry run of more workers than there are file descriptors, and log
dirs that are files: each is refused in one line, or (dry runs) works without
touching ports, within a few seconds.

The commands run in this process through the real entry point (test_hostile_cli.invoke: main() with its output
captured and the exit status it ends with), but for the dry run under a 64-descriptor limit, a process of its own.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, tpuctl_cmd
from tests.standins.cli_calls import Result, in_process
from tpuctl.cluster.hosts import MAX_TASKS, parse_hostfile, parse_slot_hosts
from tpuctl.inputs.errors import TpuctlError

SCRIPT = str(ROOT / "tests" / "integration" / "scripts" / "argv_dump.py")
BAD_SECONDS = ["inf", "-inf", "nan", "1e300", "-1", "0", "1e9"]



def _one_line_usage_error(result: Result) -> str:
    assert result.code == 2, (result.code, result.out[-300:], result.err[-300:])
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.err[-500:]
    return lines[0]


@pytest.mark.parametrize("value", BAD_SECONDS)
@pytest.mark.parametrize("flag", ["--start-timeout", "--tpu-timeout"])
def test_launch_seconds_must_be_finite_and_sane(flag: str, value: str) -> None:
    line = _one_line_usage_error(in_process("launch", SCRIPT, f"{flag}={value}", "--dry-run", limit_s=30))
    assert flag in line


@pytest.mark.parametrize("value", ["inf", "nan", "1e300", "-5"])
def test_devices_tpu_timeout_must_be_finite_and_sane(value: str) -> None:
    line = _one_line_usage_error(in_process("devices", "--tpu-timeout", value, limit_s=30))
    assert "--tpu-timeout" in line


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--workers", "99999999999999999999"),
        ("--workers", str(MAX_TASKS + 1)),
        ("--max-restarts", "99999999999999999999"),
        ("--ps", "99999999999"),
        ("--simulate-devices", "99999999999"),
    ],
)
def test_launch_counts_are_capped(flag: str, value: str) -> None:
    started = time.monotonic()
    line = _one_line_usage_error(in_process("launch", SCRIPT, flag, value, "--dry-run", limit_s=30))
    assert flag in line
    assert time.monotonic() - started < 20


def test_workers_plus_ps_past_the_cap_is_one_line() -> None:
    result = in_process(
        "launch", SCRIPT, "--strategy", "parameter-server", "--workers", str(MAX_TASKS), "--ps", "1", "--dry-run", limit_s=30
    )
    assert str(MAX_TASKS) in _one_line_usage_error(result)


@pytest.mark.parametrize("key_value", ["start-timeout = inf", "start-timeout = nan", "start-timeout = -3", "tpu-timeout = 1e300",
                                       f"workers = {MAX_TASKS + 1}", "max-restarts = 99999999999"])
def test_config_file_values_are_checked_like_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_value: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[launch]\n{key_value}\n")
    monkeypatch.chdir(tmp_path)
    result = in_process("launch", SCRIPT, "--dry-run", limit_s=30, env={"TPUCTL_CONFIG": str(config)})
    line = _one_line_usage_error(result)
    assert str(config) in line and key_value.split(" ")[0] in line


def test_huge_slot_counts_are_refused_at_once() -> None:
    started = time.monotonic()
    line = _one_line_usage_error(in_process("launch", SCRIPT, "--hosts", "a:999999999", "--dry-run", limit_s=30))
    assert "slots" in line
    assert time.monotonic() - started < 20


def test_host_lists_cap_slots_per_host_and_in_all() -> None:
    with pytest.raises(TpuctlError, match="slots"):
        parse_slot_hosts(f"a:{MAX_TASKS + 1}")
    with pytest.raises(TpuctlError, match=str(MAX_TASKS)):
        parse_slot_hosts(f"a:{MAX_TASKS},b:1")
    with pytest.raises(TpuctlError, match=str(MAX_TASKS)):
        parse_hostfile("".join(f"h{i} slots=4000\n" for i in range(3)))
    assert sum(e.slots for e in parse_slot_hosts(f"a:{MAX_TASKS - 1},b")) == MAX_TASKS


def test_tf_config_caps_workers_and_slots() -> None:
    _one_line_usage_error(in_process("tf-config", "--workers", str(MAX_TASKS + 1), limit_s=30))
    _one_line_usage_error(in_process("tf-config", "--workers", "2", "--ps", "99999999999", limit_s=30))
    _one_line_usage_error(in_process("tf-config", "--workers", str(MAX_TASKS), "--ps", "1", limit_s=30))


def test_tf_config_hostfile_with_a_billion_slots_is_refused_before_expanding(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=999999999\n")
    started = time.monotonic()
    _one_line_usage_error(in_process("tf-config", "--workers", "2", "--hostfile", str(hostfile), limit_s=30))
    assert time.monotonic() - started < 20


def test_tf_config_for_the_largest_cluster_is_fast_and_right(tmp_path: Path) -> None:
    """Every line holds the whole cluster (that is TF_CONFIG's format); the cluster is serialised once."""
    started = time.monotonic()
    result = in_process("tf-config", "--workers", "2047", "--chief", limit_s=60)
    elapsed = time.monotonic() - started
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert len(lines) == 2048
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    assert first["task"] == {"type": "chief", "index": 0} and last["task"] == {"type": "worker", "index": 2046}
    assert first["cluster"] == last["cluster"] and len(first["cluster"]["worker"]) == 2047
    assert elapsed < 15, elapsed


def test_dry_run_of_many_workers_needs_no_file_descriptors() -> None:
    """A dry run holds no ports: 1001 workers under a 64-descriptor limit still print a plan."""

    def few_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    result = subprocess.run(
        tpuctl_cmd("launch", SCRIPT, "--workers", "1001", "--strategy", "none", "--dry-run", "--json"),
        capture_output=True, text=True, timeout=60, preexec_fn=few_fds,
    )
    assert result.returncode == 0, result.stderr[-500:]
    plan = json.loads(result.stdout)
    assert len(plan["workers"]) == 1001


def test_log_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    _one_line_usage_error(in_process("launch", SCRIPT, "--strategy", "none", "--log-dir", str(blocker), limit_s=30))


def test_attempt_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "attempt-1").write_text("")
    result = in_process("launch", SCRIPT, "--strategy", "none", "--log-dir", str(tmp_path), limit_s=30)
    assert result.code in (1, 2), result.err
    assert "Traceback" not in result.err, result.err
    error = [line for line in result.err.splitlines() if line.startswith("Error: ")]
    assert len(error) == 1 and "attempt-1" in error[0], result.err

"""`tpuctl profile` of a real 2-worker ssh launch (tests/integration/sshd.py's hosts): the request reaches each worker
through its agent and reaper, each host's file comes back into the run's log dir, the run goes on.

Every "host" is this machine, so the hosts' model dir and the log dir share a disk; they are different folders,
so a file in the log dir's session was copied there, not written there by a worker.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl, wait_for
from tests.integration.sshd import SshCluster
from tpuctl.runs.folder import RunFolder


@pytest.mark.tf
def test_an_ssh_run_is_captured_on_its_hosts_and_copied_back(cluster: SshCluster, tmp_path: Path) -> None:
    out, model, logs = tmp_path / "out", tmp_path / "model", tmp_path / "logs"
    out.mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "NO_COLOR": "1"}
    ssh = ("--ssh-config", str(cluster.config))
    started = run_tpuctl(
        "launch", *ssh, "--detach", "--hosts", "host1,host2", "--strategy", "none", "--model-dir", str(model), "--log-dir", str(logs),
        str(SCRIPTS / "fit_until_stopped.py"), str(out), "90", env=env, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    try:
        wait_for(lambda: all((out / f"ready-{i}").exists() for i in range(2)), timeout=60)
        recorded = RunFolder(logs).latest_profilers()
        assert recorded is not None and recorded["backend"] == "ssh"
        assert [(w["worker"], w["ssh"]) for w in recorded["workers"]] == [("worker:0", "host1"), ("worker:1", "host2")]
        assert recorded["connection"]["config"] == str(cluster.config)  # how the launch reached them, kept for profile
        result = run_tpuctl("profile", run_id, "--duration", "1", "--json", env=env, timeout=120)  # no --ssh-*: the recorded ones
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        session = Path(answer["session"])
        assert session.parent == logs / "plugins" / "profile" and answer["hosts_dir"] == str(model)
        assert answer["missing"] == {}
        assert sorted(w["worker"] for w in answer["verdict"]["workers"]) == ["worker:0", "worker:1"]  # judged on the copies
        expected = {w["worker"]: session / f"{socket.gethostname()}_{w['worker'].replace(':', '-')}.xplane.pb" for w in recorded["workers"]}
        assert {w: Path(f) for w, f in answer["files"].items()} == expected
        assert sorted(p.name for p in session.glob("*.xplane.pb")) == sorted(p.name for p in expected.values())
        for path in expected.values():
            written = model / "plugins" / "profile" / session.name / path.name  # where the worker wrote it, on its host
            assert path.stat().st_size > 0 and path.read_bytes() == written.read_bytes()
        listed = json.loads(run_tpuctl("runs", "--json", env=env, timeout=30).stdout)
        assert next(row["state"] for row in listed if row["run_id"] == run_id) == "running"
    finally:
        (out / "stop").touch()
        run_tpuctl("stop", run_id, env=env, timeout=60)

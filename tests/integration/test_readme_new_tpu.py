"""The README's one command to a TPU run, as written there, on a new VM whose host has nothing of this machine's.

Issue 48: the documented one-liner failed on a fresh VM once it was READY and billing (`... could not run tpuctl's
agent`: the workers were started with this machine's interpreter path, and the script was not there without --sync).
Here the TPU stand-in makes the VM and its host is a "fresh" sshd (tests/integration/sshd.py, FreshHost): this
checkout, the launcher's virtual environment and home folder and the test session's folders are hidden from it, and
its system Python has TensorFlow where a TPU VM image has it (its own site-packages folder). The bundled example,
copied into a project folder as `train.py`, must train there from the folder tpuctl sent (under the VM user's home,
not at this machine's path), with the VM's python3.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_tpuctl, wait_for
from tests.integration.sshd import SshCluster, running_cluster
from tests.standins import catalog
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

pytestmark = pytest.mark.tf

ZONE = "us-west4-a"  # offers v5e, priced in the billing stand-in
EXAMPLE = ROOT / "examples" / "train_keras.py"
SMALL = ["--epochs", "1", "--examples", "256"]  # after `--`: the example's own flags


@pytest.fixture(scope="module")
def fresh_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    """One sshd host that sees nothing of this machine's (FreshHost), with TensorFlow in its system Python."""
    yield from running_cluster(tmp_path_factory, 1, fresh=True)


def readme_managed_run() -> list[str]:
    """The README's one-command managed run (the `tpuctl launch ... --new-tpu` line of its code blocks), as words."""
    blocks = re.findall(r"^```sh\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), re.M | re.S)
    (line,) = [line for block in blocks for line in block.splitlines() if line.startswith("tpuctl launch ") and " --new-tpu " in line]
    return shlex.split(line, comments=True)


def on_host(cluster: SshCluster, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cluster.ssh_args, cluster.hosts[0], command], capture_output=True, text=True, timeout=60, check=False)


def test_the_readme_s_managed_run_trains_the_bundled_example_on_a_vm_with_nothing_of_this_machine_s(
    fresh_host: SshCluster, google_standin: GoogleStandin, tmp_path: Path
) -> None:
    assert fresh_host.fresh is not None
    if fresh_host.fresh.packages is None:
        pytest.skip(fresh_host.fresh.why_no_packages)
    words = readme_managed_run()
    assert words[:3] == ["tpuctl", "launch", "train.py"] and "--requirements" in words, words
    project = tmp_path / "proj"  # the user's project: the script and its requirements file
    project.mkdir()
    shutil.copy(EXAMPLE, project / "train.py")
    (project / "requirements.txt").write_text("# the example needs nothing beyond the image's TensorFlow\n")
    words[words.index("--model-dir") + 1] = "model"  # in place of gs://BUCKET/run: the host's disk, under the folder sent
    g = google_standin
    g.create_delay_s = 0.05
    g.set_zones([ZONE], [words[words.index("--new-tpu") + 1]])
    base = catalog.cidr_block(ZONE).split("/")[0].rsplit(".", 1)[0]
    config = fresh_host.aliased(tmp_path / "ssh_config", [(f"{base}.{n + 2}", fresh_host.ports[0]) for n in range(8)])
    logs = tmp_path / "logs"
    env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": ZONE}
    result = run_tpuctl(*words[1:], "--ssh-config", str(config), "--log-dir", str(logs), "--", *SMALL, cwd=project, env=env, timeout=420)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (worker,) = json.loads((logs / "attempt-1" / "plan.json").read_text())["workers"]
    assert worker["argv"][:3] == ["python3", "-m", "tpuctl.runtime"]  # the VM's own Python, not this machine's
    folder = f"tpuctl/work/proj-{hashlib.sha256(str(project).encode()).hexdigest()[:8]}"  # under the VM user's home
    assert f"synced {project} to ~/{folder} on 1 host(s)" in result.stderr, result.stderr
    (log,) = (logs / "attempt-1").glob("worker-0@*.log")
    assert "trained epochs 1-1 of 1 on 256 examples" in log.read_text(), log.read_text()[-2000:]
    assert "tpuctl: deleting TPU VM " in result.stderr
    wait_for(lambda: not g.nodes(ZONE), timeout=30)  # nothing left billing
    # What trained was the host's: its checkpoint is on its disk, and it never saw this machine's files.
    assert on_host(fresh_host, f"test -f {shlex.quote(folder + '/model/checkpoints/epoch-01.weights.h5')}").returncode == 0
    assert not (project / "model").exists()
    for launcher_side in (sys.executable, str(EXAMPLE), str(logs), str(project)):
        assert on_host(fresh_host, f"test -e {shlex.quote(launcher_side)}").returncode == 1, launcher_side

"""Where the workers run on a TPU VM tpuctl made: a folder under the VM user's home, not this machine's path.

Issue 48: the workers' directory was this machine's absolute path, which a VM's ssh user may not be able to make
(`/Users/me/proj` on a Linux VM) or which is another user's home there (`/home/me/proj`). Here the TPU stand-in makes
the VM and its host is a "fresh" sshd (tests/integration/sshd.py, FreshHost): nothing of this machine's is there, this
project's path included, and the host's user has a home of its own. The script (plain Python, `--strategy none`)
says where it ran and where its relative model dir lands.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl
from tests.integration.sshd import SshCluster, running_cluster
from tests.standins import catalog
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

ZONE = "us-central2-b"
WORKER = "import json, os\nprint('WHERE', json.dumps([os.getcwd(), os.path.abspath(os.environ['TPUCTL_MODEL_DIR'])]))\n"


@pytest.fixture(scope="module")
def fresh_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    yield from running_cluster(tmp_path_factory, 1, fresh=True)


def test_a_new_vm_s_workers_run_in_a_folder_under_its_user_s_home_and_this_machine_s_path_is_not_made_there(
    fresh_host: SshCluster, google_standin: GoogleStandin, tmp_path: Path
) -> None:
    project = tmp_path / "proj"  # a path the host does not have (its folder is hidden there, as a laptop's is)
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text(WORKER)
    g = google_standin
    g.create_delay_s = 0.05
    g.set_zones([ZONE], ["v4-8"])
    base = catalog.cidr_block(ZONE).split("/")[0].rsplit(".", 1)[0]
    config = fresh_host.aliased(tmp_path / "ssh_config", [(f"{base}.{n + 2}", fresh_host.ports[0]) for n in range(8)])
    env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": ZONE}
    args = ["launch", "src/train.py", "--new-tpu", "v4-8", "--ssh-config", str(config), "--strategy", "none", "--model-dir", "runs/m"]
    args += ["--log-dir", str(tmp_path / "logs"), "--keep"]
    result = run_tpuctl(*args, cwd=project, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = f"tpuctl/work/proj-{hashlib.sha256(str(project).encode()).hexdigest()[:8]}"
    home = fresh_host.home(1)
    assert f"synced {project / 'src'} to ~/{folder}/src on 1 host(s)" in result.stderr, result.stderr
    (log,) = (tmp_path / "logs" / "attempt-1").glob("worker-0@*.log")
    [where] = [json.loads(line.split("WHERE ", 1)[1]) for line in log.read_text().splitlines() if "WHERE " in line]
    assert where == [str(home / folder), str(home / folder / "runs" / "m")]
    assert (home / folder / "src" / "train.py").read_text() == WORKER
    made = subprocess.run([*fresh_host.ssh_args, fresh_host.hosts[0], f"test -e {shlex.quote(str(project))}"], capture_output=True, timeout=60)
    assert made.returncode == 1  # this machine's path was never made on the VM

    # The VM the run kept: `doctor --tpu NAME SCRIPT` looks for the script's folder where a launch there puts it.
    [node] = g.nodes(ZONE)
    doctor = ["doctor", "src/train.py", "--tpu", node["name"].rsplit("/", 1)[-1], "--ssh-config", str(config), "--python", "python3"]
    checked = run_tpuctl(*doctor, "--no-import", "--json", cwd=project, env=env, timeout=120)
    [script_dir] = [row for row in json.loads(checked.stdout)["checks"] if row["name"] == "script-dir"]
    assert script_dir["status"] == "ok", script_dir

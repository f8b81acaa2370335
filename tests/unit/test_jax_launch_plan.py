"""A JAX run before anything starts: --framework auto reading the script, the refusals, and the variables each process
gets (those Keras' and JAX's own `initialize()` read: tpuctl/cluster/jax_cluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_tpuctl
from tpuctl.cluster import jax_cluster
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch import framework
from tpuctl.launch.job import Job
from tpuctl.launch.process.events import Joining
from tpuctl.launch.process.joins import JoinWatch
from tpuctl.launch.process.plan import build_plan

KERAS_IO = 'import os\n\nos.environ["KERAS_BACKEND"] = "jax"\n\nimport keras\nimport numpy as np\n'


@pytest.mark.parametrize(
    ("source", "chosen", "why"),
    [
        (KERAS_IO, "jax", "line 3 sets KERAS_BACKEND=jax"),
        ('import os\nos.environ.setdefault("KERAS_BACKEND", "jax")\nimport keras\n', "jax", "line 2 sets KERAS_BACKEND=jax"),
        ('import os\nos.putenv("KERAS_BACKEND", "jax")\n', "jax", "line 2 sets KERAS_BACKEND=jax"),
        ('import os\nos.environ.update(KERAS_BACKEND="jax")\n', "jax", "line 2 sets KERAS_BACKEND=jax"),
        ("import jax\nimport keras\n", "jax", "imports jax (line 1) and keras (line 2)"),
        ("from jax import numpy as jnp\nfrom jax.sharding import Mesh\n", "jax", "imports jax (line 1) and not TensorFlow"),
        ("import tensorflow as tf\nimport jax\n", "tensorflow", None),  # jax2tf and friends: a TensorFlow script
        ('import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\nimport jax, keras\n', "tensorflow", None),  # the script's choice
        ("import tensorflow as tf\nimport keras\n", "tensorflow", None),
        ("print('hello')\n", "tensorflow", None),
    ],
)
def test_auto_reads_the_scripts_own_choice(tmp_path: Path, source: str, chosen: str, why: str | None) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    got, reason = framework.choose("auto", str(script), ())
    assert got == chosen
    assert (reason is None) == (why is None) and (why is None or (reason is not None and why in reason))


def test_env_keras_backend_decides_and_the_wrong_framework_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import keras\n")
    assert framework.choose("auto", str(script), (("KERAS_BACKEND", "jax"),)) == ("jax", "--env KERAS_BACKEND=jax")
    script.write_text(KERAS_IO)
    with pytest.raises(TpuctlError, match="Keras would run on TensorFlow instead of the backend the script chose"):
        framework.choose("tensorflow", str(script), ())
    script.write_text('import os\nos.environ["KERAS_BACKEND"] = "torch"\n')
    with pytest.raises(TpuctlError, match="tpuctl runs Keras on TensorFlow or JAX, not torch"):
        framework.choose("auto", str(script), ())


@given(st.binary(max_size=2000))
def test_any_bytes_are_read_without_an_error(data: bytes) -> None:
    found = framework.scan(data)
    assert found.backend is None or isinstance(found.backend[0], str)


def test_unreadable_and_oversized_scripts_keep_tensorflow(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_bytes(b"import jax\n" + b"#" * (framework.MAX_SCANNED_BYTES + 10))
    for path in (big, tmp_path / "missing.py"):
        assert framework.choose("auto", str(path), ()) == ("tensorflow", None)


def _jax_job(**fields: object) -> Job:
    return Job(script="train.py", framework="jax", **fields)  # type: ignore[arg-type]


def test_each_process_gets_the_cluster_keras_and_jax_read_and_no_tf_config() -> None:
    plan = build_plan(_jax_job(workers=3), ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"], run_id="r", attempt=1)
    assert not plan.tf_config
    for index, spec in enumerate(plan.workers):
        assert jax_cluster.cluster_of(spec.env) == ("127.0.0.1:5000", 3, index)
        assert spec.env["JAX_COORDINATOR_BIND_ADDRESS"] == "127.0.0.1:5000"
        assert spec.env["KERAS_BACKEND"] == "jax" and "TF_CONFIG" not in spec.env
        assert not {"TPUCTL_STRATEGY", "TPUCTL_SCOPE", "TPUCTL_KERAS"} & set(spec.env)
    remote = build_plan(_jax_job(workers=2), ["10.0.0.2:8476", "10.0.0.3:8476"], run_id="r", attempt=1, hosts=["a", "b"])
    assert "JAX_COORDINATOR_BIND_ADDRESS" not in remote.workers[1].env  # every interface: the other host must reach it
    assert remote.workers[1].env["JAX_COORDINATOR_ADDRESS"] == "10.0.0.2:8476"
    tpu = build_plan(_jax_job(workers=2), ["10.0.0.2:1", "10.0.0.3:1"], run_id="r", attempt=1, hosts=["a", "b"], jax_finds_hosts=True)
    assert not set(jax_cluster.WRITTEN) & set(tpu.workers[0].env)
    assert "JAX finds the slice's hosts itself" in tpu.render()
    mine = build_plan(_jax_job(env=(("KERAS_BACKEND", "jax"), ("XLA_FLAGS", "--x"))), ["127.0.0.1:1"], run_id="r", attempt=1)
    assert mine.workers[0].env["XLA_FLAGS"] == "--x"


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "a:1,b:2", "KERAS_DISTRIBUTION_NUM_PROCESSES": "3", "KERAS_DISTRIBUTION_PROCESS_ID": "0"},
        {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "a:1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "1", "KERAS_DISTRIBUTION_PROCESS_ID": "1"},
        {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "a:1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "²", "KERAS_DISTRIBUTION_PROCESS_ID": "0"},
        {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "a:1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "9" * 50, "KERAS_DISTRIBUTION_PROCESS_ID": "0"},
    ],
)
def test_a_cluster_tpuctl_did_not_write_is_not_taken_for_one(environ: dict[str, str]) -> None:
    assert jax_cluster.cluster_of(environ) is None


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--framework", "jax", "--keras", "tf-keras"), "--keras is TensorFlow's, and this is a JAX run"),
        (("--strategy", "mirrored"), "--strategy is TensorFlow's, and this is a JAX run (train.py line 3 sets KERAS_BACKEND=jax)"),
        (("--env", "KERAS_DISTRIBUTION_PROCESS_ID=1"), "--env cannot set KERAS_DISTRIBUTION_PROCESS_ID"),
        (("--framework", "tensorflow"), "--framework tensorflow, but train.py line 3 sets KERAS_BACKEND=jax"),
    ],
)
def test_what_a_jax_run_cannot_honour_is_refused_in_one_line(tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    (tmp_path / "train.py").write_text(KERAS_IO)
    result = run_tpuctl("launch", "train.py", "--dry-run", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and words in result.stderr, result.stderr


def test_the_dry_run_shows_each_process_s_variables_and_why_jax(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(KERAS_IO)
    shown = run_tpuctl("launch", "train.py", "--workers", "2", "--dry-run", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "2 process(es), Keras 3 / JAX (train.py line 3 sets KERAS_BACKEND=jax)" in shown.stdout
    assert "env: KERAS_DISTRIBUTION_PROCESS_ID=1" in shown.stdout and "TF_CONFIG" not in shown.stdout.replace("no TF_CONFIG", "")
    plan = json.loads(run_tpuctl("launch", "train.py", "--workers", "2", "--dry-run", "--json", cwd=tmp_path).stdout)
    assert plan["framework"] == "jax" and plan["workers"][1]["env"]["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "2"


def test_the_join_watch_names_who_never_arrived_once_one_waits() -> None:
    watch = JoinWatch(3, start_timeout=300)
    assert watch.wait_s == 60 and watch.due() is None and watch.late(1e12) == []
    watch.take(Joining(1, 0, joined=False))
    watch.take(Joining(1, 2, joined=False))
    due = watch.due()
    assert due is not None and watch.late(due - 1) == [] and watch.late(due) == [1]
    watch.take(Joining(1, 2, joined=True))
    assert watch.due() is None
    assert JoinWatch(2, start_timeout=5).wait_s == 5


def test_the_worker_imports_nothing_of_tensorflow_keras_or_jax_before_the_script(tmp_path: Path) -> None:
    """The script sees a bare interpreter: what it imports first decides Keras' backend."""
    script = tmp_path / "probe.py"
    script.write_text("import sys\nprint(sorted(m for m in ('tensorflow', 'keras', 'jax', 'numpy') if m in sys.modules))\n")
    env = {**os.environ, "TPUCTL_FRAMEWORK": "jax", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "tpuctl.runtime", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_the_cli_process_of_a_jax_launch_imports_neither_jax_nor_tensorflow(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(KERAS_IO)
    probe = (
        "import sys\nsys.argv = ['tpuctl', 'launch', 'train.py', '--workers', '2', '--dry-run']\nfrom tpuctl.cli import main\n"
        "try:\n    main()\nexcept SystemExit as done:\n    assert done.code in (0, None), done.code\n"
        "print('heavy:', sorted(m for m in ('tensorflow', 'keras', 'jax', 'jaxlib') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Keras 3 / JAX" in done.stdout, done.stderr
    assert done.stdout.splitlines()[-1] == "heavy: []"

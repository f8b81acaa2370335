"""Issue 34: each local worker sees its own share of the machine's GPUs (CUDA_VISIBLE_DEVICES), found without TensorFlow.

The split is pure and checked for every pool and worker count (hypothesis); the pool comes from the user's
CUDA_VISIBLE_DEVICES, a stand-in nvidia-smi (an executable printing what the real one prints for
`--query-gpu=index,name,memory.total --format=csv,noheader,nounits`) or the driver's /proc list under
TPUCTL_SYSFS_ROOT; the launch's dry run shows each worker's share, and a pool too small is one line, exit 2.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, run_tpuctl
from tests.standins.nvidia_smi import fake_nvidia_smi, launch_env
from tpuctl.devices.gpus import GROWTH, JAX_MEMORY, PREALLOCATE, Pool, find_pool, memory_chosen, split
from tpuctl.inputs.errors import USAGE, TpuctlError
from tpuctl.tpu.accelerators import visible_entries

EXAMPLE = str(ROOT / "examples" / "train_keras.py")
JAX_EXAMPLE = str(ROOT / "examples" / "train_keras_jax.py")


def pool(count: int) -> Pool:
    return Pool(tuple(str(index) for index in range(count)), "nvidia-smi")


# --- CUDA_VISIBLE_DEVICES as CUDA reads it ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "entries"),
    [
        ("0,1,2,3", ("0", "1", "2", "3")),
        (" 2, 3 ", ("2", "3")),
        ("GPU-8a1f2c3d-0000-1111-2222-333344445555,GPU-9b", ("GPU-8a1f2c3d-0000-1111-2222-333344445555", "GPU-9b")),
        ("MIG-GPU-8a1f2c3d/1/0", ("MIG-GPU-8a1f2c3d/1/0",)),
        ("", ()),  # empty: no GPU at all
        ("-1", ()),  # the usual way to hide every GPU: not an index, so nothing from there on
        ("0,-1,1", ("0",)),
        ("0,0,1", ()),  # a card named twice: CUDA shows none (measured on an H200)
        ("0,\x1b[31m", ("0",)),
    ],
)
def test_cuda_visible_devices_is_read_up_to_its_first_invalid_entry(value: str, entries: tuple[str, ...]) -> None:
    assert visible_entries(value) == entries


def test_an_index_past_the_machine_s_gpus_ends_the_list() -> None:
    assert visible_entries("0,1", 1) == ("0",) and visible_entries("1", 1) == () and visible_entries("GPU-aa,3", 2) == ("GPU-aa",)


# --- the split -------------------------------------------------------------------------------------------------


@given(st.integers(1, 16), st.integers(2, 40))
def test_an_even_split_gives_every_worker_its_own_gpus_or_a_shared_card(found: int, workers: int) -> None:
    share = split(pool(found), ["worker"] * workers, None, False)
    chosen = [gpus for gpus in share.gpus if gpus is not None]
    assert len(chosen) == workers and all(gpus for gpus in chosen)  # every worker gets at least one
    assert all(set(gpus) <= set(share.pool.ids) for gpus in chosen)
    if workers <= found:
        given_out = [gpu for gpus in chosen for gpu in gpus]
        assert len(given_out) == len(set(given_out))  # no GPU given twice
        assert {len(gpus) for gpus in chosen} == {found // workers}
        assert not share.growth and all(GROWTH not in share.env(i) for i in range(workers))
    else:
        per_card = Counter(gpus[0] for gpus in chosen)
        assert set(per_card) == set(share.pool.ids) and max(per_card.values()) - min(per_card.values()) <= 1
        assert all(share.env(i)[GROWTH] == "true" for i in range(workers))


def test_four_gpus_over_two_workers_and_three_with_one_idle() -> None:
    four = split(pool(4), ["worker", "worker"], None, False)
    assert [four.env(i)["CUDA_VISIBLE_DEVICES"] for i in range(2)] == ["0,1", "2,3"] and four.note == "2 per worker"
    three = split(pool(3), ["worker", "worker"], None, False)
    assert [three.env(i)["CUDA_VISIBLE_DEVICES"] for i in range(2)] == ["0", "1"] and three.note == "1 per worker; 1 idle (2)"


def test_nothing_is_set_for_one_worker_or_a_machine_without_gpus() -> None:
    assert split(pool(4), ["worker"], None, False).gpus == (None,)
    assert split(pool(0), ["worker"] * 3, None, False).gpus == (None, None, None)
    assert split(pool(0), ["worker"] * 3, None, False).env(0) == {}


def test_a_growth_setting_of_the_user_s_is_left_to_them() -> None:
    share = split(pool(1), ["worker"] * 3, None, True)
    assert [share.env(i) for i in range(3)] == [{"CUDA_VISIBLE_DEVICES": "0"}] * 3
    assert share.note is not None and "TF_FORCE_GPU_ALLOW_GROWTH as you set it" in share.note


def test_jax_workers_sharing_a_card_do_not_preallocate_and_get_no_tensorflow_variable() -> None:
    """JAX takes 75% of a card at its first operation; its guide's fix for concurrent processes is
    XLA_PYTHON_CLIENT_PREALLOCATE=false (https://docs.jax.dev/en/latest/gpu_memory_allocation.html)."""
    shared = split(pool(2), ["worker"] * 3, None, False, "jax")
    assert [shared.env(i) for i in range(3)] == [{"CUDA_VISIBLE_DEVICES": gpu, PREALLOCATE: "false"} for gpu in ("0", "1", "0")]
    assert shared.note == "3 workers share 2 GPU(s), up to 2 per card; XLA_PYTHON_CLIENT_PREALLOCATE=false, so each takes memory as it needs it"
    own = split(pool(2), ["worker"] * 2, None, False, "jax")  # a card each: all of it is the worker's, preallocated as JAX does
    assert [own.env(i) for i in range(2)] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    tensorflow = split(pool(2), ["worker"] * 3, None, False)
    assert all(tensorflow.env(i)[GROWTH] == "true" and PREALLOCATE not in tensorflow.env(i) for i in range(3))


@pytest.mark.parametrize("variable", JAX_MEMORY)
def test_a_jax_memory_setting_of_the_user_s_is_left_to_them(variable: str) -> None:
    environ = {variable: "platform" if variable.endswith("ALLOCATOR") else ".3"}
    assert memory_chosen(environ, "jax") and not memory_chosen(environ, "tensorflow")
    assert memory_chosen({GROWTH: "false"}, "tensorflow") and not memory_chosen({GROWTH: "false"}, "jax")
    share = split(pool(1), ["worker"] * 2, None, memory_chosen(environ, "jax"), "jax")
    assert [share.env(i) for i in range(2)] == [{"CUDA_VISIBLE_DEVICES": "0"}] * 2
    assert share.note is not None and share.note.endswith("JAX's GPU memory variables as you set them")


def test_parameter_servers_see_no_gpu_and_chief_and_workers_share_the_rest() -> None:
    share = split(pool(4), ["chief", "worker", "worker", "ps", "ps"], None, False)
    assert [share.env(i)["CUDA_VISIBLE_DEVICES"] for i in range(5)] == ["0", "1", "2", "", ""]
    assert share.note is not None and "1 idle (3)" in share.note and "ps tasks see none" in share.note


@given(st.integers(0, 16), st.integers(1, 16), st.integers(1, 16))
def test_gpus_per_worker_gives_that_many_each_or_is_refused(per_worker: int, found: int, workers: int) -> None:
    roles = ["worker"] * workers
    if per_worker * workers > found:
        with pytest.raises(TpuctlError) as refused:
            split(pool(found), roles, per_worker, False)
        assert refused.value.exit_code == USAGE and f"needs {per_worker * workers} GPUs; {found} found (nvidia-smi)" in refused.value.message
        return
    share = split(pool(found), roles, per_worker, False)
    chosen = [share.env(i)["CUDA_VISIBLE_DEVICES"] for i in range(workers)]
    if per_worker == 0:  # said explicitly: every worker sees none
        assert chosen == [""] * workers
        return
    assert all(len(gpus.split(",")) == per_worker for gpus in chosen)
    given_out = ",".join(chosen).split(",")
    assert len(given_out) == len(set(given_out))


# --- the pool --------------------------------------------------------------------------------------------------


def test_the_user_s_cuda_visible_devices_is_the_pool_even_when_empty(tmp_path: Path) -> None:
    tool = str(fake_nvidia_smi(tmp_path, 8))
    assert find_pool({"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, tool).ids == ("GPU-aa", "GPU-bb")
    assert find_pool({"CUDA_VISIBLE_DEVICES": ""}, tool).ids == ()
    assert find_pool({"CUDA_VISIBLE_DEVICES": "6,7,8,9"}, tool).ids == ("6", "7")  # nvidia-smi lists 8: there is no GPU 8
    assert find_pool({}, tool) == Pool(tuple(str(i) for i in range(8)), "nvidia-smi")


def test_without_nvidia_smi_the_driver_s_proc_list_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = tmp_path / "root" / "proc" / "driver" / "nvidia" / "gpus"
    for address in ("0000:18:00.0", "0000:2a:00.0"):
        (listed / address).mkdir(parents=True)
        (listed / address / "information").write_text("Model: NVIDIA H200\n", encoding="utf-8")
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_pool({}) == Pool(("0", "1"), "/proc/driver/nvidia/gpus")
    failing = find_pool({}, str(fake_nvidia_smi(tmp_path / "bin", 0, exit_code=9)))
    assert failing.ids == ("0", "1") and failing.warning is not None and failing.warning.startswith("nvidia-smi failed (exit 9)")
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path / "nothing"))
    assert find_pool({}).ids == ()


# --- the launch ------------------------------------------------------------------------------------------------


def test_the_dry_run_shows_each_worker_s_gpus(tmp_path: Path) -> None:
    env = launch_env(tmp_path, 4)
    done = run_tpuctl("launch", EXAMPLE, "--workers", "2", "--dry-run", "--json", env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in plan["workers"]] == ["0,1", "2,3"]
    assert plan["gpus"]["found"] == ["0", "1", "2", "3"] and plan["gpus"]["source"] == "nvidia-smi"
    text = run_tpuctl("launch", EXAMPLE, "--workers", "3", "--dry-run", env=launch_env(tmp_path, 2)).stdout
    assert "GPUs: 2 GPU(s) (nvidia-smi); 3 workers share 2 GPU(s), up to 2 per card; TF_FORCE_GPU_ALLOW_GROWTH=true" in text
    assert text.count("env: TF_FORCE_GPU_ALLOW_GROWTH=true") == 3 and text.count("env: CUDA_VISIBLE_DEVICES=0\n") == 2


def test_gpus_per_worker_on_a_local_launch(tmp_path: Path) -> None:
    env = launch_env(tmp_path, 4)
    refused = run_tpuctl("launch", EXAMPLE, "--workers", "3", "--gpus-per-worker", "2", "--dry-run", env=env)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "Error: --gpus-per-worker 2 for 3 worker(s) needs 6 GPUs; 4 found (nvidia-smi) "
        "(lower --gpus-per-worker or --workers, or leave --gpus-per-worker out to share the GPUs there are)"
    ]
    none = json.loads(run_tpuctl("launch", EXAMPLE, "--workers", "2", "--gpus-per-worker", "0", "--dry-run", "--json", env=env).stdout)
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in none["workers"]] == ["", ""]
    one = json.loads(run_tpuctl("launch", EXAMPLE, "--gpus-per-worker", "1", "--dry-run", "--json", env=env).stdout)
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in one["workers"]] == ["0"]


def test_a_cpu_machine_s_plan_is_unchanged(tmp_path: Path) -> None:
    env = {**launch_env(tmp_path, 0), "TPUCTL_SYSFS_ROOT": str(tmp_path)}
    plan = json.loads(run_tpuctl("launch", EXAMPLE, "--workers", "2", "--dry-run", "--json", env=env).stdout)
    assert plan["gpus"] is None and all("CUDA_VISIBLE_DEVICES" not in w["env"] for w in plan["workers"])


def test_a_jax_launch_s_workers_sharing_a_card_get_jax_s_memory_variable(tmp_path: Path) -> None:
    """Through the CLI: --framework auto finds the JAX script, and its plan gives each worker JAX's variable, not
    TensorFlow's; an XLA_*MEM_FRACTION of the user's (--env, or the environment) stays the only memory setting."""
    env = launch_env(tmp_path, 1)
    plan = json.loads(run_tpuctl("launch", JAX_EXAMPLE, "--workers", "2", "--dry-run", "--json", env=env).stdout)
    assert plan["framework"] == "jax"
    assert [(w["env"]["CUDA_VISIBLE_DEVICES"], w["env"].get(PREALLOCATE), w["env"].get(GROWTH)) for w in plan["workers"]] == [("0", "false", None)] * 2
    text = run_tpuctl("launch", JAX_EXAMPLE, "--workers", "2", "--dry-run", env=env).stdout
    assert "GPUs: 1 GPU(s) (nvidia-smi); 2 workers share 1 GPU(s), up to 2 per card; XLA_PYTHON_CLIENT_PREALLOCATE=false" in text
    for flags in (["--env", "XLA_PYTHON_CLIENT_MEM_FRACTION=.4"], []):
        theirs = {**env, "XLA_CLIENT_MEM_FRACTION": ".4"} if not flags else env
        plan = json.loads(run_tpuctl("launch", JAX_EXAMPLE, "--workers", "2", *flags, "--dry-run", "--json", env=theirs).stdout)
        assert all(PREALLOCATE not in w["env"] for w in plan["workers"]), plan["workers"]

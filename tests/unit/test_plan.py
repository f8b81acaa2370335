"""Plans are pure data: argv, TF_CONFIG and TPUCTL_* variables for every worker."""

from __future__ import annotations

import json

import pytest

from tpuctl.launch.job import Job
from tpuctl.launch.process.plan import build_plan


def test_every_worker_gets_its_own_task_and_the_same_cluster() -> None:
    job = Job(script="train.py", args=("--epochs", "3"), workers=3, model_dir="/m", env=(("A", "1"),), python="/py")
    plan = build_plan(job, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], run_id="r", attempt=2)
    assert [w.name for w in plan.workers] == ["worker:0", "worker:1", "worker:2"]
    assert [w.chief for w in plan.workers] == [True, False, False]
    for index, worker in enumerate(plan.workers):
        assert worker.argv == ("/py", "-m", "tpuctl.runtime", "train.py", "--epochs", "3")
        config = json.loads(worker.env["TF_CONFIG"])
        assert config == {
            "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]},
            "task": {"type": "worker", "index": index},
        }
        assert worker.env["TPUCTL_WORKER_INDEX"] == str(index)
        assert worker.env["TPUCTL_NUM_WORKERS"] == "3"
        assert worker.env["TPUCTL_ATTEMPT"] == "2"
        assert worker.env["TPUCTL_MODEL_DIR"] == "/m"
        assert worker.env["A"] == "1"
        assert worker.address == f"127.0.0.1:{index + 1}"


def test_plan_serialises_for_dry_run() -> None:
    plan = build_plan(Job(script="s.py", workers=1), ["127.0.0.1:9"], run_id="r", attempt=1)
    data = json.loads(json.dumps(plan.to_json()))
    assert data["workers"][0]["argv"][-1] == "s.py"
    assert data["attempts"] == 1
    assert "TPUCTL_MODEL_DIR" not in data["workers"][0]["env"]


def test_command_line_is_shell_quoted() -> None:
    plan = build_plan(Job(script="s.py", args=("a b", "$X"), python="py"), ["h:1"], run_id="r", attempt=1)
    assert plan.workers[0].command_line() == "py -m tpuctl.runtime s.py 'a b' '$X'"


def test_render_escapes_arguments_that_are_not_utf8() -> None:
    # A byte 0xff on the command line reaches Python as "\udcff"; a strict UTF-8 stdout cannot encode it.
    job = Job(script="s.py", args=("\udcff",), model_dir="/m/\udcfe", python="py")
    text = build_plan(job, ["h:1"], run_id="r", attempt=1).render()
    text.encode("utf-8")  # no UnicodeEncodeError
    assert "s.py '\\udcff'" in text
    assert "\\udcfe" in text


def test_one_worker_gets_no_tf_config_and_the_plan_says_why() -> None:
    plan = build_plan(Job(script="s.py"), ["127.0.0.1:9"], run_id="r", attempt=1)
    (worker,) = plan.workers
    assert "TF_CONFIG" not in worker.env
    # the rest of the contract stays: the runtime and tpuctl.runtime's helpers read these
    assert (worker.env["TPUCTL_NUM_WORKERS"], worker.env["TPUCTL_WORKER_INDEX"], worker.env["TPUCTL_TASK_TYPE"]) == ("1", "0", "worker")
    assert worker.chief and plan.to_json()["tf_config"] is False
    assert "no TF_CONFIG: one worker runs as `python SCRIPT` does" in plan.render()
    assert "multi-worker path" in plan.render()


@pytest.mark.parametrize(
    ("job", "tasks"),
    [
        (Job(script="s.py", workers=2), 2),
        # the user named the multi-worker strategy: a one-worker cluster it is
        (Job(script="s.py", strategy="multi-worker-mirrored"), 1),
        # a chief and a ps beside the one worker: a cluster of three
        (Job(script="s.py", strategy="parameter-server", ps=1), 3),
    ],
)
def test_a_cluster_or_a_named_multi_worker_strategy_keeps_tf_config(job: Job, tasks: int) -> None:
    addresses = [f"127.0.0.1:{port}" for port in range(1, tasks + 1)]
    plan = build_plan(job, addresses, run_id="r", attempt=1)
    assert len(plan.workers) == tasks
    for worker in plan.workers:
        assert json.loads(worker.env["TF_CONFIG"])["task"] == {"type": worker.task.type, "index": worker.task.index}
    assert plan.to_json()["tf_config"] is True and "no TF_CONFIG" not in plan.render()

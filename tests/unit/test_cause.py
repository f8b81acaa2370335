"""The root cause of a failed launch (issue 14), classified from real output.

Python's own failures are produced here, by running small scripts with this interpreter
and keeping their last lines exactly as the supervisor does (logs.display_text, the last
logs.TAIL_LINES). TensorFlow's were captured once with TF 2.21 on CPU (two local
MultiWorkerMirroredStrategy workers, one SIGKILLed or SIGSTOPped) or are quoted from
TensorFlow's sources and public issues, named beside each sample.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuctl.cluster.worker_contract import PREEMPTED_EXIT_CODE
from tpuctl.endings import Ending
from tpuctl.launch import cause
from tpuctl.launch.cause import Cause, classify
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.outcome import Failure, JobRef, Outcome, summarise, tasks
from tpuctl.safety.stack_view import Comparison


def run_python(code: str) -> tuple[int, list[str]]:
    """A script's status and its last lines, as the supervisor keeps them."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, timeout=60)
    return done.returncode, last_lines(done.stdout + done.stderr)


def last_lines(output: bytes) -> list[str]:
    tail = logs.new_tail()
    for raw in output.splitlines(keepends=True):
        tail.append(logs.display_text(raw))
    return list(tail)


def tf_sample(text: str) -> list[str]:
    return last_lines(textwrap.dedent(text).lstrip("\n").encode())


# ---- Python exceptions --------------------------------------------------------------------------


def test_an_uncaught_exception_is_its_last_line() -> None:
    code, tail = run_python("print('step 1')\nraise ValueError('bad shape')")
    assert code == 1
    assert classify(code, tail) == Cause(cause.EXCEPTION, "uncaught Python exception: ValueError: bad shape")


def test_a_deep_traceback_whose_header_scrolled_away_is_still_an_exception() -> None:
    chain = "".join(f"def f{i}():\n    f{i + 1}()\n" for i in range(10))  # distinct frames: Python folds repeated ones
    code, tail = run_python(chain + "def f10():\n    raise KeyError('missing')\nf0()")
    assert not any(line.startswith("Traceback") for line in tail)
    found = classify(code, tail)
    assert found.kind == cause.EXCEPTION and found.summary.endswith("KeyError: 'missing'")


def test_a_custom_exception_without_error_in_its_name_is_found_after_a_frame() -> None:
    code, tail = run_python("class Boom(Exception):\n    pass\nraise Boom('the reactor')")
    assert classify(code, tail).summary == "uncaught Python exception: Boom: the reactor"


def test_the_last_of_chained_exceptions_is_the_cause() -> None:
    code, tail = run_python(
        """
        try:
            {}['a']
        except KeyError:
            raise RuntimeError('config has no a')
        """
    )
    assert classify(code, tail).summary == "uncaught Python exception: RuntimeError: config has no a"


def test_a_message_that_only_announces_the_next_lines_is_followed() -> None:
    # TF 2.21, autograph: `a + b` of shapes [3] and [2] inside a tf.function (last 12 lines as captured).
    tail = tf_sample(
        """
          File "/venv/lib/python3.11/site-packages/tensorflow/python/util/traceback_utils.py", line 167, in error_handler
            raise e.with_traceback(filtered_tb) from None
          File "/tmp/__autograph_generated_filer3mydil8.py", line 12, in tf__f
            retval_ = ag__.ld(a) + ag__.ld(b)
            ^^^^^
        ValueError: in user code:

            File "/tmp/cause_probe/tferr.py", line 5, in f  *
                return a + b

            ValueError: Dimensions must be equal, but are 3 and 2 for '{{node add}} = AddV2[T=DT_FLOAT](a, b)' with input shapes: [3], [2].

        """
    )
    found = classify(1, tail)
    assert found.kind == cause.EXCEPTION
    assert found.summary.startswith("uncaught Python exception: ValueError: Dimensions must be equal, but are 3 and 2")


def test_a_tensorflow_error_loses_its_module_path_and_node_prefix() -> None:
    # TF 2.21, eager `tf.zeros([3]) + tf.zeros([2])`: the traceback's last line as captured.
    tail = [
        "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node __wrapped__AddV2_device_/job:localhost/"
        "replica:0/task:0/device:CPU:0}} Incompatible shapes: [3] vs. [2] [Op:AddV2] name: ",
    ]
    found = classify(1, tail)
    assert found == Cause(cause.EXCEPTION, "uncaught Python exception: InvalidArgumentError: Incompatible shapes: [3] vs. [2] [Op:AddV2] name:")


def test_colour_codes_do_not_hide_an_exception() -> None:
    tail = ['  File \x1b[35m"train.py"\x1b[0m, line 3', "\x1b[1;35mValueError\x1b[0m: \x1b[35mbad shape\x1b[0m"]
    assert classify(1, tail).summary == "uncaught Python exception: ValueError: bad shape"


def test_a_plain_exit_status_says_no_exception_was_seen() -> None:
    code, tail = run_python("import sys\nprint('giving up: no data')\nsys.exit(3)")
    assert classify(code, tail) == Cause(cause.EXIT, "exit status 3; no Python exception in its last lines")


def test_log_lines_that_look_like_names_are_not_exceptions() -> None:
    tail = ["Epoch 1/3", "loss: 0.25", "ready", "INFO: saved checkpoint", "done"]
    assert classify(1, tail).kind == cause.EXIT


# ---- signals ------------------------------------------------------------------------------------


def test_a_sigkill_tpuctl_did_not_send_suggests_the_oom_killer() -> None:
    code, tail = run_python("import os, signal\nprint('allocating', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)")
    assert code == -signal.SIGKILL
    found = classify(code, tail)
    assert found.kind == cause.OOM
    assert "OOM-killer suspected" in found.summary and "dmesg" in found.summary and "journalctl -k" in found.summary


def test_a_sigkill_tpuctl_sent_is_only_a_signal() -> None:
    assert classify(-signal.SIGKILL, [], killed_by_tpuctl=True) == Cause(cause.SIGNAL, "killed by SIGKILL, sent by tpuctl")


def test_a_crash_in_native_code_names_its_signal() -> None:
    code, tail = run_python("import ctypes\nctypes.string_at(0)")
    assert code == -signal.SIGSEGV
    found = classify(code, tail)
    assert found.kind == cause.SIGNAL and found.summary.startswith("killed by SIGSEGV: it crashed in native code")


def test_an_abort_names_its_signal() -> None:
    code, tail = run_python("import os\nos.abort()")
    assert classify(code, tail).summary.startswith("killed by SIGABRT: it aborted itself")


def test_ctrl_c_in_a_worker_is_a_signal_even_with_a_traceback() -> None:
    # An uncaught KeyboardInterrupt ends Python by SIGINT: the traceback is a consequence.
    code, tail = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(5)")
    assert code == -signal.SIGINT and tail[-1] == "KeyboardInterrupt"
    assert classify(code, tail).summary == "killed by SIGINT, which tpuctl did not send (a scheduler, a preemption, a shutdown or a `kill`)"


def test_a_shell_status_of_128_plus_n_names_the_signal() -> None:
    script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    done = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{script}"'], capture_output=True, timeout=60)
    assert done.returncode == 137
    assert classify(done.returncode, []).summary == "exit status 137 (128+9: how a shell or container reports SIGKILL); no Python exception in its last lines"


def test_kubernetes_oomkilled_is_the_oom_killer_for_sure() -> None:
    found = classify(137, [], oom_reported=True)
    assert found.kind == cause.OOM and "OOMKilled" in found.summary


def test_an_unknown_signal_number_is_still_named() -> None:
    assert classify(-99, []).summary.startswith("killed by signal 99,")


# ---- preemption ---------------------------------------------------------------------------------


def test_exit_status_42_is_a_preemption() -> None:
    code, tail = run_python(f"import sys\nprint('saving a checkpoint')\nsys.exit({PREEMPTED_EXIT_CODE})")
    assert classify(code, tail) == Cause(cause.PREEMPTED, "preempted (exit status 42): restarted from the last checkpoint while --max-preemptions allows")


# ---- a lost peer or a collective timeout --------------------------------------------------------

# TF 2.21, CPU: the survivor of two MWMS workers after `kill -9` of worker 1, ~10 s later
# (the last 12 lines of its output as captured; the heartbeat text is coordination_service.cc's).
SIGKILLED_PEER = """
tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
  File "/tmp/cause_probe/mw.py", line 12, in <module>

  File "/tmp/cause_probe/mw.py", line 9, in step

Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.
The error could be from a previous operation. Restart your program to reset.
\t [[{{node CollectiveReduceV2}}]] [Op:__inference_step_27]
"""

# TF 2.21, CPU: the same with CommunicationOptions(timeout_seconds=3) and worker 1 SIGSTOPped.
FROZEN_PEER = """
  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53, in quick_execute
    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,
  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
tensorflow.python.framework.errors_impl.DeadlineExceededError: Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
  File "/tmp/cause_probe/mw2.py", line 12, in <module>

  File "/tmp/cause_probe/mw2.py", line 9, in step

Collective has timed out during execution.
\t [[{{node CollectiveReduceV2}}]] [Op:__inference_step_27]
"""


def test_a_peer_that_stopped_sending_heartbeats_is_named() -> None:
    tail = tf_sample(SIGKILLED_PEER)
    assert "" not in tail  # the tail keeps no blank lines
    assert classify(1, tail) == Cause(cause.PEER_LOST, "peer lost: worker:1 stopped sending heartbeats; its own log holds the root cause")


def test_a_collective_timeout_is_a_lost_peer() -> None:
    found = classify(1, tf_sample(FROZEN_PEER))
    assert found.kind == cause.PEER_LOST
    assert found.summary.startswith("peer lost: a collective timed out (Collective has timed out during execution.); another worker died")


def test_a_heartbeat_timeout_names_the_task() -> None:
    # The message of xla/tsl coordination_service.cc as TF raises it (text from the source).
    tail = [
        "tensorflow.python.framework.errors_impl.UnavailableError: Task /job:worker/replica:0/task:3 heartbeat timeout. This indicates "
        "that the remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error or "
        "scheduler events (e.g. preemption, eviction) to debug further."
    ]
    assert classify(1, tail).summary == "peer lost: worker:3 missed its heartbeats; its own log holds the root cause"


@pytest.mark.parametrize(
    ("sample", "phrase"),
    [
        # tensorflow/tensorflow#38257 (TF 2.1 on a TPU): the traceback's last line.
        (["tensorflow.python.framework.errors_impl.UnavailableError: Connection reset by peer [Op:DeleteIterator]"], "a peer reset its connection"),
        # mlcommons/training#272 (CollectiveAllReduceStrategy, TF 1.13): log lines, no traceback in the tail.
        (
            [
                "2019-05-19 15:08:13.136034: E tensorflow/core/common_runtime/ring_reducer.cc:369] Aborting RingReduce with Unavailable: Socket closed",
                "2019-05-19 15:08:13.136042: W tensorflow/core/common_runtime/base_collective_executor.cc:203] "
                "BaseCollectiveExecutor::StartAbort Unavailable: Socket closed",
            ],
            "a peer's connection closed",
        ),
        # tensorflow/tensorflow#62880 (ParameterServerStrategy, TF 2.15).
        (
            ["ERROR:tensorflow:Remote function on worker /job:worker/replica:0/task:1 failed with UnavailableError():failed to connect to all addresses"],
            "a peer cannot be reached",
        ),
        # The coordination agent's own words when task 0 (the service) is gone (TF 2.21's binary).
        (
            [
                "Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this "
                "task is experiencing network issues."
            ],
            "the coordination service (run by the first worker) is unreachable",
        ),
    ],
)
def test_grpc_and_coordination_words_mean_a_lost_peer(sample: list[str], phrase: str) -> None:
    found = classify(1, sample)
    assert found.kind == cause.PEER_LOST and found.summary.startswith(f"peer lost: {phrase} (")


def test_an_abort_after_a_deadline_is_a_lost_peer() -> None:
    # tensorflow/tensorflow#60706 (TF 2.11): DEADLINE_EXCEEDED, then TF aborts itself (SIGABRT).
    tail = [
        "2023-05-25 11:10:57.934361: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
        "BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded",
        "Additional GRPC error information from remote target /job:worker/replica:0/task:0:",
        "2023-05-25 11:10:57.934547: F tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc:103] Non-OK-status: Stop() status: "
        "UNIMPLEMENTED: Clean shutdown is not currently implemented",
        "Fatal Python error: Aborted",
    ]
    assert classify(-signal.SIGABRT, tail).kind == cause.PEER_LOST


def test_a_local_nccl_error_inside_a_collective_abort_is_an_exception() -> None:
    # BaseCollectiveExecutor::StartAbort wraps any status (core/common_runtime/base_collective_executor.cc).
    tail = ["tensorflow.python.framework.errors_impl.UnknownError: Collective ops is aborted by: Error invoking NCCL: unhandled cuda error"]
    assert classify(1, tail).kind == cause.EXCEPTION


def test_grpc_words_from_a_cloud_client_are_not_a_lost_peer() -> None:
    tail = ['  File "upload.py", line 9, in save', "google.api_core.exceptions.ServiceUnavailable: 503 failed to connect to all addresses"]
    assert classify(1, tail) == Cause(
        cause.EXCEPTION, "uncaught Python exception: google.api_core.exceptions.ServiceUnavailable: 503 failed to connect to all addresses"
    )


def test_a_generic_exception_beats_older_peer_noise() -> None:
    tail = [
        "W tensorflow/core/common_runtime/base_collective_executor.cc] StartAbort UNAVAILABLE: Socket closed",
        '  File "train.py", line 3',
        "RuntimeError: my own check failed",
    ]
    assert classify(1, tail).kind == cause.EXCEPTION


def test_the_peer_wins_when_the_exception_line_scrolled_away() -> None:
    tail = tf_sample(SIGKILLED_PEER)[1:]
    assert classify(1, tail).kind == cause.PEER_LOST


# ---- what the supervisor sets itself ------------------------------------------------------------


def test_never_started_names_the_missing_workers() -> None:
    assert cause.never_started(["worker:1", "worker:2"], 30.0) == Cause(
        cause.NEVER_STARTED, "never started: worker:1, worker:2 did not start within 30s (--start-timeout)"
    )


def test_a_hang_names_the_odd_worker_or_says_all_look_alike() -> None:
    off = Comparison(off=("worker:1",), places=2, readable=2, answered=2, workers=2)
    alike = Comparison(off=(), places=1, readable=2, answered=2, workers=2)
    assert cause.hang(600.0, off).summary == "hang: no progress for 600s; worker:1 differs from the others: look there first"
    assert cause.hang(90.5, alike) == Cause(cause.HANG, "hang: no progress for 90.5s; all workers look alike")


# ---- never raises -------------------------------------------------------------------------------

SNIPPETS = [
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
    "ValueError: x",
    "ValueError:",
    "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:",
    "The following tasks are unhealthy (stopped sending heartbeats):",
    "/job:worker/replica:0/task:7",
    "Task /job:ps/task:0 heartbeat timeout",
    "heartbeat timeout",
    "Collective ops is aborted by: Socket closed",
    "DEADLINE_EXCEEDED: x /job:",
    "Detected at node x",
    "a." * 300 + ": y",
    "\x1b[31m",
]


@given(
    st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([-9, -6, -11, 0, 1, 42, 137, 255]),
    st.lists(st.text(max_size=80) | st.sampled_from(SNIPPETS), max_size=20),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_classify_never_raises_and_says_one_line(returncode: int, tail: list[str], by_tpuctl: bool, oom: bool) -> None:
    found = classify(returncode, tail, killed_by_tpuctl=by_tpuctl, oom_reported=oom)
    assert found.kind in cause.KINDS
    assert found.summary and "\n" not in found.summary and "\r" not in found.summary


# ---- in the outcome -----------------------------------------------------------------------------


def failure(found: Cause | None) -> Failure:
    return Failure("worker:1", "localhost", Ending.of_returncode(1), 2.0, ["ValueError: bad shape"], Path("/logs/worker-1.log"), found)


def test_the_json_outcome_carries_the_cause() -> None:
    found = Cause(cause.EXCEPTION, "uncaught Python exception: ValueError: bad shape")
    record = Outcome(1, 1, 3.0, failure(found)).to_json(backend="local", run_id="r", log_dir=Path("/logs"))
    assert record["failure"]["cause"] == {"kind": "exception", "summary": "uncaught Python exception: ValueError: bad shape"}
    assert Outcome(1, 1, 3.0, failure(None)).to_json(backend="local", run_id="r", log_dir=Path("/logs"))["failure"]["cause"] is None


def summary_lines(outcome: Outcome) -> list[str]:
    lines: list[str] = []
    summarise(outcome, tasks(2), Path("/logs"), lambda line: lines.append(f"tpuctl: {line}"), lines.append)
    return lines


def test_the_summary_says_the_cause_right_after_the_failure() -> None:
    found = Cause(cause.EXCEPTION, "uncaught Python exception: ValueError: bad shape")
    lines = summary_lines(Outcome(1, 1, 3.0, failure(found)))
    assert lines[:3] == [
        "tpuctl: worker:1 on localhost failed: exit status 1 after 2.0s (attempt 1); all workers stopped",
        "tpuctl: cause: uncaught Python exception: ValueError: bad shape",
        "tpuctl: last lines of worker:1:",
    ]
    assert not any("cause:" in line for line in summary_lines(Outcome(1, 1, 3.0, failure(None))))


def test_the_summary_counts_preemptions() -> None:
    assert summary_lines(Outcome(0, 3, 9.0, preemptions=2)) == ["tpuctl: 2 worker(s) finished in 9.0s (attempt 3, after 2 preemption(s)); logs: /logs"]
    assert summary_lines(Outcome(0, 1, 9.0)) == ["tpuctl: 2 worker(s) finished in 9.0s (attempt 1); logs: /logs"]
    failed = summary_lines(Outcome(1, 2, 9.0, failure(None), preemptions=1))
    assert failed[0] == "tpuctl: worker:1 on localhost failed: exit status 1 after 2.0s (attempt 2, after 1 preemption(s)); all workers stopped"


def test_a_pod_failure_shows_its_cause_too() -> None:
    job = JobRef("TFJob", "demo", "default", "kubectl delete tfjob demo")
    found = classify(137, [], oom_reported=True)
    pod = Failure("worker:0", "demo-worker-0", Ending.of_exit(137, "exited with 137 (OOMKilled)"), None, [], None, found)
    lines = summary_lines(Outcome(137, 1, 5.0, pod, job=job))
    assert lines[0] == "tpuctl: TFJob demo failed: worker:0 (pod demo-worker-0) exited with 137 (OOMKilled)"
    assert lines[1].startswith("tpuctl: cause: killed by the OOM killer")


def test_a_heartbeat_error_without_task_names_still_reads() -> None:
    tail = ["tensorflow.python.framework.errors_impl.UnavailableError: The following tasks are unhealthy (stopped sending heartbeats):"]
    assert classify(1, tail).summary.startswith("peer lost: a task stopped sending heartbeats (UnavailableError: The following tasks")


# ---- TensorFlow's multi-line errors, as real runs printed them (tests/data/tf_console/) ----------

TF_CONSOLE = Path(__file__).resolve().parents[1] / "data" / "tf_console"


def pumped(name: str, tmp_path: Path) -> tuple[list[str], list[str]]:
    """A real worker output through the launch's own pump and noise filter: the console's lines and the tail."""
    shown = io.StringIO()
    tail = logs.new_tail()
    logs.pump(io.BytesIO((TF_CONSOLE / name).read_bytes()), "[worker:0]", logs.LineWriter(shown), tmp_path / "w.log", tail, hide=Fold(False).hides)
    return shown.getvalue().splitlines(), list(tail)


def test_a_graph_execution_error_names_its_type_node_and_message(tmp_path: Path) -> None:
    # Keras 3 fit, one label past the last class: TF's error line is ~60 lines of "defined at" frames
    # before its message, so the last TAIL_LINES lines alone were frames and blank lines.
    console, tail = pumped("keras3_fit_bad_label.log", tmp_path)
    assert tail[0] == "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:"
    assert tail[1].strip().startswith("[… ") and len(tail) == logs.TAIL_LINES
    assert tail[-2].startswith("Received a label value of 12")
    found = classify(1, tail)
    assert found.kind == cause.EXCEPTION
    assert found.summary.startswith(
        "uncaught Python exception: InvalidArgumentError at node SparseSoftmaxCrossEntropyWithLogits: "
        "Received a label value of 12 which is outside the valid range of [0, 10)."
    )
    assert found.summary.endswith("; labels must be class numbers below the last layer's units (sparse categorical loss)")
    assert "[worker:0] " not in console and not any(not line.removeprefix("[worker:0]").strip() for line in console)


def test_a_short_graph_execution_error_keeps_its_message(tmp_path: Path) -> None:
    _, tail = pumped("gather_bad_index.txt", tmp_path)
    assert classify(1, tail).summary == "uncaught Python exception: InvalidArgumentError at node Gather: indices[1] = 12 is not in [0, 10)"


@pytest.mark.parametrize(
    ("name", "start", "fix"),
    [
        (
            "keras3_lazy_optimizer_mirrored.txt",
            "InvalidArgumentError at node Placeholder_1: You must feed a value for placeholder tensor 'cond/else/_1/cond/Placeholder_1'",
            "build the optimizer before the first step: optimizer.build(model.trainable_variables) in strategy.scope(), or --keras tf-keras",
        ),
        ("keras3_legacy_optimizer.txt", "ImportError: `keras.optimizers.legacy` is not supported in Keras 3.", "--keras tf-keras (pip install tf-keras)"),
        ("tensorboard_missing.txt", "TBNotInstalledError: TensorBoard is not installed", "pip install tensorboard"),
        (
            "keras3_hub_sequential.txt",
            "ValueError: Only instances of `keras.Layer` can be added to a Sequential model.",
            "tensorflow_hub's KerasLayer is a tf-keras layer, which a Keras 3 model refuses: --keras tf-keras or auto",
        ),
        (
            "keras3_hub_functional.txt",
            "TypeError: Exception encountered when calling layer 'keras_layer' (type KerasLayer).",
            "tensorflow_hub's KerasLayer is a tf-keras layer, which a Keras 3 model refuses: --keras tf-keras or auto",
        ),
        ("tpu_guide_no_tpu.log", "NotFoundError: TPUs not found in the cluster.", "no TPU here: try --rehearse v2-8"),
    ],
)
def test_known_errors_say_their_fix(name: str, start: str, fix: str, tmp_path: Path) -> None:
    _, tail = pumped(name, tmp_path)
    found = classify(1, tail)
    assert found.kind == cause.EXCEPTION
    assert found.summary.startswith(f"uncaught Python exception: {start}"), found.summary
    assert fix in found.summary.partition("; ")[2], found.summary


def test_an_error_the_runtime_reported_itself_is_the_cause() -> None:
    tail = ["tpuctl: error: " + cause.NO_TPU]
    assert classify(1, tail) == Cause(cause.EXIT, f"exit status 1: {cause.NO_TPU}")


def test_a_parameter_server_run_ends_counting_as_it_started() -> None:
    """`launching 2 worker(s)` at the start; the end once said "5 worker(s)", chief and ps counted as workers."""
    lines: list[str] = []
    summarise(Outcome(0, 1, 4.0), tasks(2, ps=2), Path("/logs"), lines.append, lines.append)
    assert lines == ["2 worker(s), a chief and 2 ps finished in 4.0s (attempt 1); logs: /logs"]
    assert tasks(2) == "2 worker(s)"

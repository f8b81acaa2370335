"""What of TensorFlow's C++ start-up chatter the console folds, and what it always shows.

The samples in tests/data/tf_console/ are real worker lines (TensorFlow 2.21, the bundled demo and
a few probes) plus the older and newer prefix forms; each file says where its lines come from.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold, is_noise

DATA = ROOT / "tests" / "data" / "tf_console"


def _lines(name: str) -> list[str]:
    text = (DATA / name).read_text(encoding="utf-8")
    return [line.rstrip("\n") for line in text.splitlines() if line and not line.startswith("# ")]


@pytest.mark.parametrize("line", _lines("folded.txt"))
def test_every_noise_form_is_folded(line: str) -> None:
    assert Fold(verbose=False).hides(line)


@pytest.mark.parametrize("line", _lines("shown.txt"))
def test_what_the_user_must_see_is_shown(line: str) -> None:
    fold = Fold(verbose=False)
    assert not fold.hides(line)
    assert fold.folded == 0 and fold.note() is None


def test_the_demo_worker_keeps_its_own_lines_and_loses_the_chatter() -> None:
    """worker:0 of `tpuctl launch examples/train_keras.py --workers 2`, in the order it printed."""
    fold = Fold(verbose=False)
    lines = _lines("demo_worker0.txt")
    shown = [line for line in lines if not fold.hides(line)]
    assert shown == _lines("demo_worker0.shown.txt")
    assert fold.folded == len(lines) - len(shown) == 21
    assert fold.note() == "21 TensorFlow log lines folded from the console (they are in the log files; --verbose shows them)"


def test_a_straggler_list_is_folded_only_after_its_folded_announcement() -> None:
    announce = "I0000 00:00:1795436244.902413   22815 coordination_service.cc:505] Example stragglers:"
    fold = Fold(verbose=False)
    lines = (announce, "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:2", "Epoch 1/5")
    assert [fold.hides(line) for line in lines] == [True, True, True, False]
    # the list ends at the first other line: a later task name is the user's again
    assert not fold.hides("/job:worker/replica:0/task:0")
    # another worker's thread has its own state: its task-name line is not a continuation
    other: list[bool] = []
    assert fold.hides(announce)
    thread = threading.Thread(target=lambda: other.append(fold.hides("/job:worker/replica:0/task:1")))
    thread.start()
    thread.join()
    assert other == [False]
    assert fold.hides("/job:worker/replica:0/task:1")  # this thread's list goes on


def test_verbose_shows_everything_and_has_no_note() -> None:
    fold = Fold(verbose=True)
    assert not any(fold.hides(line) for line in _lines("folded.txt") + _lines("demo_worker0.txt"))
    assert fold.folded == 0 and fold.note() is None


def test_the_note_counts_in_the_singular_too() -> None:
    fold = Fold(verbose=False)
    assert fold.hides("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR")
    assert fold.note() == "1 TensorFlow log line folded from the console (they are in the log files; --verbose shows them)"


def test_the_count_is_exact_under_many_pump_threads() -> None:
    fold = Fold(verbose=False)
    noise = _lines("folded.txt")
    barrier = threading.Barrier(8)

    def pump() -> None:
        barrier.wait()
        for _ in range(200):
            for line in noise:
                fold.hides(line)
                fold.hides("Epoch 1/5")

    threads = [threading.Thread(target=pump) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fold.folded == 8 * 200 * len(noise)


@settings(max_examples=300, deadline=None)
@given(st.text() | st.from_regex(r"[IWEF]\d{4} \d+:\d+:\d+\.\d+ +\d+ [^\]]*\] ?.*", fullmatch=True))
def test_hides_never_raises_on_any_text(line: str) -> None:
    fold = Fold(verbose=False)
    assert fold.hides(line) in (True, False)
    assert is_noise(line) in (True, False)


def test_only_a_cxx_source_makes_a_line_tensorflows() -> None:
    assert is_noise("I1123 12:00:00.123456 140231 session.cc:42] hello")
    assert not is_noise("I1123 12:00:00.123456 140231 session.py:42] hello")  # absl-py: the user's logging
    assert is_noise("I1123 12:00:00.123456 140231 session.cc:42]")  # an empty INFO message is still INFO
    assert not is_noise("Ithis is not 1123 a prefix.cc:1] at all")


def test_losing_the_coordination_service_after_the_first_task_ended_is_folded_and_explained() -> None:
    """worker:1 of a 2-worker run whose worker:0 finished 15 s earlier (scripts/mw_exit.py; the run succeeded)."""
    lines = (DATA / "shutdown_after_leader.log").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if "Failed to send RPC to coordination service" in line)
    fold = Fold(verbose=False)
    assert [fold.hides_after_leader(line) for line in lines[start : start + 4]] == [True, True, True, False]
    assert lines[start + 3] == "done"
    note = fold.shutdown_note()
    assert note is not None and note.startswith('3 TensorFlow error line(s) folded ("Failed to send RPC to coordination service"')
    assert Fold(verbose=True).hides_after_leader(lines[start]) is False
    assert Fold(verbose=False).shutdown_note() is None


def test_a_protobuf_dump_after_a_folded_line_is_folded_with_it() -> None:
    """A C++ INFO line that dumps a ConfigProto (~100 lines of protobuf text format) folds whole;
    the first line that is not protobuf text is the script's again."""
    lines = _lines("session_options_dump.txt")
    fold = Fold(verbose=False)
    assert [line for line in lines if not fold.hides(line)] == ["Epoch 1/2"]
    assert fold.folded == len(lines) - 1
    # without the folded head, the same text is the user's: a script printing a config shows it
    unfolded = Fold(verbose=False)
    assert not any(unfolded.hides(line) for line in lines[1:])


@pytest.mark.parametrize(("name", "task"), [("ps_server_session_options.log", "ps:0"), ("ps_worker_session_options.log", "worker:0")])
def test_a_parameter_server_tasks_config_dump_is_folded(name: str, task: str, tmp_path: Path) -> None:
    """`tpuctl new parameter-server` run as its README says (a chief, 2 workers, 1 ps): each server task's log.
    TensorFlow prints "SessionOptions: " and protobuf 30's marker (a random goo.gle/debug* link, random
    whitespace) on the INFO line, then the ConfigProto's `device_count { ... }` text on lines of its own."""
    text = (DATA / name).read_bytes()
    assert b"device_count {" in text
    shown = io.StringIO()
    logs.pump(io.BytesIO(text), f"[{task}]", logs.LineWriter(shown), tmp_path / "task.log", logs.new_tail(), hide=Fold(False).hides)
    assert shown.getvalue().splitlines() == [f"[{task}] tpuctl: {task}: serving for ParameterServerStrategy (the chief runs the script)"]
    # the dump's own lines, without the folded INFO line above them, are not noise: a script printing a config shows it
    dump = text.decode().split("SessionOptions: ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    fresh = Fold(False)
    assert dump[0] == "device_count {" and not any(fresh.hides(line) for line in dump)


def test_a_jax_runs_note_names_the_lines_xla_and_absl_not_tensorflow() -> None:
    """jaxlib prints the same absl-prefixed C++ lines (XLA's, whether or not TensorFlow also loaded)."""
    fold = Fold(verbose=False, framework="jax")
    assert fold.hides("I0000 00:00:1796661834.939185    1860 cuda_executor.cc:1309] could not open file to read NUMA node")
    assert fold.note() == "1 C++ (XLA, absl) log line folded from the console (they are in the log files; --verbose shows them)"

"""The stack view (issue 14): parsing real faulthandler and py-spy dumps, and the short view
that names the worker that is not where the others are.

The dumps under tests/data/stacks/ come from real processes (make_fixtures.py there):
Python 3.11.7, py-spy 0.4.3, TensorFlow 2.21; the scripts ran from SCRIPT_DIR.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl.launch import cause
from tpuctl.safety import stack_view
from tpuctl.safety.stack_view import Frame, differing, own_code_predicate, parse, render, signature

STACKS = Path(__file__).resolve().parents[1] / "data" / "stacks"
SCRIPT_DIR = "/tmp/tpuctl-stack-samples"
OWN = own_code_predicate(SCRIPT_DIR)
SCENARIOS = ["input_wait", "runtime_wrapped", "lock_wait", "gil_in_c", "deep_many_threads", "tf_collective"]


def dump(name: str) -> str:
    return (STACKS / f"{name}.txt").read_text()


def main_of(text: str) -> stack_view.Thread:
    main = [t for t in parse(text) if t.main]
    assert len(main) == 1
    return main[0]


# --- parsing real dumps -------------------------------------------------------------------


def test_faulthandler_dump_threads_frames_and_main_thread() -> None:
    threads = parse(dump("input_wait.faulthandler"))
    assert len(threads) == 2
    prefetch, main = threads  # faulthandler lists the newest thread first: the main thread is last
    assert main.main and main.current and not prefetch.main
    assert main.frames[0] == Frame("wait_for_batch", f"{SCRIPT_DIR}/train.py", 13)
    assert [f.function for f in main.frames] == ["wait_for_batch", "train_loop", "<module>"]
    assert prefetch.name.startswith("0x") and prefetch.frames[0].function == "wait"
    assert prefetch.frames[-1].function == "_bootstrap" and prefetch.frames[0].file.endswith("/threading.py")
    assert main.idle is None and main.gil is None and not main.truncated


def test_py_spy_dump_names_states_and_short_files() -> None:
    main, prefetch = parse(dump("input_wait.py-spy"))  # py-spy lists the main thread first
    assert (main.name, main.main, main.idle, main.gil) == ("MainThread", True, True, False)
    assert main.frames[0] == Frame("wait_for_batch", "train.py", 13)
    assert prefetch.name == "prefetch" and prefetch.frames[0] == Frame("Condition.wait", "threading.py", 327)


def test_py_spy_locals_and_full_filenames_give_the_same_frames() -> None:
    plain = parse(dump("input_wait.py-spy"))
    assert parse(dump("input_wait.py-spy-locals")) == plain
    full = parse(dump("input_wait.py-spy-full"))
    assert full[0].frames[0] == Frame("wait_for_batch", f"{SCRIPT_DIR}/train.py", 13)
    assert [[f.function for f in t.frames] for t in full] == [[f.function for f in t.frames] for t in plain]


def test_py_spy_native_frames_have_no_line_and_keep_cpp_names() -> None:
    main = main_of(dump("tf_collective.py-spy-native"))
    assert main.frames[0] == Frame("syscall", "libc.so.6", None)
    pybind = [f for f in main.frames if f.function.startswith("pybind11::cpp_function::initialize<")]
    assert len(pybind) == 1 and pybind[0].file == "tensorflow/python/_pywrap_tfe.so"
    assert Frame("quick_execute", "tensorflow/python/eager/execute.py", 53) in main.frames
    assert Frame("0x7f8ff4013104", "?", None) in main.frames
    gil = main_of(dump("gil_in_c.py-spy-native"))
    assert (gil.idle, gil.gil) == (False, True) and gil.frames[0] == Frame("sre_ucs1_match", "libpython3.11.so.1.0", None)


def test_deep_stack_many_threads() -> None:
    threads = parse(dump("deep_many_threads.faulthandler"))
    assert len(threads) == 13
    main = threads[-1]
    assert main.main and main.truncated and len(main.frames) == 100  # faulthandler's cap, then "  ..."
    spy = parse(dump("deep_many_threads.py-spy"))
    assert len(spy) == 13 and spy[0].main and len(spy[0].frames) == 132 and not spy[0].truncated


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_formats_agree_on_where_the_worker_is(scenario: str) -> None:
    mine = signature(parse(dump(f"{scenario}.faulthandler")), OWN)
    assert mine and all(file == "train.py" for _, file, _ in mine)
    assert signature(parse(dump(f"{scenario}.py-spy")), OWN) == mine
    if (STACKS / f"{scenario}.py-spy-native.txt").exists():
        assert signature(parse(dump(f"{scenario}.py-spy-native")), OWN) == mine


def test_signature_is_the_main_threads_own_frames() -> None:
    assert signature(parse(dump("input_wait.faulthandler")), OWN) == (
        ("wait_for_batch", "train.py", 13),
        ("train_loop", "train.py", 17),
        ("<module>", "train.py", 20),
    )
    # Without own code it falls back to the innermost (Python) frames, lines left out.
    assert signature(parse(dump("tf_collective.py-spy-native")), lambda f: False)[0] == ("quick_execute", "execute.py", None)
    assert signature([], OWN) == ()


# --- format details checked against CPython's Python/traceback.c ----------------------------


def test_python_314_thread_names_and_rare_notes() -> None:
    text = (
        "Fatal Python error: Segmentation fault\n\n"
        "Thread 0x00007f58c25be6c0 [sleeper] (most recent call first):\n"
        '  File "/usr/lib/python3.14/threading.py", line 996 in run\n'
        '  File "/usr/lib/python3.14/threading.py", line 1016 in _bootstrap\n\n'
        "Thread 0x00007f58c25bf000 (most recent call first):\n"
        "  <no Python frame>\n\n"
        "Current thread 0x00007f58d06bb740 [python3] (most recent call first):\n"
        "  Garbage-collecting\n"
        '  File "/job/train.py", line ??? in wait_for_batch\n'
        "  File ???, line 7 in ???\n\n"
        "Current thread's C stack trace (most recent call first):\n"
        '  Binary file "/lib/x86_64-linux-gnu/libc.so.6", at abort+0xd3 [0x7f58d0a288ff]\n'
        "...\n"
    )
    sleeper, empty, main = parse(text)
    assert sleeper.name == "sleeper" and len(sleeper.frames) == 2 and not sleeper.main
    assert empty.frames == () and not empty.main
    assert main.name == "python3" and main.main and main.current
    assert main.frames == (Frame("wait_for_batch", "/job/train.py", None), Frame("???", "?", 7))
    assert render({"worker:0": text}, own_code_predicate("/job"))[1:] == ["  worker:0", "    wait_for_batch (train.py)"]


def test_one_thread_stack_header_ansi_colours_and_surrounding_noise() -> None:
    text = (
        "Timeout (0:00:05)!\nStack (most recent call first):\n"
        '  File "/job/train.py", line 3 in wait_for_batch\n'
        "Traceback (most recent call last):\n"
        '  File "/job/other.py", line 9, in f\n'
    )
    (only,) = parse(text)
    assert only.main and only.frames == (Frame("wait_for_batch", "/job/train.py", 3),)
    coloured = dump("input_wait.py-spy").replace("MainThread", "\x1b[1;33mMainThread\x1b[0m").replace("(train.py", "(\x1b[36mtrain.py")
    assert parse(coloured) == parse(dump("input_wait.py-spy"))


def test_arbitrary_text_gives_nothing() -> None:
    assert parse("") == [] and parse("Error: Failed to find python version from target process\n") == []
    assert parse('  File "x.py", line 3 in f\n    f (x.py:3)\n') == []  # frames without a thread header


# --- the view -------------------------------------------------------------------------------


def test_two_workers_one_stuck_in_input_the_other_in_a_collective() -> None:
    dumps = {"worker:0": dump("input_wait.faulthandler"), "worker:1": dump("tf_collective.py-spy-native")}
    assert differing(dumps, OWN) == ["worker:0"]
    view = render(dumps, OWN)
    assert view == [
        "stacks of 2 workers (main thread, innermost first):",
        "! worker:0  differs from the others",
        "    wait_for_batch (train.py:13)",
        "    train_loop (train.py:17)",
        "    <module> (train.py:20)",
        "  worker:1",
        "    train_step (train.py:9)",
        "    main (train.py:15)",
        "    <module> (train.py:17)",
        "    in tensorflow: quick_execute (execute.py:53), in a collective (collective_reduce_v2)",
    ]


def test_one_worker_is_never_marked() -> None:
    for scenario in SCENARIOS:
        view = render({"worker:0": dump(f"{scenario}.faulthandler")}, OWN)
        assert view[0] == "stack of 1 worker (main thread, innermost first):" and view[1] == "  worker:0"
        assert not any(line.startswith("!") or "differs" in line for line in view)
        assert differing({"worker:0": dump(f"{scenario}.faulthandler")}, OWN) == []


def test_workers_without_a_stack() -> None:
    assert render({"worker:0": None, "worker:1": None}, OWN) == [
        "stacks of 2 workers (main thread, innermost first):",
        "  worker:0, worker:1  no stack (the worker did not answer)",
    ]
    dumps = {"worker:0": dump("input_wait.py-spy"), "worker:1": None, "worker:2": dump("input_wait.faulthandler")}
    view = render(dumps, OWN)
    assert view[0] == "stacks of 3 workers: all that answered at the same place (main thread, innermost first):"
    assert view[1] == "  worker:0, worker:2" and view[-1] == "  worker:1  no stack (the worker did not answer)"
    assert differing(dumps, OWN) == []
    garbage = render({"worker:0": dump("input_wait.py-spy"), "worker:1": "\x00 not a dump"}, OWN)
    assert "    (the dump could not be read)" in garbage


def test_three_workers_majority() -> None:
    stuck, waiting = dump("input_wait.faulthandler"), dump("tf_collective.faulthandler")
    assert differing({"worker:0": waiting, "worker:1": stuck, "worker:2": waiting}, OWN) == ["worker:1"]
    # The majority wins over the collective tie-break: two stuck in input, one already waiting.
    assert differing({"worker:0": stuck, "worker:1": stuck, "worker:2": waiting}, OWN) == ["worker:2"]
    view = render({"worker:0": waiting, "worker:1": stuck, "worker:2": waiting}, OWN)
    assert view[1] == "! worker:1  differs from the others" and "  worker:0, worker:2" in view
    alike = render({f"worker:{i}": waiting for i in range(3)}, OWN)
    assert alike[0] == "stacks of 3 workers: all at the same place (main thread, innermost first):"


def test_no_majority_names_nobody() -> None:
    dumps = {"worker:0": dump("input_wait.faulthandler"), "worker:1": dump("lock_wait.faulthandler"), "worker:2": dump("gil_in_c.py-spy")}
    assert differing(dumps, OWN) == []
    view = render(dumps, OWN)
    assert view[0] == "stacks of 3 workers: they differ, and no majority shows which is off (main thread, innermost first):"
    assert not any(line.startswith("!") for line in view)
    # The hang's cause line says what the view says (issue 30: it said "all workers look alike" here).
    summary = cause.hang(600, stack_view.compare(dumps, OWN)).summary
    assert "look alike" not in summary and "3 different places" in summary


def _cause_and_view(dumps: dict[str, str | None]) -> tuple[str, list[str]]:
    """The hang's cause line and the stacks view as a hang report prints them: from one comparison."""
    comparison = stack_view.compare(dumps, OWN)
    return cause.hang(600, comparison).summary, render(dumps, OWN, comparison)


# Every dump of tests/data/stacks, in both formats where there are both.
REAL_DUMPS = sorted(path.name.removesuffix(".txt") for path in STACKS.glob("*.txt"))


@pytest.mark.parametrize(("workers", "names"), [(2, REAL_DUMPS), (3, [f"{scenario}.faulthandler" for scenario in SCENARIOS])])
def test_the_cause_line_and_the_view_tell_one_story_on_every_mix_of_real_dumps(workers: int, names: list[str]) -> None:
    """Issue 30: whatever mix of real dumps a hang meets, the workers the view marks '!' are the ones the
    cause line names, and 'look alike' / 'different places' come with the view's same/differ title."""
    marked_once = False
    for mix in itertools.product([*names, None], repeat=workers):
        dumps = {f"worker:{i}": None if name is None else dump(name) for i, name in enumerate(mix)}
        summary, view = _cause_and_view(dumps)
        marked = [line[2:].split("  ")[0] for line in view if line.startswith("! ")]
        named = summary.split("; ", 1)[1]
        if marked:
            marked_once = True
            assert named.startswith(", ".join(marked) + (" differs" if len(marked) == 1 else " differ")), (mix, view, summary)
        else:
            assert "from the others" not in named, (mix, view, summary)
        assert ("look alike" in named) <= ("at the same place" in view[0]), (mix, view, summary)
        assert ("different places" in named) == ("they differ" in view[0]), (mix, view, summary)
    assert marked_once


def test_a_hang_with_a_worker_off_names_it_as_the_view_marks_it() -> None:
    summary, view = _cause_and_view({"worker:0": dump("tf_collective.faulthandler"), "worker:1": dump("input_wait.py-spy-native")})
    assert view[1] == "! worker:1  differs from the others"
    assert summary == "hang: no progress for 600s; worker:1 differs from the others: look there first"


def test_a_hang_without_readable_stacks_does_not_say_they_look_alike() -> None:
    summary, view = _cause_and_view({"worker:0": None, "worker:1": None})
    assert summary.endswith("no worker's stack could be read, so nothing shows where they wait") and "no stack" in view[-1]
    summary, _ = _cause_and_view({"worker:0": dump("lock_wait.py-spy"), "worker:1": None, "worker:2": "\x00 not a dump"})
    assert summary.endswith("only 1 of 3 workers' stacks could be read")
    same = {f"worker:{i}": dump("input_wait.faulthandler") for i in range(2)}
    summary, view = _cause_and_view(same)
    assert summary.endswith("all workers look alike") and view[0].startswith("stacks of 2 workers: all at the same place")


def test_gil_holder_and_the_library_call_it_is_in() -> None:
    view = render({"worker:0": dump("gil_in_c.py-spy-native")}, OWN)
    assert view[1:] == [
        "  worker:0  (running, holds the GIL)",
        "    preprocess (train.py:9)",
        "    <module> (train.py:11)",
        "    in the stdlib: match (__init__.py:166)",
    ]


def test_native_call_the_script_is_in() -> None:
    """py-spy --native (what tpuctl runs): the C function under the script's own frame, not libc's unnamed addresses."""
    assert render({"worker:0": dump("runtime_wrapped.py-spy-native")}, OWN)[-1] == "    in native code: time_sleep (libpython3.11.so.1.0)"
    assert render({"worker:0": dump("lock_wait.py-spy-native")}, OWN)[-1] == "    in native code: lock_PyThread_acquire_lock (libpython3.11.so.1.0)"
    assert render({"worker:0": dump("lock_wait.faulthandler")}, OWN)[-1] == "    <module> (train.py:20)"


def test_the_tpuctl_runtime_around_the_script_is_not_own_code() -> None:
    """A real worker: python -m tpuctl.runtime SCRIPT puts runpy and tpuctl's frames under the script's."""
    for fmt in ("faulthandler", "py-spy"):
        threads = parse(dump(f"runtime_wrapped.{fmt}"))
        assert [_bare(f.function) for f in main_of(dump(f"runtime_wrapped.{fmt}")).frames][-3:] == ["<module>", "_run_code", "_run_module_as_main"]
        expected = signature(parse(dump(f"input_wait.{fmt}")), OWN)
        assert signature(threads, OWN) == expected
        assert signature(threads, own_code_predicate("")) == expected  # the script's folder unknown
        assert render({"worker:0": dump(f"runtime_wrapped.{fmt}")}, OWN) == render({"worker:0": dump(f"input_wait.{fmt}")}, OWN)


def _bare(function: str) -> str:
    return function.rsplit(".", 1)[-1]


def test_long_dumps_and_many_workers_stay_short() -> None:
    deep = "\n".join(
        f"Thread 0x{t:016x} (most recent call first):\n" + "".join(f'  File "/job/lib{t}.py", line {d + 1} in f{d}\n' for d in range(100)) + "  ..."
        for t in range(100)
    )
    view = render({"worker:0": deep, "worker:1": dump("deep_many_threads.faulthandler")}, own_code_predicate("/job"))
    assert len(view) <= 1 + 2 * (2 + stack_view.SHOWN)
    many: dict[str, str | None] = {f"worker:{i}": f'Stack (most recent call first):\n  File "/job/train.py", line {i + 1} in step\n' for i in range(64)}
    many["worker:64"] = None
    view = render(many, own_code_predicate("/job"))
    assert len(view) <= 1 + stack_view.MAX_GROUPS * (2 + stack_view.SHOWN) + 2
    assert view[-2] == f"  ... and {64 - stack_view.MAX_GROUPS} more workers at {64 - stack_view.MAX_GROUPS} other places"
    alike = render({f"worker:{i}": dump("tf_collective.py-spy-native") for i in range(64)}, OWN)
    assert len(alike) == 6 and alike[1] == "  worker:0, worker:1, worker:2, worker:3, worker:4, worker:5, worker:6, worker:7 and 56 more (64 workers)"


# --- own code -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script_dir", "file", "own"),
    [
        ("/job", "/job/train.py", True),
        ("/job", "/job/models/net.py", True),
        ("/job", "/jobs/train.py", False),
        ("/job", "/job/.venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", False),
        ("/job", "/usr/lib/python3.11/threading.py", False),
        ("/job", "/job/tpuctl/runtime/bootstrap.py", False),
        ("/home/me/tpuctl", "/home/me/tpuctl/train.py", True),
        ("/job", "<frozen runpy>", False),
        ("/job", "train.py", True),  # py-spy's short names
        ("/job", "threading.py", False),
        ("/job", "re/__init__.py", False),
        ("/job", "tensorflow/python/eager/execute.py", False),
        ("/job", "libc.so.6", False),
        ("/job", "?", False),
        ("examples", "examples/train.py", True),  # the script given relative: runpy keeps the path as given
        ("examples", "/home/me/examples/train.py", True),
        ("examples", "train.py", True),
        ("examples", "/home/me/train.py", False),
        ("", "/home/me/train.py", True),
        ("", "train.py", True),
        ("", "/usr/local/lib/python3.12/dist-packages/keras/src/trainer.py", False),
        ("", "/opt/venv/lib/python3.11/site-packages/tpuctl/runtime/bootstrap.py", False),
    ],
)
def test_own_code(script_dir: str, file: str, own: bool) -> None:
    assert own_code_predicate(script_dir)(file) is own


# --- never raises ---------------------------------------------------------------------------

_PIECES = [line for name in ("input_wait.faulthandler", "tf_collective.py-spy-native", "input_wait.py-spy-locals") for line in dump(name).splitlines()]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=80)), max_size=40), st.text(alphabet=' ():"\n\x1b[0-9ThreadFileline', max_size=300))
def test_parse_and_render_never_raise(lines: list[str], noise: str) -> None:
    for text in ("\n".join(lines), noise, "\n".join(lines) + noise):
        threads = parse(text)
        assert all(isinstance(f, Frame) for t in threads for f in t.frames)
        signature(threads, OWN)
        view = render({"worker:0": text, "worker:1": noise, "worker:2": None}, OWN)
        assert view and all(isinstance(line, str) for line in view)
        differing({"worker:0": text, "worker:1": dump("input_wait.py-spy")}, OWN)
        OWN(text[:200])


def test_hostile_lines_are_linear() -> None:
    for line in ("    " + "x (" * 4000 + ")", '  File "' + '", line 1 in ' * 700, "Thread " + "x" * 9000 + " (idle", "1" * 5000):
        parse(line + "\n" + line)
    assert parse("Thread 1 (idle)\n    f (x.py:" + "9" * 5000 + ")\n")[0].frames[0].line is None


# --- the quiet notice's one line (tpuctl/launch/process/quiet.py) ---------------------------------


def test_innermost_is_the_views_first_frame_for_each_worker() -> None:
    for scenario in SCENARIOS:
        for form in ("faulthandler", "py-spy"):
            text = dump(f"{scenario}.{form}")
            assert render({"worker:0": text}, OWN)[2] == f"    {stack_view.innermost(text, OWN)}", (scenario, form)
    assert stack_view.innermost("\x00 not a dump", OWN) is None


def test_the_quiet_notice_names_each_place_once_and_every_worker() -> None:
    from tpuctl.launch.process import quiet

    stuck, waiting = dump("input_wait.faulthandler"), dump("tf_collective.py-spy-native")
    line = quiet.notice(["worker:0", "worker:1", "worker:2"], [waiting, stuck, waiting], OWN, 120.0, "RUN")
    assert line.startswith(
        "no step yet, and no worker printed anything for 120s (--quiet-notice): worker:0, worker:2 at train_step (train.py:9); "
        "worker:1 at wait_for_batch (train.py:13); `tpuctl stacks RUN` shows every worker's stacks"
    ), line
    many = quiet.notice([f"worker:{i}" for i in range(6)], [dump(f"{s}.faulthandler") for s in SCENARIOS[:5]] + [None], OWN, 2.0, "RUN")
    assert "worker:0, worker:1, worker:2 at wait_for_batch (train.py:13); worker:3 at preprocess (train.py:9); " in many
    assert "worker:4 at descend (train.py:11) and 1 more place; `tpuctl stacks RUN`" in many, many  # worker:5's "no stack"


def test_the_quiet_notice_is_said_once_a_spell() -> None:
    from tpuctl.launch.process.quiet import QuietSpell

    spell = QuietSpell(120.0)
    assert not spell.due(last=10.0, now=129.0) and spell.wake_at(10.0, 20.0) == 130.0
    assert spell.due(last=10.0, now=130.0)
    spell.said(10.0)
    assert not spell.due(last=10.0, now=1000.0) and spell.wake_at(10.0, 1000.0) == 1120.0  # no busy loop while it stays quiet
    assert spell.due(last=500.0, now=620.0)  # output at 500 began a new spell

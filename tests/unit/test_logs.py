"""Worker line tags and what a terminal would show of a line."""

from __future__ import annotations

import errno
import io
import os
from collections import deque
from pathlib import Path

from tests.conftest import ROOT
from tpuctl.launch.console import logs


def test_tags_are_stable_and_coloured_only_when_asked() -> None:
    assert logs.tag("worker:1", 1, colour=False) == "[worker:1]"
    coloured = logs.tag("worker:1", 1, colour=True)
    assert coloured.startswith("\x1b[") and "[worker:1]" in coloured and coloured.endswith("\x1b[0m")
    assert coloured == logs.tag("worker:1", 1, colour=True)
    assert coloured != logs.tag("worker:0", 0, colour=True)
    assert logs.tag("worker:0", 0, colour=False, host="h1") == "[worker:0@h1]"


def test_progress_bar_redraws_collapse_to_their_last_state() -> None:
    assert logs.display_text(b"1/10\r2/10\r10/10 done\n") == "10/10 done"
    assert logs.display_text(b"plain line\r\n") == "plain line"
    assert logs.display_text(b"\xff\xfe bad bytes\n") == "\ufffd\ufffd bad bytes"


def test_pipes_and_no_color_get_plain_output(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert not logs.use_colour(io.StringIO())

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert logs.use_colour(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not logs.use_colour(Tty())


def _pump(log_path: Path, lines: int = 5000) -> tuple[io.StringIO, list[str], deque[str]]:
    source = io.BytesIO(b"".join(b"line %d\n" % i for i in range(lines)))
    shown = io.StringIO()
    warnings: list[str] = []
    tail = logs.new_tail()
    logs.pump(source, "[worker:0]", logs.LineWriter(shown), log_path, tail, warn=warnings.append)
    return shown, warnings, tail


def test_a_full_disk_costs_the_log_one_warning_and_nothing_else() -> None:
    """/dev/full takes the open and fails every write with ENOSPC, as a full disk does."""
    shown, warnings, tail = _pump(Path("/dev/full"))
    assert shown.getvalue().count("\n") == 5000 and shown.getvalue().endswith("[worker:0] line 4999\n")
    assert tail[-1] == "line 4999"
    assert len(warnings) == 1
    assert "/dev/full" in warnings[0] and os.strerror(errno.ENOSPC) in warnings[0]


def test_a_log_that_cannot_be_opened_still_lets_the_output_through(tmp_path: Path) -> None:
    shown, warnings, _ = _pump(tmp_path, lines=3)  # a directory where the file should be
    assert shown.getvalue().splitlines() == ["[worker:0] line 0", "[worker:0] line 1", "[worker:0] line 2"]
    assert len(warnings) == 1 and "Is a directory" in warnings[0]


def test_without_a_warn_callback_the_warning_is_a_tagged_line(tmp_path: Path) -> None:
    shown = io.StringIO()
    logs.pump(io.BytesIO(b"hello\n"), "[worker:0]", logs.LineWriter(shown), tmp_path, logs.new_tail())
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("[worker:0] tpuctl: warning: cannot write log") and lines[1] == "[worker:0] hello"


def test_a_terminal_that_fails_does_not_stop_the_pump(tmp_path: Path) -> None:
    class FullStream(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    log = tmp_path / "w.log"
    logs.pump(io.BytesIO(b"a\nb\n"), "[worker:0]", logs.LineWriter(FullStream()), log, logs.new_tail())
    assert log.read_bytes() == b"a\nb\n"


def test_a_log_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """A worker may print what --env handed it: its log is 0600 whatever the umask, appended or new."""
    old = os.umask(0o022)
    try:
        shown, warnings, _ = _pump(tmp_path / "worker-0.log", lines=2)
    finally:
        os.umask(old)
    assert not warnings and (tmp_path / "worker-0.log").read_text() == "line 0\nline 1\n"
    assert (tmp_path / "worker-0.log").stat().st_mode & 0o777 == 0o600


def test_hidden_lines_reach_the_log_but_not_the_terminal_or_the_tail(tmp_path: Path) -> None:
    raw = b"I0000 noise 1\nEpoch 1/5\nI0000 noise 2\n1/2\r2/2 done\nTraceback (most recent call last):\nI0000 noise 3\n"
    shown = io.StringIO()
    tail = logs.new_tail()
    seen: list[str] = []

    def hide(line: str) -> bool:
        seen.append(line)
        return line.startswith("I0000")

    log = tmp_path / "worker-0.log"
    logs.pump(io.BytesIO(raw), "[worker:0]", logs.LineWriter(shown), log, tail, hide=hide)
    assert log.read_bytes() == raw
    assert shown.getvalue().splitlines() == ["[worker:0] Epoch 1/5", "[worker:0] 2/2 done", "[worker:0] Traceback (most recent call last):"]
    assert list(tail) == ["Epoch 1/5", "2/2 done", "Traceback (most recent call last):"]
    # the filter judges what the terminal would show, without the worker's tag
    assert seen == ["I0000 noise 1", "Epoch 1/5", "I0000 noise 2", "2/2 done", "Traceback (most recent call last):", "I0000 noise 3"]


def test_a_tail_of_hidden_lines_does_not_push_out_the_last_real_ones(tmp_path: Path) -> None:
    raw = b"the error the user needs\n" + b"I0000 chatter\n" * (logs.TAIL_LINES * 3)
    tail = logs.new_tail()
    logs.pump(io.BytesIO(raw), "[worker:0]", logs.LineWriter(io.StringIO()), tmp_path / "w.log", tail, hide=lambda s: s.startswith("I0000"))
    assert list(tail) == ["the error the user needs"]


def test_without_a_log_file_nothing_is_hidden(tmp_path: Path) -> None:
    """The promise of folding is "it is in the log file": with no log file, the terminal keeps every line.

    The filter still sees each line: the Supervisor's also counts them as progress (--hang-timeout).
    """
    shown = io.StringIO()
    warnings: list[str] = []
    seen: list[str] = []

    def hide(line: str) -> bool:
        seen.append(line)
        return True

    logs.pump(io.BytesIO(b"I0000 noise\nreal\n"), "[worker:0]", logs.LineWriter(shown), tmp_path, logs.new_tail(), warn=warnings.append, hide=hide)
    assert shown.getvalue().splitlines() == ["[worker:0] I0000 noise", "[worker:0] real"] and len(warnings) == 1
    assert seen == ["I0000 noise", "real"]
    full = io.StringIO()
    logs.pump(io.BytesIO(b"I0000 noise\n"), "[worker:0]", logs.LineWriter(full), Path("/dev/full"), logs.new_tail(), warn=warnings.append, hide=lambda s: True)
    assert full.getvalue() == "[worker:0] I0000 noise\n"


def test_a_filter_that_raises_shows_the_line_and_the_pump_goes_on(tmp_path: Path) -> None:
    def hide(line: str) -> bool:
        raise RuntimeError("bug in a filter")

    shown = io.StringIO()
    logs.pump(io.BytesIO(b"a\nb\n"), "[worker:0]", logs.LineWriter(shown), tmp_path / "w.log", logs.new_tail(), hide=hide)
    assert shown.getvalue().splitlines() == ["[worker:0] a", "[worker:0] b"]


def test_a_log_line_glued_onto_a_progress_bar_gets_its_own_line(tmp_path: Path) -> None:
    """Keras 3's bar ends its line only at the end of an epoch; TF's C++ warning arrived meanwhile
    (tests/data/tf_console/keras3_fit_bad_label.log, a real worker log)."""
    raw = (ROOT / "tests" / "data" / "tf_console" / "keras3_fit_bad_label.log").read_bytes()
    glued = next(line for line in raw.splitlines(keepends=True) if b"OP_REQUIRES failed" in line)
    bar, warning = logs.display_lines(glued)
    assert bar.endswith("loss: 2.3531") and "\x1b[1m1/4\x1b[0m" in bar
    assert warning.startswith("W0000 00:00:1795586699.661483    6111 op_kernel.cc:1858] OP_REQUIRES failed at sparse_xent_op.cc:103")
    shown = io.StringIO()
    logs.pump(io.BytesIO(glued), "[worker:0]", logs.LineWriter(shown), tmp_path / "w.log", logs.new_tail())
    assert shown.getvalue().splitlines()[1] == f"[worker:0] {warning}"
    assert (tmp_path / "w.log").read_bytes() == glued


def test_a_traceback_glued_onto_a_bar_and_plain_lines_are_left_alone() -> None:
    assert logs.display_lines(b"\r3/3 done - loss: 0.1Traceback (most recent call last):\n") == ["3/3 done - loss: 0.1", "Traceback (most recent call last):"]
    assert logs.display_lines(b"step W0000 is not a log line\n") == ["step W0000 is not a log line"]
    assert logs.display_lines(b"\n") == [""]


def test_blank_lines_reach_the_log_only(tmp_path: Path) -> None:
    shown = io.StringIO()
    tail = logs.new_tail()
    logs.pump(io.BytesIO(b"a\n\n   \nb\n"), "[worker:0]", logs.LineWriter(shown), tmp_path / "w.log", tail)
    assert shown.getvalue().splitlines() == ["[worker:0] a", "[worker:0] b"] and list(tail) == ["a", "b"]
    assert (tmp_path / "w.log").read_bytes() == b"a\n\n   \nb\n"


def test_the_exception_line_stays_at_the_head_of_the_tail_for_a_while() -> None:
    tail = logs.new_tail()
    for line in ["Traceback (most recent call last):", "ValueError: the news", *[f"frame {i}" for i in range(30)]]:
        tail.append(line)
    assert list(tail) == ["ValueError: the news", "    [… 20 lines …]", *[f"frame {i}" for i in range(20, 30)]]
    for i in range(logs.PIN_LINES):
        tail.append(f"later {i}")
    assert "ValueError: the news" not in tail and len(tail) == logs.TAIL_LINES

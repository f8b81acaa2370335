"""Worker line tags and what a terminal would show of a line."""

from __future__ import annotations

import io

from tpuctl.launch import logs


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

"""--setup's output split into lines as ssh delivers it (tpuctl/backends/ssh/environment/setup_output.py): chunks end
anywhere, the host program's answer line is not the command's, and a host's lines are bounded on the console. The
launch that streams them from real sshd hosts is tests/integration/test_host_environments.py."""

from __future__ import annotations

from pathlib import Path

from tpuctl.backends.ssh.environment import setup_output
from tpuctl.backends.ssh.environment.host_env import REPLY


def lines(tmp_path: Path, *chunks: bytes) -> tuple[list[str], str, list[str]]:
    """What the console shows, what the log keeps and the warnings, for output that comes in `chunks`."""
    shown: list[str] = []
    warned: list[str] = []
    split = setup_output.Lines(tmp_path / "setup@h.log", shown.append, lambda text: text.replace("s3cret", "<hidden>"), warned.append)
    for chunk in chunks:
        split.feed(chunk)
        if chunk.startswith(b"ab"):
            assert shown == []  # no line yet: one is shown only once it ends
    split.close()
    return shown, (tmp_path / "setup@h.log").read_text(), warned


def test_lines_cut_anywhere_by_the_transport_come_out_whole_without_the_program_s_answer(tmp_path: Path) -> None:
    answer = f'\n{REPLY}{{"ran": true}}\n'.encode()
    shown, log, warned = lines(tmp_path, b"ab", b"c\n\nd s3cret", b"\r\n", answer[:5], answer[5:])
    assert shown == ["abc", "", "d <hidden>"] and log == "abc\n\nd <hidden>\n" and warned == []


def test_a_host_s_lines_past_the_console_s_bound_are_counted_and_kept_in_the_log(tmp_path: Path) -> None:
    line = b"x" * 99 + b"\n"
    count = setup_output.SHOWN_LIMIT // len(line) + 10
    shown, log, _ = lines(tmp_path, line * count, b"last words")
    *seen, note = shown
    assert seen == ["x" * 99] * len(seen) and 0 < len(seen) < count  # the last words too are past the bound
    assert note == f"... {count * len(line) + len(b'last words') + 1 - len(seen) * len(line)} bytes more in {tmp_path / 'setup@h.log'}"
    assert log.splitlines()[-1] == "last words" and len(log.splitlines()) == count + 1


def test_a_log_that_cannot_be_written_warns_once_and_the_lines_are_still_shown(tmp_path: Path) -> None:
    shown: list[str] = []
    warned: list[str] = []
    split = setup_output.Lines(tmp_path / "gone" / "setup@h.log", shown.append, str, warned.append)
    split.feed(b"one\ntwo\n")
    split.close()
    assert shown == ["one", "two"] and len(warned) == 1 and "cannot write log" in warned[0]

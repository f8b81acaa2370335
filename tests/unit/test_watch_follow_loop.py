"""`tpuctl tail`'s polling loop: when it stops, what it says, and which failures it rides out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.watch.follow_loop import follow
from tpuctl.watch.sources import FileInfo, LocalSource
from tpuctl.watch.tailer import Update


class FlakySource:
    """A folder whose listing fails the first `failures` times, as a bucket dropping connections does."""

    def __init__(self, root: Path, failures: int, error: Exception) -> None:
        self.inner = LocalSource(str(root))
        self.root = self.inner.root
        self.failures = failures
        self.error = error

    def list(self) -> list[FileInfo]:
        if self.failures:
            self.failures -= 1
            raise self.error
        return self.inner.list()

    def read(self, path: str, start: int, end: int) -> bytes:
        return self.inner.read(path, start, end)


def test_once_reads_once_and_says_when_there_is_nothing_yet(tmp_path: Path) -> None:
    said: list[str] = []
    shown: list[tuple[Update, str]] = []
    follow(LocalSource(str(tmp_path)), (), lambda update, status: shown.append((update, status)), said.append, once=True, until_idle=None, interval=60)
    assert said == [f"no event files under {tmp_path} yet"]
    assert all(status.startswith("0 event file(s) under ") for _, status in shown)


def test_until_idle_stops_after_a_quiet_spell(tmp_path: Path) -> None:
    said: list[str] = []
    started = time.monotonic()
    follow(LocalSource(str(tmp_path)), (), lambda update, status: None, said.append, once=False, until_idle=0.2, interval=0.05)
    assert 0.2 <= time.monotonic() - started < 5
    assert said == [f"no event files under {tmp_path} yet; waiting"]  # said once, not every poll


def test_a_passing_failure_is_reported_and_the_next_poll_tries_again(tmp_path: Path) -> None:
    said: list[str] = []
    source = FlakySource(tmp_path, failures=2, error=ConnectionResetError("connection reset by peer"))
    follow(source, (), lambda update, status: None, said.append, once=False, until_idle=0.3, interval=0.05)
    retrying = f"warning: cannot read {tmp_path} now (connection reset by peer); retrying"
    assert said == [retrying, f"no event files under {tmp_path} yet; waiting", retrying]
    assert source.failures == 0


def test_with_once_the_first_failure_ends_the_tail_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(TpuctlError) as ended:
        follow(FlakySource(tmp_path, 1, ConnectionResetError("reset")), (), lambda update, status: None, print, once=True, until_idle=None, interval=60)
    assert ended.value.message == f"cannot read {tmp_path}: reset" and ended.value.exit_code == FAILED


def test_a_failure_that_will_not_pass_ends_even_a_long_tail(tmp_path: Path) -> None:
    refused = TpuctlError(f"{tmp_path}: permission denied", exit_code=FAILED)
    with pytest.raises(TpuctlError) as ended:
        follow(FlakySource(tmp_path, 1, refused), (), lambda update, status: None, print, once=False, until_idle=None, interval=0.05)
    assert ended.value is refused

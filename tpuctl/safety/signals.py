"""The signals that stop a launch, whatever runs it: Ctrl-C, `kill`, and a closed terminal."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Handler = Callable[[int, FrameType | None], None]


@contextmanager
def handled(handler: Handler) -> Iterator[None]:
    """Route every stopping signal to `handler` for the duration, then restore what was there.

    Installing a handler also covers a SIGINT that the shell left ignored (a
    launch started in the background), which Python would otherwise never see.
    A SIGHUP ignored on the way in stays ignored: that is `nohup`'s promise (the
    run outlives the terminal); the workers, in sessions of their own, never get it.
    """
    previous = {sig: signal.signal(sig, handler) for sig in HANDLED if not (sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Stopped(Exception):
    """A stopping signal arrived: raised by `raise_stopped` so the code it interrupts can unwind."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum: int, frame: FrameType | None) -> None:
    """A handler for `handled()` that turns the signal into `Stopped` in the main thread."""
    raise Stopped(signum)


@contextmanager
def as_interrupt() -> Iterator[Callable[[], None]]:
    """Ctrl-C, TERM and HUP all raise KeyboardInterrupt for the duration, so that a closed terminal, `timeout` or a CI
    cancel cleans up what a command was making as Ctrl-C does, until the yielded `settle()` is called: from then on
    the change is done and only its report is left to print, which a stopping signal no longer cuts short."""
    armed = [True]

    def handler(signum: int, frame: FrameType | None) -> None:
        if armed[0]:
            raise KeyboardInterrupt

    with handled(handler):
        yield lambda: armed.__setitem__(0, False)

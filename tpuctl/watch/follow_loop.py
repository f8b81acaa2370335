"""`tpuctl tail`'s polling loop: read what is new under a model dir, again and again, until told to stop.

The loop lives beside the Tailer rather than in the command so that the CLI only
draws what it is handed. A bucket that drops a connection or answers 503 now and
then must not end a long tail: such a failure is reported and the next poll tries
again. On --once, or for anything else, the first failure ends the tail in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.watch.sources import Source
from tpuctl.watch.tailer import Tailer, Update

Show = Callable[[Update, str], None]  # an update and a status line ("N event file(s) under ROOT; ...")
Say = Callable[[str], None]  # a notice for people (stderr), without the "tpuctl: " prefix


def follow(source: Source, tags: tuple[str, ...], show: Show, say: Say, *, once: bool, until_idle: float | None, interval: float) -> None:
    """Poll until told to stop: `once` after one full read, `until_idle` after that many quiet seconds, else forever."""
    tailer = Tailer(source, tags)
    quiet_since = time.monotonic()
    said_waiting = False
    while True:
        try:
            for update in tailer.updates(last=once):
                if update:
                    quiet_since = time.monotonic()
                show(update, f"{tailer.event_files} event file(s) under {source.root}; polling every {interval:g}s")
        except Exception as err:  # noqa: BLE001 - a storage client's failures have many types; _passing sorts them
            if once or not _passing(err):
                raise _unreadable(source.root, err) from None
            # A dropped connection or a 503 from the bucket: say so, keep the view, try again.
            say(f"warning: cannot read {source.root} now ({_reason(err)}); retrying")
        if tailer.event_files == 0 and not said_waiting:
            say(f"no event files under {source.root} yet" + ("" if once else "; waiting"))
            said_waiting = True
        if once or (until_idle is not None and time.monotonic() - quiet_since >= until_idle):
            return
        time.sleep(interval)


def _passing(err: Exception) -> bool:
    from tpuctl.cloud.plumbing import retry

    return isinstance(err, OSError) or retry.is_transient(err)


def _reason(err: Exception) -> str:
    return " ".join(str(err).split())[:200] or type(err).__name__


def _unreadable(root: str, err: Exception) -> Exception:
    from tpuctl.cloud.plumbing.api_errors import is_api_failure

    if isinstance(err, TpuctlError):
        return err
    if isinstance(err, OSError) or is_api_failure(err):
        return TpuctlError(f"cannot read {root}: {_reason(err)}", exit_code=FAILED)
    return err

"""`python -m tpuctl.runtime.profile_capture REQUEST`: one profile of every worker of a run, as one JSON line.

Started by `tpuctl profile` in the run's own worker interpreter (the CLI never imports TensorFlow).
REQUEST is JSON: `{"logdir": ABSOLUTE_DIR_OR_GS_URL, "duration_ms": N, "workers": [{"worker":
"worker:0", "address": "HOST:PORT"}, ...], "elsewhere": false}`. The answer is the last line of stdout:

    {"session": DIR, "files": {"worker:0": FILE, ...}, "missing": {"worker:1": WHY, ...}}

One `trace` call covers every worker, so their windows start together. That call writes whatever
answered and raises only when nothing did (capture_profile.cc's Profile(): a worker's failed RPC is
only a logged warning once another sent data, so TensorFlow's own retries never run for it). What a
worker's failure was is read from the lines TensorFlow's client logs on stderr, the only place it
says; they are held back from the CLI's stderr and given per worker in `missing`. A silent worker
whose profiler port still takes connections, and whose failure was not the 20 s connect deadline or
a busy profiler, is asked again alone, once, and its file joins the session (its window is the
later one). One whose port refuses connections now had its process end during the capture (seen:
TensorFlow 2.21 aborting a MultiWorkerMirroredStrategy worker inside the profiler, docs/profile.md).
Each worker's server writes its own file, on its own
disk, under `logdir`: the caller passes an absolute path (or gs://) and checks the files where
they land. With `"elsewhere": true` (workers on other hosts' disks, `tpuctl profile` of an ssh run)
the session is named even when no file landed on this disk, since the caller fetches it from
each host: TensorFlow's client names it after the second the call began, in local time, which
is read here just before the call. A failure of the capture itself is one `tpuctl: error: ...` line on stderr, exit 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any, NoReturn

from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.runtime import after_import

# What TensorFlow's client logs for a worker that did not answer, said the way a user can act on it.
_REASONS = (
    ("timed out", "did not answer within TensorFlow's 20 s (stopped, or too busy to answer?)"),
    ("Connection refused", "no profiler server listening (has the worker ended?)"),
    ("Another profiling session active", "its profiler is busy with another capture (a --profile window, or another tpuctl profile)"),
)
_NO_ANSWER = "sent no profile (no reason given by TensorFlow)"
_ENDED = "its process ended during the capture (its profiler port is closed now; `tpuctl logs` shows how it ended)"
_NOT_AGAIN = ("timed out", "Another profiling session active")  # asking again would wait or be refused the same way
_PROBE_S = 2.0


def read_request(text: str) -> tuple[str, int, list[tuple[str, str]], bool]:
    """logdir, duration in ms, (worker, HOST:PORT) pairs, elsewhere; TpuctlError for anything else."""
    try:
        raw = json.loads(text)
        logdir, duration_ms, workers, elsewhere = raw["logdir"], raw["duration_ms"], raw["workers"], raw.get("elsewhere", False)
        pairs = [(w["worker"], w["address"]) for w in workers]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise TpuctlError("usage: python -m tpuctl.runtime.profile_capture REQUEST_JSON (see its docstring)") from None
    if not (isinstance(logdir, str) and (logdir.startswith("gs://") or os.path.isabs(logdir))):
        raise TpuctlError(f"logdir {one_line(str(logdir), 80)!r} is not an absolute path or gs:// URL")
    if type(duration_ms) is not int or not 0 < duration_ms <= 3_600_000 or not pairs:
        raise TpuctlError("duration_ms must be 1..3600000 and workers not empty")
    if not all(isinstance(x, str) and x.isprintable() and "," not in x for pair in pairs for x in pair):
        raise TpuctlError("every worker needs a name and a HOST:PORT address")
    if type(elsewhere) is not bool:
        raise TpuctlError("elsewhere must be true or false")
    return logdir, duration_ms, pairs, elsewhere


@contextlib.contextmanager
def _stderr_into(path: str) -> Iterator[None]:
    """fd 2 goes to `path` while the block runs: TensorFlow's C++ client logs there, not to Python."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _errors(log: str) -> list[str]:
    """The messages of the error lines TensorFlow's profiler client logged (`E... profiler_client.cc:N] MESSAGE`),
    and of capture_profile.cc's warning for each worker whose RPC failed (`W... capture_profile.cc:N] ADDR returned STATUS`)."""
    return [
        line.partition("] ")[2].strip()
        for line in log.splitlines()
        if "] " in line
        and ((line.startswith("E") and "profiler_client" in line) or (line.startswith("W") and "capture_profile" in line and " returned " in line))
    ]


def why(address: str, addresses: list[str], errors: list[str], silent: int) -> str:
    """What a worker that sent no profile was told: the error naming its address, else (when it is the only
    silent one) the errors naming no worker, said as _REASONS says them."""
    found = _told(address, addresses, errors, silent)
    for text in found:
        for key, reason in _REASONS:
            if key in text:
                return reason
    return one_line(found[-1], 200) if found else _NO_ANSWER


def _told(address: str, addresses: list[str], errors: list[str], silent: int) -> list[str]:
    own = [e for e in errors if address in e]
    anonymous = [e for e in errors if not any(a in e for a in addresses)]
    return own or (anonymous if silent == 1 else [])


def listening(address: str, timeout: float = _PROBE_S) -> bool:
    """Whether HOST:PORT takes a TCP connection now: a worker whose profiler port refuses has no process behind it."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def worth_asking_again(address: str, addresses: list[str], errors: list[str], silent: int) -> bool:
    """A silent worker is asked again alone unless what it was told would come back the same (a timeout, a busy profiler)."""
    return not any(key in text for text in _told(address, addresses, errors, silent) for key in _NOT_AGAIN)


def _this_second() -> str:
    """The session name TensorFlow's client is about to give (`YYYY_MM_DD_HH_MM_SS`, local time): the end of a
    second is waited out first, so that the call begins within the second read here."""
    now = time.time()
    if now % 1 > 0.95:
        time.sleep(1 - now % 1)
        now = time.time()
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(now))


def capture(logdir: str, duration_ms: int, workers: list[tuple[str, str]], elsewhere: bool = False) -> dict[str, Any]:
    import tensorflow as tf

    addresses = [a for _, a in workers]
    sessions = tf.io.gfile.join(logdir, "plugins", "profile")
    session, named, errors = _trace(tf, sessions, logdir, duration_ms, addresses)
    if session is None and elsewhere:
        session = tf.io.gfile.join(sessions, named)
    files = _landed(tf, session, workers)
    silent = [(w, a) for w, a in workers if w not in files]
    missing: dict[str, str] = {}
    for worker, address in silent:
        if not listening(address):  # refused from the start: the worker had ended before (why() says so); else it ended meanwhile
            refused = any("Connection refused" in text for text in _told(address, addresses, errors, len(silent)))
            missing[worker] = why(address, addresses, errors, len(silent)) if refused else _ENDED
        elif elsewhere or not worth_asking_again(address, addresses, errors, len(silent)):
            missing[worker] = why(address, addresses, errors, len(silent))
        else:  # alive, and what failed may not fail again: asked alone, its file joins the session
            again, _, told = _trace(tf, sessions, logdir, duration_ms, [address])
            found = _landed(tf, again, [(worker, address)]).get(worker)
            if found is None or again is None:  # a worker that was dying as it was probed is gone by now
                missing[worker] = why(address, [address], told, 1) if listening(address) else _ENDED
                continue
            session = session or again
            files[worker] = _join(tf, found, session)
    return {"session": session, "files": {w: files[w] for w, _ in workers if w in files}, "missing": missing}


def _trace(tf: Any, sessions: str, logdir: str, duration_ms: int, addresses: list[str]) -> tuple[str | None, str, list[str]]:
    """One `trace` call over `addresses`: the session folder it made (None: none), the name it was given, the errors logged."""
    before = set(tf.io.gfile.listdir(sessions)) if tf.io.gfile.isdir(sessions) else set()
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
    with tempfile.TemporaryDirectory(prefix="tpuctl-capture-") as scratch:
        log = os.path.join(scratch, "stderr")
        failure = None
        with _stderr_into(log):
            named = _this_second()
            try:
                # One attempt: TensorFlow retries only when nothing answered, and each retry waits 20 s more for a silent one.
                tf.profiler.experimental.client.trace(",".join(f"grpc://{a}" for a in addresses), logdir, duration_ms, num_tracing_attempts=1, options=options)
            except Exception as err:  # noqa: BLE001 - TensorFlow's errors: nothing answered; each worker is named by the caller
                failure = one_line(str(getattr(err, "message", "") or err), 200, first=True)
        with open(log, encoding="utf-8", errors="replace") as handle:
            errors = _errors(handle.read())
    new = sorted(set(tf.io.gfile.listdir(sessions)) - before) if tf.io.gfile.isdir(sessions) else []
    session = tf.io.gfile.join(sessions, new[-1].rstrip("/")) if new else None
    return session, named, errors or ([failure] if failure else [])


def _landed(tf: Any, session: str | None, workers: list[tuple[str, str]]) -> dict[str, str]:
    """The workers whose file (TensorFlow names it `<host>_<port>.xplane.pb`) is in the session: worker -> path."""
    files = {}
    for worker, address in workers:
        host, _, port = address.rpartition(":")
        path = tf.io.gfile.join(session, f"{host}_{port}.xplane.pb") if session else None
        if path is not None and tf.io.gfile.exists(path):
            files[worker] = path
    return files


def _join(tf: Any, file: str, session: str) -> str:
    """`file`, from the folder a second call made, moved into `session`; that folder goes once it is empty."""
    folder, name = file.rsplit("/", 1)
    if folder.rstrip("/") == session.rstrip("/"):
        return file
    target = tf.io.gfile.join(session, name)
    tf.io.gfile.rename(file, target, overwrite=True)
    if not tf.io.gfile.listdir(folder):
        tf.io.gfile.rmtree(folder)
    return str(target)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    after_import.frozen_after("tensorflow")  # ~0.45 CPU-s of the import (after_import.py)
    try:
        if len(args) != 1:
            raise TpuctlError("usage: python -m tpuctl.runtime.profile_capture REQUEST_JSON")
        answer = capture(*read_request(args[0]))
    except TpuctlError as err:
        _fail(str(err))
    except Exception as err:  # noqa: BLE001 - TensorFlow's (a logdir it cannot list); the CLI shows one line
        _fail(f"{type(err).__name__}: {one_line(str(getattr(err, 'message', '') or err), first=True) or 'no message'}")
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    os._exit(0)  # TensorFlow's teardown adds seconds; nothing is left to do


def _fail(message: str) -> NoReturn:
    print(f"tpuctl: error: {message}", file=sys.stderr, flush=True)
    os._exit(FAILED)

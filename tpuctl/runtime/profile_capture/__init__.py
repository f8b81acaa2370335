"""`python -m tpuctl.runtime.profile_capture REQUEST`: one profile of every worker of a run, as one JSON line.

Started by `tpuctl profile` in the run's own worker interpreter (the CLI never imports TensorFlow).
REQUEST is JSON: `{"logdir": ABSOLUTE_DIR_OR_GS_URL, "duration_ms": N, "workers": [{"worker":
"worker:0", "address": "HOST:PORT"}, ...], "elsewhere": false}`. The answer is the last line of stdout:

    {"session": DIR, "files": {"worker:0": FILE, ...}, "missing": {"worker:1": WHY, ...}}

One `trace` call covers every worker, so their windows start together. Measured (TF 2.21): that call
writes whatever answered and raises only when nothing did, so no worker is asked again alone: a
stopped worker costs TensorFlow's 20 s connect deadline once, and asking each silent one alone
would cost it again to learn the same. What a worker's failure was is read from the lines
TensorFlow's client logs on stderr, the only place it says; they are held back from the CLI's
stderr and given per worker in `missing`. Each worker's server writes its own file, on its own
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
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any, NoReturn

from tpuctl.inputs.errors import FAILED, TpuctlError, one_line

# What TensorFlow's client logs for a worker that did not answer, said the way a user can act on it.
_REASONS = (
    ("timed out", "did not answer within TensorFlow's 20 s (stopped, or too busy to answer?)"),
    ("Connection refused", "no profiler server listening (has the worker ended?)"),
    ("Another profiling session active", "its profiler is busy with another capture (a --profile window, or another tpuctl profile)"),
)
_NO_ANSWER = "sent no profile (no reason given by TensorFlow)"


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
    """The messages of the error lines TensorFlow's profiler client logged (`E... profiler_client.cc:N] MESSAGE`)."""
    return [line.partition("] ")[2].strip() for line in log.splitlines() if line.startswith("E") and "profiler_client" in line and "] " in line]


def why(address: str, addresses: list[str], errors: list[str], silent: int) -> str:
    """What a worker that sent no profile was told: the error naming its address, else (when it is the only
    silent one) the errors naming no worker, said as _REASONS says them."""
    own = [e for e in errors if address in e]
    anonymous = [e for e in errors if not any(a in e for a in addresses)]
    found = own or (anonymous if silent == 1 else [])
    for text in found:
        for key, reason in _REASONS:
            if key in text:
                return reason
    return one_line(found[-1], 200) if found else _NO_ANSWER


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

    sessions = tf.io.gfile.join(logdir, "plugins", "profile")
    before = set(tf.io.gfile.listdir(sessions)) if tf.io.gfile.isdir(sessions) else set()
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
    with tempfile.TemporaryDirectory(prefix="tpuctl-capture-") as scratch:
        log = os.path.join(scratch, "stderr")
        failure = None
        with _stderr_into(log):
            named = _this_second()
            try:
                # One attempt: the servers are up (the run is running); each retry would wait 20 s more for a silent one.
                tf.profiler.experimental.client.trace(",".join(f"grpc://{a}" for _, a in workers), logdir, duration_ms, num_tracing_attempts=1, options=options)
            except Exception as err:  # noqa: BLE001 - TensorFlow's errors: nothing answered; each worker is named below
                failure = one_line(str(getattr(err, "message", "") or err), 200, first=True)
        with open(log, encoding="utf-8", errors="replace") as handle:
            errors = _errors(handle.read())
    new = sorted(set(tf.io.gfile.listdir(sessions)) - before) if tf.io.gfile.isdir(sessions) else []
    session = tf.io.gfile.join(sessions, new[-1].rstrip("/")) if new else None
    if session is None and elsewhere:
        session = tf.io.gfile.join(sessions, named)
    files: dict[str, str] = {}
    for worker, address in workers:
        host, _, port = address.rpartition(":")
        path = tf.io.gfile.join(session, f"{host}_{port}.xplane.pb") if session else None
        if path is not None and tf.io.gfile.exists(path):
            files[worker] = path
    silent = [(w, a) for w, a in workers if w not in files]
    if failure and not errors:
        errors = [failure]
    missing = {w: why(a, [b for _, b in workers], errors, len(silent)) for w, a in silent}
    return {"session": session, "files": files, "missing": missing}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
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

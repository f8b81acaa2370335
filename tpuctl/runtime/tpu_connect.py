"""Reach a TPU — `local`, a grpc:// address or a TPU name — within a deadline, or fail in one line.

TensorFlow waits forever on a grpc:// address nobody answers (FIELD-NOTES), and
a TPU that is still being provisioned refuses for a while before it works. So:
look at the address first (TCP, with retries), then run TensorFlow's connect
and initialise in a helper thread, retrying what may pass, and give up at the
deadline. A thread stuck inside TensorFlow cannot be cancelled, so the process
leaves with os._exit after saying what it tried.

The same deadline covers the TPU connections a script makes itself
(`tf.config.experimental_connect_to_cluster(resolver)`,
`tf.tpu.experimental.initialize_tpu_system(resolver)`, also through
`TPUClusterResolver.connect()` or TPUStrategy): `install_guards` wraps
TensorFlow's implementations of both as their modules load.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.runtime import worker_env

DEFAULT_TIMEOUT_S = 300.0
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 10.0
DEFAULT_GRPC_PORT = 8470
TPU_NAME = "TPU_NAME"
# Set by GKE's Cloud TPU support (and so in Vertex AI replicas reaching a TPU over the network):
# grpc://IP:8470, comma-separated for a pod slice. TensorFlow's cloud_tpu_client reads it before TPU_NAME.
GKE_TPU_ENDPOINTS = "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS"
T = TypeVar("T")
_inside = threading.local()  # .active: this thread runs a call under a deadline already


@dataclass
class Attempts:
    """What was tried, for the one line a failure prints."""

    target: str
    started: float = field(default_factory=time.monotonic)
    tries: list[str] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def summary(self) -> str:
        if not self.tries:
            return "nothing was tried"
        last = self.tries[-1]
        count = len(self.tries)
        return f"{count} attempt{'s' if count != 1 else ''} in {self.elapsed():.1f}s, last: {last}"


def target_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Where this worker's TPU is, from the environment.

    TPU_NAME first (a TPU's name or grpc:// address, as TensorFlow reads it);
    else KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, the grpc:// endpoints (comma-separated
    on a pod slice) that GKE's Cloud TPU integration, and with it a Vertex AI
    `cloud-tpu` replica attached to a TPU over the network, puts in the
    container, and that TPUClusterResolver() with no argument would read; else
    `local`: the TPU VM itself (Vertex AI TPU VM machine types, a TPU VM).
    """
    env = os.environ if environ is None else environ
    name = env.get(TPU_NAME, "").strip()
    if name:
        return name
    endpoints = env.get(GKE_TPU_ENDPOINTS, "").strip()
    if endpoints:
        return grpc_endpoints(endpoints)
    return "local"


def grpc_endpoints(value: str) -> str:
    """`10.0.0.2:8470, grpc://10.0.0.3:8470` as `grpc://10.0.0.2:8470,grpc://10.0.0.3:8470`.

    TensorFlow takes a target without grpc:// for a TPU *name* and looks it up in
    the Cloud TPU API, so every endpoint gets the scheme it stands for.
    """
    found = [part.strip() for part in value.split(",") if part.strip()]
    if not found:
        raise TpuctlError(f"{GKE_TPU_ENDPOINTS}={one_line(value, 60)!r} names no TPU endpoint", exit_code=FAILED)
    return ",".join(part if part.startswith("grpc://") else f"grpc://{part}" for part in found)


def timeout_from_env() -> float:
    """The launch's --tpu-timeout, else tpuctl's default deadline."""
    chosen = contract.tpu_timeout(os.environ)
    return DEFAULT_TIMEOUT_S if chosen is None else chosen


def grpc_address(target: str) -> tuple[str, int] | None:
    """The host and port to check first: of the first endpoint where a pod slice lists several (TF's master)."""
    if not target.startswith("grpc://"):
        return None
    first = target.split(",", 1)[0].strip()
    try:
        parts = urlsplit(first)
    except ValueError:  # e.g. an unclosed [IPv6 bracket
        raise TpuctlError(f"TPU address {one_line(first, 80)!r} is malformed", hint="e.g. grpc://10.0.0.2:8470") from None
    if not parts.hostname:
        raise TpuctlError(f"TPU address {first!r} has no host", hint="e.g. grpc://10.0.0.2:8470")
    try:
        port = parts.port or DEFAULT_GRPC_PORT
    except ValueError:
        raise TpuctlError(f"TPU address {first!r} has a bad port", hint="e.g. grpc://10.0.0.2:8470") from None
    return parts.hostname, port


def connect(target: str, timeout_s: float, *, import_within_deadline: bool = False) -> Any:
    """A TPUClusterResolver whose TPU system is initialised, or a one-line failure by the deadline.

    TensorFlow is imported once the target passed the checks that need none, outside the deadline (a launch's
    workers imported it before the deadline began), or within it where the caller promises the whole answer within
    the deadline (`tpuctl devices --tpu`)."""

    def reach() -> Any:
        import tensorflow as tf

        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=target)
        except ValueError as err:  # e.g. a TPU name the resolver cannot look up
            raise TpuctlError(f"TPUClusterResolver(tpu={target!r}) refused: {one_line(str(err), first=True)}", exit_code=FAILED) from None
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return resolver

    load = None if import_within_deadline else _load_tensorflow
    return within_deadline(reach, target, timeout_s, hung="connect_to_cluster / initialize_tpu_system", load=load)


def _load_tensorflow() -> None:
    import tensorflow  # noqa: F401 - the import is the point: once the target passed the checks, outside the deadline


def within_deadline(
    call: Callable[[], T], target: str | None, timeout_s: float, *, hung: str, script: bool = False, load: Callable[[], object] | None = None
) -> T:
    """`call()` (a TPU connection) under tpuctl's deadline: its result, or a one-line failure by then.

    `target` (a TPU's name, `local` or grpc://) is checked first where it can be:
    `local` needs TPU chips here, a grpc:// address must accept TCP connections
    (retried with backoff). Then `call` runs, retried while TensorFlow answers
    "not found" or "unavailable"; a watchdog thread ends the process at the
    deadline if TensorFlow does not return at all (`hung` says which call).
    Calls made while one is already under a deadline (TensorFlow's own, inside
    tpuctl's connect) run as they are.

    `load` (TensorFlow's import, for tpuctl's own connection) runs once the target has passed those checks, so
    that a wrong target costs no import, and its seconds are not counted against the deadline.

    `script`: the script's own call. What TensorFlow answers quickly (no TPU here,
    "not found") reaches the script as TensorFlow raised it, once, so its own
    `except` can fall back to CPU; only what would hang is bounded.
    """
    if getattr(_inside, "active", False):
        return call()
    attempts = Attempts(target or "the TPU")
    deadline = attempts.started + timeout_s
    if target == "local" and not worker_env.tpu_present() and not script:
        raise TpuctlError(
            "no TPU on this machine: TPUClusterResolver(tpu='local') needs /dev/accel* or /dev/vfio/N",
            hint="run on a TPU VM, or point TPU_NAME at a TPU's name or grpc://HOST:8470",
            exit_code=FAILED,
        )
    address = grpc_address(target) if target else None
    if address is not None:
        _wait_reachable(address, attempts, deadline)
    if load is not None:
        loading = time.monotonic()
        load()
        spent = time.monotonic() - loading
        attempts.started += spent
        deadline += spent
    done = threading.Event()

    def watch() -> None:
        if done.wait(max(0.0, deadline - time.monotonic())):
            return
        attempts.tries.append(f"TensorFlow did not answer ({hung} hung)")
        _give_up_now(
            f"no TPU answered at {attempts.target!r} within {deadline - attempts.started:.0f}s ({attempts.summary()})",
            "raise --tpu-timeout if the TPU is still being created; check TPU_NAME",
        )

    threading.Thread(target=watch, name="tpuctl-tpu-deadline", daemon=True).start()
    _inside.active = True
    try:
        return call() if script else _with_retries(call, attempts, deadline)
    finally:
        _inside.active = False
        done.set()


def _pause(attempt: int, deadline: float) -> bool:
    """Sleep before the next try; False when the deadline leaves no room for one."""
    pause = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2**attempt)
    if time.monotonic() + pause >= deadline:
        return False
    time.sleep(pause)
    return True


def _wait_reachable(address: tuple[str, int], attempts: Attempts, deadline: float) -> None:
    host, port = address
    attempt = 0
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(5.0, left))):
                return
        except OSError as err:
            attempts.tries.append(f"TCP connect to {host}:{port}: {err.strerror or err.__class__.__name__}")
        if not _pause(attempt, deadline):
            raise TpuctlError(
                f"TPU at grpc://{host}:{port} is not reachable ({attempts.summary()})",
                # The port given, not the usual one: a hint about 8470 sends someone who typed :1 the wrong way.
                hint=f"is the TPU READY, and is port {port} open to this machine?"
                + ("" if port == 8470 else "; TPU nodes serve gRPC on port 8470"),
                exit_code=FAILED,
            )
        attempt += 1


def _with_retries(call: Callable[[], T], attempts: Attempts, deadline: float) -> T:
    attempt = 0
    while True:
        try:
            return call()
        except Exception as err:
            if not _may_pass(err):
                raise
            attempts.tries.append(f"TensorFlow: {one_line(str(getattr(err, 'message', err)), first=True) or type(err).__name__}")
        if not _pause(attempt, deadline):
            raise TpuctlError(
                f"no TPU found at {attempts.target!r} ({attempts.summary()})",
                hint="run on a TPU VM, or set TPU_NAME to the TPU's name or grpc:// address",
                exit_code=FAILED,
            )
        attempt += 1


def _may_pass(err: Exception) -> bool:
    """TensorFlow's "not found" / "unavailable" / "deadline exceeded": a TPU still starting may answer later."""
    tf = sys.modules.get("tensorflow")  # only TensorFlow raises these; never imported here for the asking
    errors = getattr(tf, "errors", None)
    transient = tuple(getattr(errors, name) for name in ("NotFoundError", "UnavailableError", "DeadlineExceededError") if hasattr(errors, name))
    return bool(transient) and isinstance(err, transient)


def _give_up_now(message: str, hint: str) -> None:
    """Leave while a TensorFlow thread is stuck: normal exit would wait for it (or for TF's atexit)."""
    print(f"tpuctl: error: {message} ({hint})", file=sys.stderr, flush=True)
    os._exit(FAILED)


def install_guards() -> None:
    """Put tpuctl's deadline on the TPU connections the script makes, once TensorFlow loads (not before).

    Wrapped where TensorFlow defines them, as each module finishes loading and
    before its public API modules bind them, so every name a script may call
    them by (tf.config, tf.compat.v1, TPUClusterResolver.connect, TPUStrategy's
    own initialisation) goes through the guard.
    """
    from tpuctl.runtime import after_import

    after_import.when_imported("tensorflow.python.eager.remote", _guard_remote)
    after_import.when_imported("tensorflow.python.tpu.tpu_strategy_util", _guard_initialise)


def _guard_remote(module: Any) -> None:
    original = getattr(module, "connect_to_cluster", None)
    if callable(original):
        module.connect_to_cluster = _guarded(original, "experimental_connect_to_cluster", tpu_only=True)


def _guard_initialise(module: Any) -> None:
    # TF 2.12+: initialize_tpu_system_impl, called by tf.tpu.experimental.initialize_tpu_system and
    # TPUClusterResolver.connect; before that the exported initialize_tpu_system lived here itself.
    for name in ("initialize_tpu_system_impl", "initialize_tpu_system"):
        original = getattr(module, name, None)
        if callable(original):
            setattr(module, name, _guarded(original, "initialize_tpu_system", tpu_only=False))


def _guarded(original: Callable[..., Any], public: str, *, tpu_only: bool) -> Callable[..., Any]:
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        resolver = args[0] if args else next(iter(kwargs.values()), None)
        if getattr(_inside, "active", False) or (tpu_only and not _is_tpu_resolver(resolver)):
            return original(*args, **kwargs)
        return within_deadline(
            lambda: original(*args, **kwargs), _target_of(resolver), timeout_from_env(), hung=f"the script's {public}", script=True
        )

    return guarded


def _is_tpu_resolver(value: Any) -> bool:
    """A TPUClusterResolver (or a subclass), without importing its module: other resolvers reach no TPU."""
    return any(klass.__name__ == "TPUClusterResolver" for klass in type(value).__mro__)


def _target_of(resolver: Any) -> str | None:
    """The TPU a resolver names (`local`, grpc://..., a TPU's name); None where it does not say."""
    target = getattr(resolver, "_tpu", None) if _is_tpu_resolver(resolver) else None
    if isinstance(target, bytes):
        target = target.decode("utf-8", "replace")
    return target if isinstance(target, str) and target else None

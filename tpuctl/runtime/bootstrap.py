"""`python -m tpuctl.runtime SCRIPT [ARGS...]`: how every tpuctl worker starts.

Order matters: adopt the launcher's control channel (so the worker dies with
its launcher), choose Keras (before TensorFlow is imported), free the reserved
port, build the strategy, say "ready", then run the script as `python SCRIPT`
would, optionally inside the strategy's scope.

A script that builds its own strategy, or runs in graph mode (Estimator),
is read first (tpuctl/runtime/script_scan.py, without running it): then
tpuctl builds none and enters no scope, and says "ready" once the script's
own strategy is constructed (tpuctl/runtime/deferred.py).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import signal
import sys
import threading

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs.errors import USAGE, TpuctlError
from tpuctl.safety import reaper

# typing.TYPE_CHECKING without importing typing, socket or worker_env: each worker
# pays for every import before its script starts (PEP 781 describes the idiom).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tpuctl.runtime.script_scan import Shape
    from tpuctl.runtime.worker_env import WorkerEnv

TF_KERAS_NOTE = (
    "multi-worker run: tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1), "
    "because Keras 3 model.fit does not work under MultiWorkerMirroredStrategy"
)
PS_TF_KERAS_NOTE = (
    "parameter-server run: tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1), "
    "because Keras 3 model.fit does not support ParameterServerStrategy"
)
OWN_PS_TF_KERAS_NOTE = (
    "tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1): the script builds a ParameterServerStrategy, "
    "whose model.fit and legacy optimizers Keras 3 does not support"
)


def say(message: str) -> None:
    print(f"tpuctl: {message}", file=sys.stderr, flush=True)


def adopt_control_channel() -> tuple[int | None, int | None]:
    """Watch the launcher: when its end of the channel (a socket) closes, kill everything this worker started.
    Returns the channel, and the pipe the launcher's `tpuctl profile` requests come through (None, None: no launcher).

    Where it can (Linux), this process forks: the parent stays behind as the
    worker's reaper (tpuctl/safety/reaper.py), which kills every descendant, also those
    in sessions of their own, when the channel closes or the worker's main
    process ends, even while the worker holds the GIL. The reaper alone reads the
    channel, and hands profile requests on through the pipe. Elsewhere a thread kills
    this worker's process group when the channel closes, and hands them on itself.
    """
    raw = os.environ.pop(contract.CONTROL_FD, None)
    if raw is None:
        return None, None
    channel = int(raw)
    os.set_inheritable(channel, False)
    # The reaper must not keep the held ports: TensorFlow binds them in the worker once these close.
    held = [int(fd) for fd in (os.environ.get(contract.RESERVED_FD), os.environ.get(contract.PROFILER_FD)) if fd]
    relay = os.pipe()
    from tpuctl.safety import stack_dump
    if reaper.guard(channel, drop=held, stacks=stack_dump, relay=relay):
        return channel, relay[0]

    def watch() -> None:
        pending = b""
        try:
            while chunk := os.read(channel, 256):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.startswith(b"profile "):
                        reaper.hand_on(relay[1], line[8:].strip())
        except OSError:
            pass
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="tpuctl-launcher-watch", daemon=True).start()
    return channel, relay[0]


def release_reserved_port() -> None:
    fd = os.environ.pop(contract.RESERVED_FD, None)
    if fd is not None:
        os.close(int(fd))


def choose_keras(env: WorkerEnv, kind: str, own: Shape | None = None, script: str | None = None) -> None:
    """Make tf.keras mean tf-keras where Keras 3 would break, before TensorFlow loads.

    Under --keras auto: for multi-worker and parameter-server runs, those the
    script's own ParameterServerStrategy makes one (its in-process cluster as
    TensorFlow's tutorial builds it), and scripts written for tf-keras
    (script_scan.keras2_only), on every kind of run alike, so that a rehearsal
    decides as the TPU run will. Only TensorFlow 2.16 and later have Keras 3 as
    tf.keras; the version is read from the workers' own interpreter
    (tpuctl/runtime/tf_version.py), without importing TensorFlow. Older
    TensorFlow keeps its own Keras 2: nothing to do.
    """
    if "TF_USE_LEGACY_KERAS" in os.environ:
        return
    if own is not None and own.strategy == "ParameterServerStrategy":
        kind = contract.PARAMETER_SERVER
    elif own is not None and own.strategy == "MultiWorkerMirroredStrategy" and env.num_workers > 1:
        kind = contract.MULTI_WORKER  # --strategy none: the script's own cluster all the same
    multi = kind in (contract.MULTI_WORKER, contract.PARAMETER_SERVER)
    written: tuple[str, int] | None = None
    if env.keras == "auto" and not multi:
        if script is None:
            return
        from tpuctl.runtime import script_scan

        written = script_scan.keras2_only(script)
        if written is None:
            return
    from tpuctl.runtime import tf_version

    package, version = tf_version.find()
    if package is None:
        raise no_tensorflow()
    if not tf_version.keras_3(version):
        if env.keras != "auto" and env.is_chief:
            say(f"--keras {env.keras} changes nothing here: tf.keras in {tf_version.shown(version)} is Keras 2 (Keras 3 came with 2.16)")
        return
    if env.keras == "keras3":
        return
    where = "ParameterServerStrategy" if kind == contract.PARAMETER_SERVER else "MultiWorkerMirroredStrategy"
    pin = f"tf-keras=={version[0]}.{version[1]}.*" if version else "tf-keras matching your TensorFlow version"
    if importlib.util.find_spec("tf_keras") is None:
        if env.keras == "tf-keras":
            raise TpuctlError("tf-keras is not installed (--keras tf-keras)", hint=f"pip install {pin} into the workers' environment")
        if written is not None:
            if env.is_chief:  # Keras 3 it stays: the script then fails as `python SCRIPT` would, and this says why
                say(f"the script {written[0]} (line {written[1]}): it needs tf-keras; pip install {pin} into the workers' environment")
            return
        raise TpuctlError(
            f"tf-keras is not installed, and Keras 3 (tf.keras in {tf_version.shown(version)}) model.fit does not work under {where}",
            hint=f"pip install {pin} into the workers' environment, "
            "or pass --keras keras3 if the script uses a custom training loop",
        )
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    if env.is_chief and env.keras == "auto":
        if written is not None:
            say(f"tf.keras is tf-keras here (TF_USE_LEGACY_KERAS=1): the script {written[0]} (line {written[1]})")
        elif own is not None and own.strategy == "ParameterServerStrategy":
            say(f"{OWN_PS_TF_KERAS_NOTE} (the script {own.describe()})")
        else:
            say(PS_TF_KERAS_NOTE if kind == contract.PARAMETER_SERVER else TF_KERAS_NOTE)


def no_tensorflow() -> TpuctlError:
    return TpuctlError(
        f"TensorFlow is not installed for {sys.executable}",
        hint="install tensorflow (or tensorflow-cpu) there, or pass --python an interpreter that has it",
    )


def require_tensorflow() -> None:
    """Every strategy but `none` has the worker import TensorFlow before the script runs (the strategy tpuctl builds,
    or what it watches of the script's own): without it the worker would end in that import, with a traceback of
    tpuctl's own. The launcher checks this first (tpuctl/launch/preflight.py) unless told --no-preflight."""
    if importlib.util.find_spec("tensorflow") is None:
        raise no_tensorflow()


def script_builds_strategy(env: WorkerEnv, kind: str, script: str) -> Shape | None:
    """The script's shape where the script, not tpuctl, builds the strategy; None where tpuctl does.

    A rehearsal always builds its own stand-in TPUStrategy (it is what the
    script's constructor returns). Otherwise --strategy-builder decides, and
    `auto` reads the script's source.
    """
    from tpuctl.runtime import worker_env

    if kind == worker_env.REHEARSE:
        return None
    builder = contract.strategy_builder(os.environ)
    if builder == "tpuctl":
        return None
    from tpuctl.runtime import script_scan

    shape = script_scan.scan_file(script)
    if builder == "script":
        return shape
    # `try: TPUStrategy(TPUClusterResolver()) except ValueError: get_strategy()` is how Colab-era scripts
    # run anywhere: on several workers without a TPU its TPUStrategy never gets built, so tpuctl's strategy must
    # be there to fall back to, or each worker would train alone. (One worker falls back to the default strategy,
    # which is all tpuctl would build there.)
    tpu_fallback = shape.strategy == "TPUStrategy" and kind not in ("tpu", "auto") and shape.graph_mode is None and not shape.estimator
    return shape if shape.own and not tpu_fallback else None


def _choose_keras_alone(script: str) -> None:
    """--strategy none builds nothing, yet --keras auto still chooses tf.keras for the script it is."""
    from tpuctl.runtime import script_scan, worker_env

    choose_keras(worker_env.current(), "none", script_scan.scan_file(script), script)


def _note_in_process_cluster(env: WorkerEnv, script: str) -> None:
    """A script that starts its own servers in its own process trains on those: say that tpuctl's are idle."""
    from tpuctl.runtime import script_scan

    line = script_scan.in_process_cluster(script) if env.is_chief else None
    if line is not None:
        say(
            f"{env.task.name}: the script builds its own in-process cluster (line {line}): it does not use the workers "
            "tpuctl started or their TF_CONFIG; run it as one process: --workers 1 --strategy none"
        )


def run_script(script: str, args: list[str]) -> None:
    """Run the script as `python SCRIPT ARGS...` would: argv intact, its directory first on sys.path."""
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def _build(env: WorkerEnv, kind: str) -> Any:
    from tpuctl import runtime

    tpu = None
    if kind == "tpu" and env.simulate_devices <= 1:
        from tpuctl.runtime import tpu_connect

        # Before TensorFlow loads: `local` without chips or an address nobody listens on fails in a moment,
        # not after seconds of import in every worker; only the connection itself imports TensorFlow.
        tpu = tpu_connect.connect(tpu_connect.target_from_env(), tpu_connect.timeout_from_env())
    from tpuctl.runtime import strategies

    if env.simulate_devices > 1:
        strategies.simulate_devices(env.simulate_devices)
    built = strategies.build(kind, env, tpu)
    runtime.adopt(built)
    rehearsing = f" (rehearsal of {env.rehearse} on this machine's CPU)" if env.rehearse else ""
    say(f"{env.task.name}: {strategies.describe(built)}{rehearsing}")
    return built


def _serve(env: WorkerEnv, channel: int | None) -> None:
    """A parameter-server worker or ps: serve until the launcher stops it once the chief is done."""
    from tpuctl.runtime import strategies

    server = strategies.serve(env)
    say(f"{env.task.name}: serving for ParameterServerStrategy (the chief runs the script)")
    if channel is not None:
        os.write(channel, b"ready\n")
    server.join()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m tpuctl.runtime SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(USAGE)
    script, script_args = args[0], args[1:]
    from tpuctl.runtime import after_import

    after_import.frozen_after("tensorflow")  # whoever imports it: tpuctl's strategy or the script
    channel, requests = adopt_control_channel()
    from tpuctl.runtime.timeline import profiler

    profiler.install_server(os.environ)  # once TensorFlow loads
    steps = profiler.steps_from(os.environ, on_demand=requests is not None)
    if steps is not None and requests is not None:
        from tpuctl.runtime.profile_capture import requests as profile_requests

        profile_requests.listen(requests, steps, channel)
    timeline = channel is not None and contract.timeline(os.environ)
    if timeline or steps is not None:
        from tpuctl.runtime.timeline import channel as timeline_channel
        from tpuctl.runtime.timeline import hooks as timeline_hooks

        # Steps and checkpoints, once Keras and TF load; profiling's steps too.
        timeline_hooks.install(timeline_channel.Channel(channel) if timeline and channel is not None else None, steps)
    from tpuctl.runtime import script_frames

    script_frames.name_the_script_in_deprecations()
    if _framework() == contract.JAX:
        _run_jax(channel, script, script_args)
        return
    # --strategy none: nothing to build, so the script starts with no more than this module imported.
    plain = contract.strategy(os.environ) == "none"
    own: Shape | None = None
    try:
        if not os.path.isfile(script):
            raise TpuctlError(f"script not found: {script}")
        if plain:
            release_reserved_port()
            _choose_keras_alone(script)
        else:
            require_tensorflow()
            from tpuctl.runtime import worker_env

            env = worker_env.current()
            kind = env.strategy_kind()
            if env.is_server:
                release_reserved_port()
                _serve(env, channel)
                return
            own = script_builds_strategy(env, kind, script)
            _note_in_process_cluster(env, script)
            choose_keras(env, kind, own, script)
            from tpuctl.runtime import keras3_replicas

            keras3_replicas.watch(say if env.is_chief else None)  # Keras 3 on several replicas in one process
            release_reserved_port()
            if kind != worker_env.REHEARSE:
                from tpuctl.runtime import tpu_connect

                tpu_connect.install_guards()  # the script's own TPU connections get tpuctl's deadline
            if own is None:
                built = _build(env, kind)
    except TpuctlError as err:
        say(f"error: {err}")
        sys.exit(err.exit_code)
    try:
        if own is not None:
            _run_own_strategy(own, env, channel, script, script_args)
            return
        if channel is not None:
            os.write(channel, b"ready\n")
        if plain:
            run_script(script, script_args)
            return
        _run_in_strategy(built, env, script, script_args)
    except TpuctlError as err:  # from tpuctl inside the script: a TPU deadline, tpuctl.runtime.strategy()
        say(f"error: {err}")
        sys.exit(err.exit_code)
    except Exception as err:  # noqa: BLE001 - the script's own error, told as `python SCRIPT` would tell it
        _script_failed(err)


def _framework() -> str:
    try:
        return contract.framework(os.environ)
    except TpuctlError as err:
        say(f"error: {err}")
        sys.exit(err.exit_code)


def _run_jax(channel: int | None, script: str, script_args: list[str]) -> None:
    """Keras 3 on JAX, or plain JAX: no strategy, no TensorFlow; the script told its cluster (tpuctl/runtime/jax_run.py)."""
    from tpuctl.runtime import jax_run

    try:
        if not os.path.isfile(script):
            raise TpuctlError(f"script not found: {script}")
        release_reserved_port()  # process 0's is the coordinator's port: JAX binds it
        jax_run.run(channel, script, script_args, run_script, say)
    except TpuctlError as err:
        say(f"error: {err}")
        jax_run.leave(err.exit_code)
    except SystemExit as leaving:  # the script's own sys.exit(N), or tpuctl's: a failure must not wait at JAX's barrier
        jax_run.leave(leaving.code)
    except Exception as err:  # noqa: BLE001 - the script's own error, told as `python SCRIPT` would tell it
        try:
            _script_failed(err)
        except SystemExit as leaving:
            jax_run.leave(leaving.code)


NO_TPU = "no TPU here ({}): try --rehearse v2-8 (a rehearsal on this machine's CPU) or --tpu NAME"
NO_TF_CONFIG = (
    "one worker runs without TF_CONFIG, as `python SCRIPT` does; "
    "for a script that reads it, pass --strategy multi-worker-mirrored (or more --workers)"
)
_NO_TPU_SIGNS = ("TPUs not found in the cluster", "Please provide a TPU Name")


def _script_failed(err: Exception) -> None:
    """Exit 1 as Python would, with the traceback from the script's frame on; a TPU script run
    where there is no TPU gets one line instead of TensorFlow's two chained tracebacks."""
    import traceback

    from tpuctl.runtime import script_frames, worker_env

    chain: list[BaseException] = [err]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) is not None and inner not in chain:
        chain.append(inner)
    ours = next((e for e in chain if isinstance(e, TpuctlError)), None)
    if ours is not None:  # tpuctl's own stop inside a tf.function trace, which autograph re-raises as a StagingError
        say(f"error: {ours}")
        sys.exit(ours.exit_code)
    sign = next((s for s in _NO_TPU_SIGNS for e in chain if s in str(e)), None)
    if sign is not None and not worker_env.tpu_present():
        say(f"error: {NO_TPU.format(sign)}")
    else:
        traceback.print_exception(type(err), err, script_frames.from_the_script(err.__traceback__))
        if "TF_CONFIG" not in os.environ and any(isinstance(e, KeyError) and e.args == ("TF_CONFIG",) for e in chain):
            say(NO_TF_CONFIG)
    sys.exit(1)


def _run_own_strategy(shape: Shape, env: WorkerEnv, channel: int | None, script: str, script_args: list[str]) -> None:
    """The script builds its strategy: tpuctl builds none, enters no scope, and says "ready" once the script's is built."""
    from tpuctl.runtime import deferred

    ready = deferred.Ready(channel)
    if env.is_chief:
        why = f"the script {shape.describe()}" if shape.own else "--strategy-builder script"
        say(f"{env.task.name}: {why}: tpuctl builds no strategy and enters no scope; the script's own runs as written")
        ignored = [flag for flag, used in (("--communication", env.communication != "auto"), ("--devices", bool(env.devices))) if used]
        if ignored:
            say(f"{', '.join(ignored)} not applied: the script's own strategy takes its own arguments")
    deferred.watch(env, ready, say)
    if shape.own and not shape.builds_strategy:
        ready()  # graph mode / Estimator with no strategy construction in sight: nothing to wait for
    run_script(script, script_args)


def _run_in_strategy(built: Any, env: WorkerEnv, script: str, script_args: list[str]) -> None:
    import tensorflow as tf

    from tpuctl.runtime import sharing

    said: set[str] = set()

    def note_once(message: str) -> None:
        if message not in said:
            said.add(message)
            say(message)

    if built is tf.distribute.get_strategy():
        run_script(script, script_args)
        return
    scope = sharing.InjectedScope(built) if env.scope else None
    sharing.share(built, scope, note_once, name=f"rehearsal of {env.rehearse}" if env.rehearse else None)
    if scope is None:
        run_script(script, script_args)
        return
    scope.enter()
    try:
        run_script(script, script_args)
    finally:
        scope.leave()

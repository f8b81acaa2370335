"""The checks of the workers' interpreter: Python, the TensorFlow distribution, its import, Keras, TensorBoard, JAX.

Each from a failure TensorFlow users really hit (docs/doctor.md names the issue behind each).
"""

from __future__ import annotations

from tpuctl.doctor import versions
from tpuctl.doctor.facts import Dist, Facts, number, text
from tpuctl.doctor.verdict import Check, Context, ok, pin, tf_dist, tf_minor, tpu_chips
from tpuctl.endings import signal_name
from tpuctl.inputs.errors import one_line
from tpuctl.tpu import software as sw

SLOW_IMPORT_S = 30.0


def check_python(facts: Facts, _: Context) -> Check:
    """TensorFlow has wheels for a few Pythons only; a newer Python finds none (pip: "no matching distribution")."""
    if facts.python is None:
        return Check("python", "fail", "the interpreter did not say its version", "check the interpreter given with --python")
    mine = facts.python[:2]
    shown = f"Python {'.'.join(map(str, facts.python))} ({one_line(facts.executable, 120)})"
    tf = tf_minor(facts)
    if tf is not None and tf in sw.PYTHONS_FOR_TENSORFLOW:
        low, high = sw.PYTHONS_FOR_TENSORFLOW[tf]
        if not low <= mine <= high:
            return Check(
                "python",
                "warn",
                f"{shown}: TensorFlow {tf[0]}.{tf[1]} is built for Python {low[0]}.{low[1]}-{high[0]}.{high[1]}",
                f"use a Python {high[0]}.{high[1]} environment for the workers",
            )
        return ok("python", shown)
    supported = [r for r in sw.PYTHONS_FOR_TENSORFLOW.values() if r[0] <= mine <= r[1]]
    if not supported:
        newest = sw.PYTHONS_FOR_TENSORFLOW[sw.NEWEST_TENSORFLOW][1]
        return Check(
            "python",
            "fail",
            f"{shown}: no TensorFlow 2.15-{sw.NEWEST_TENSORFLOW[1]} release has wheels for it",
            f"create the workers' environment with Python {newest[0]}.{newest[1]}: python{newest[0]}.{newest[1]} -m venv ENV",
        )
    return ok("python", shown)


def check_tensorflow(facts: Facts, _: Context) -> Check:
    """Which TensorFlow distribution: none, one, or several that overwrite each other's files (tf-keras pulls
    `tensorflow` in beside tensorflow-cpu; a TPU image's tensorflow-tpu beside a pip-installed tensorflow)."""
    dists = facts.tensorflow_dists
    if not dists:
        if facts.tensorflow_package:
            return Check(
                "tensorflow",
                "warn",
                f"a tensorflow package without pip metadata at {one_line(facts.tensorflow_package, 120)}",
                "install TensorFlow with pip, so its version can be known",
            )
        return Check("tensorflow", "fail", "TensorFlow is not installed", "pip install tensorflow (tensorflow-tpu on a TPU VM)")
    places: dict[str, list[Dist]] = {}
    for dist in dists:
        places.setdefault(dist.location, []).append(dist)
    clash = next((found for found in places.values() if len({d.name for d in found}) > 1), None)
    if clash:
        names = ", ".join(d.shown for d in clash)
        keep = next((d for d in clash if d.name == "tensorflow-tpu"), clash[0])
        drop = " ".join(d.name for d in clash if d is not keep)
        return Check(
            "tensorflow",
            "fail",
            f"{names} installed together: they overwrite one another's files",
            f"pip uninstall -y {drop} && pip install --force-reinstall '{keep.name}=={keep.version}'",
        )
    return ok("tensorflow", ", ".join(d.shown for d in dists))


def check_import(facts: Facts, _: Context) -> Check:
    """`import tensorflow` in a child with a deadline: it segfaults on some TPU VMs (tensorflow#82208), hangs
    where libtpu waits for a TPU another process holds, or fails on a NumPy its build predates."""
    result = facts.tf_import
    status = text(result, "status")
    seconds = number(result, "seconds") or 0.0
    stage = text(result, "stage", 40) or "import"
    message = one_line(text(result, "message") or "", 200)
    if status == "absent":
        return Check("import", "fail", "nothing to import: TensorFlow is not installed", "pip install tensorflow (tensorflow-tpu on a TPU VM)")
    if status == "skipped":
        return ok("import", "not tried (--no-import)")
    if status == "ok":
        found = f"TensorFlow {one_line(text(result, 'version', 40) or '?', 40)} imported in {seconds:.1f}s"
        if seconds > SLOW_IMPORT_S:
            return Check("import", "warn", f"{found}: every worker pays this at start", "look for a slow file system under site-packages (NFS, gcsfuse)")
        return ok("import", found)
    if status == "crash":
        signal_number = int(number(result, "signal") or 0)  # a garbled answer's 0 or 99 reads as "signal 0", "signal 99"
        return Check(
            "import",
            "fail",
            f"killed by {signal_name(signal_number)} during {stage} after {seconds:.1f}s",
            "reinstall TensorFlow: pip install --force-reinstall tensorflow-tpu (or tensorflow) matching the runtime image",
        )
    if status == "hang":
        return Check(
            "import",
            "fail",
            f"no answer within {seconds:.0f}s (during {stage})",
            "a TPU held by another process makes libtpu wait: see tpu-busy; else run python -c 'import tensorflow' to watch it",
        )
    return Check(
        "import",
        "fail",
        f"failed during {stage}: {message or 'no message'}",
        "pip install --force-reinstall the TensorFlow distribution shown above (and its NumPy pin)",
    )


def check_keras(facts: Facts, _: Context) -> Check:
    """Keras 3 is tf.keras from TensorFlow 2.16 and cannot fit under MultiWorkerMirroredStrategy (keras#20585) nor
    ParameterServerStrategy; tf-keras must then match TensorFlow's minor version (keras#19448, #19246)."""
    tf = tf_minor(facts)
    keras, legacy = facts.dist("keras"), facts.dist("tf-keras")
    use_legacy = facts.env.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true")
    error = text(facts.tf_import, "keras_error")
    if tf is None:
        return ok("keras", "no TensorFlow: nothing to check")
    if error:
        return Check(
            "keras",
            "fail",
            f"tf.keras fails to import: {one_line(error, 160)}",
            f"pip install {pin('tf-keras', tf)}" if use_legacy else "pip install --force-reinstall keras",
        )
    if tf < (2, 16):
        major = versions.release(keras.version) if keras else None
        if major and major[0] >= 3:
            return Check(
                "keras",
                "fail",
                f"{keras.shown if keras else ''} beside TensorFlow {tf[0]}.{tf[1]}, whose tf.keras needs Keras 2",
                f"pip install {pin('keras', tf)}",
            )
        return ok("keras", f"tf.keras is Keras 2 (TensorFlow {tf[0]}.{tf[1]})")
    if legacy is not None and versions.minor(legacy.version) != tf:
        return Check(
            "keras",
            "fail",
            f"{legacy.shown} beside TensorFlow {tf[0]}.{tf[1]}: tf-keras must match TensorFlow's version",
            f"pip install {pin('tf-keras', tf)}",
        )
    if use_legacy and legacy is None:
        return Check("keras", "fail", "TF_USE_LEGACY_KERAS=1 but tf-keras is not installed: tf.keras cannot import", f"pip install {pin('tf-keras', tf)}")
    if legacy is None:
        return Check(
            "keras",
            "warn",
            f"Keras 3 only ({keras.shown if keras else 'keras'}): multi-worker and parameter-server model.fit need tf-keras",
            f"pip install {pin('tf-keras', tf)}",
        )
    return ok("keras", f"{keras.shown if keras else 'Keras 3'} as tf.keras; {legacy.shown} for multi-worker fit (tpuctl picks)")


def check_tensorboard(facts: Facts, _: Context) -> Check:
    """TensorFlow 2.21 no longer installs TensorBoard, and without it tf.summary and Keras' TensorBoard callback
    raise TBNotInstalledError; `tpuctl tail` and `report` read the summaries it writes."""
    tf = tf_minor(facts)
    board = facts.dist("tensorboard") or facts.dist("tb-nightly")
    if board is None:
        return Check(
            "tensorboard",
            "warn" if tf else "ok",
            "not installed: tf.summary and Keras' TensorBoard callback fail without it",
            f"pip install {pin('tensorboard', tf)}" if tf else "",
        )
    if tf and versions.minor(board.version) != tf and board.name == "tensorboard":
        return Check("tensorboard", "warn", f"{board.shown} beside TensorFlow {tf[0]}.{tf[1]}", f"pip install {pin('tensorboard', tf)}")
    return ok("tensorboard", board.shown)


def _takes_tpu(tf: Dist) -> bool:
    """A TensorFlow that can start on the TPU: a TPU build, or a plain one as old as the TPU builds (the TPU VM images'
    `tensorflow` was built for the TPU). A -cpu build has no TPU support, and a plain TensorFlow past the last
    tensorflow-tpu has none either (check_tpu_build's rule; TensorFlow 2.21's wheel carries no libtpu loader)."""
    if tf.name in ("tensorflow-tpu", "tf-nightly-tpu"):
        return True
    minor = versions.minor(tf.version)
    return not tf.name.endswith("-cpu") and (minor is None or minor <= sw.NEWEST_TENSORFLOW_TPU)


def check_jax(facts: Facts, _: Context) -> Check:
    """JAX and a TensorFlow with TPU support each take the whole TPU when they start on it, and libtpu lets one process
    hold it (tensorflow#61293; Colab's maintainers on googlecolab/colabtools#4567: "the libraries hold exclusive locks
    on the TPU", TensorFlow even for tf.data alone): the second to open it fails, JAX with "The TPU is already in use by
    process with pid N" and a fall back to the CPU (jax-ml/jax#22070). Installed together they do no harm until one
    process, or two on one host, starts both on the TPU; tensorflow-cpu has no TPU support and takes nothing."""
    jax = facts.dist("jax") or facts.dist("jaxlib")
    if jax is None:
        return ok("jax", "not installed")
    if not tpu_chips(facts):
        return ok("jax", f"{jax.shown} installed (no TPU here for it to take)")
    if facts.env.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return ok("jax", f"{jax.shown} kept off the TPU (JAX_PLATFORMS=cpu)")
    tf = tf_dist(facts)
    if tf is None or not _takes_tpu(tf):
        return ok("jax", f"{jax.shown} with no TensorFlow beside it that takes the TPU" + (f" ({tf.shown} has no TPU support)" if tf else ""))
    return Check(
        "jax",
        "warn",
        f"{jax.shown} beside {tf.shown}: both take the TPU, and the second to start on it fails (JAX: 'The TPU is already in use', then the CPU)",
        f"keep one on the TPU: for a JAX run, pip uninstall -y {tf.name} && pip install tensorflow-cpu (tf.data needs no TPU); "
        "for a TensorFlow run, export JAX_PLATFORMS=cpu",
    )

"""The pair a TPU launch says before anything is created: this machine's TensorFlow and Keras (what the script was
tried with) beside the runtime image's, and one line for each difference that matters.

Only what can be shown is said: the image's TensorFlow is the version its name carries (tpuctl/tpu/software.py reads
tpu-vm-tf-X.Y.Z); the Keras a TensorFlow release brings is the release's (Keras 3 from 2.16); what the script needs is
what its own source imports, read with `ast` (never run). Nothing here refuses a launch: each line says what may fail
and what to do, because none of these is certain to fail (a --requirements or --setup may bring what is missing).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tpuctl.cluster import worker_contract as contract
from tpuctl.launch.job import Job
from tpuctl.launch.preflight import leaving_tensorflow
from tpuctl.launch.tfpair.here import Installed, this_interpreter
from tpuctl.tpu import software

# A script's source past this is not read: its imports are at the top anyway, and a launch never waits on a huge file.
MAX_SCRIPT_BYTES = 4 << 20
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
# What a script's own imports need of the image's TensorFlow, where a source says it: the module, the TensorFlow
# release range it needs as (first, last) (None: open), and why.
# - keras_hub: keras-team/keras-hub's pyproject.toml requires keras>=3 (every release: 3.5, now 3.15), and TensorFlow's
#   Keras is 3 from 2.16 (software.KERAS_3_FROM); on 2.15 and older its `keras` is Keras 2.
# - keras.ops: a Keras 3 module (keras.io/api/ops); Keras 2's `keras` package has none.
# - tf.estimator / tensorflow_estimator: removed in TensorFlow 2.16 (its release notes: "tf.estimator ... removed";
#   tensorflow-estimator's last release is 2.15).
NEEDS: dict[str, tuple[tuple[int, int] | None, tuple[int, int] | None, str]] = {
    "keras_hub": (software.KERAS_3_FROM, None, "keras-hub needs Keras 3 (it requires keras>=3), which TensorFlow brings from 2.16"),
    "keras.ops": (software.KERAS_3_FROM, None, "keras.ops is Keras 3's, which TensorFlow brings from 2.16"),
    "tf.estimator": (None, (2, 15), "TensorFlow 2.16 removed tf.estimator (tensorflow-estimator ends at 2.15)"),
}
_TF_KERAS_LINE = re.compile(r"\s*tf[-_.]keras\b", re.IGNORECASE)


@dataclass(frozen=True)
class Image:
    """The runtime image the TPU VM runs, and how it came to be that one (in words)."""

    name: str
    why: str

    @property
    def tensorflow(self) -> tuple[int, int, int] | None:
        read = software.read_image(self.name)
        return read.tensorflow if read is not None else None


def imported(path: str) -> frozenset[str]:
    """The modules the script's own source imports (`from keras import ops` gives keras and keras.ops), and
    "tf.estimator" where it reaches it through TensorFlow's name or alias. A file that cannot be read or parsed
    imports nothing that can be shown."""
    try:
        with open(path, "rb") as stream:
            tree = ast.parse(stream.read(MAX_SCRIPT_BYTES))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return frozenset()
    modules: set[str] = set()
    tensorflow_names = {"tensorflow"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.add(alias.name)
                if alias.name == "tensorflow":
                    tensorflow_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute) and node.attr == "estimator":
            chain = _dotted(node.value)
            if chain is not None and chain.split(".")[0] in tensorflow_names:
                modules.add("tf.estimator")
    if any(_within(name, "tensorflow_estimator") or _within(name, "tensorflow.estimator") for name in modules):
        modules.add("tf.estimator")
    return frozenset(modules)


def _within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def script_needs(modules: frozenset[str]) -> list[str]:
    """The NEEDS keys among a script's imports."""
    return [need for need in NEEDS if any(_within(name, need) for name in modules)]


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _short(version: tuple[int, ...]) -> str:
    return f"{version[0]}.{version[1]}"


def lines(here: Installed, image: Image, script: str, env: Mapping[str, str], requirements: str | None, rehearse_as: str) -> list[str]:
    """The pair, then one line per difference that matters; `env` the workers' extra environment (--env),
    `rehearse_as` the accelerator type a rehearsal of this launch names."""
    theirs = image.tensorflow
    there = f"TensorFlow {'.'.join(map(str, theirs))} with Keras {software.keras_major(theirs)}" if theirs else "a TensorFlow its name does not say"
    said = [f"TensorFlow: here {here.describe()} ({here.python}: what the script was tried with); on the TPU {there} ({image.name}: {image.why})"]
    mine = here.tensorflow_version
    if theirs is None or mine is None:
        return said
    name = os.path.basename(script)
    if mine[:2] != theirs[:2]:
        said.append(
            f"TensorFlow differs: {_short(mine)} here, {_short(theirs)} on the TPU: an API the script uses that {_short(theirs)} lacks fails there; "
            f"`--rehearse {rehearse_as} --runtime {image.name}` tries the script under {_short(theirs)} on this machine first"
        )
    if software.keras_major(mine) != software.keras_major(theirs):
        said.append(
            f"Keras differs: TensorFlow {_short(mine)} here brings Keras {software.keras_major(mine)} as tf.keras, TensorFlow {_short(theirs)} "
            f"on the TPU Keras {software.keras_major(theirs)}: code written for one may fail on the other"
        )
    modules = imported(script)
    legacy = env.get(LEGACY_KERAS, os.environ.get(LEGACY_KERAS, "")) not in ("", "0", "false", "False")
    uses = "imports tf_keras" if any(_within(n, "tf_keras") for n in modules) else f"runs with {LEGACY_KERAS}" if legacy else None
    if here.tf_keras and uses and software.keras_major(theirs) == 3 and not _lists_tf_keras(requirements):
        said.append(
            f"tf-keras {here.tf_keras} is installed here, and TensorFlow {_short(theirs)} on the TPU does not bring it: {name} {uses}; "
            f"add tf-keras~={_short(theirs)}.0 to --requirements"
        )
    for need in script_needs(modules):
        first, last, why = NEEDS[need]
        if (first is not None and theirs[:2] < first) or (last is not None and theirs[:2] > last):
            said.append(f"{name} uses {need}, and the TPU's TensorFlow is {_short(theirs)}: {why}")
    return said


def _lists_tf_keras(requirements: str | None) -> bool:
    """Whether a requirements file names tf-keras on a line of its own (its project name first, any spelling)."""
    if not requirements:
        return False
    try:
        text = Path(requirements).read_text(encoding="utf-8", errors="replace")[:MAX_SCRIPT_BYTES]
    except OSError:
        return False
    return any(_TF_KERAS_LINE.match(line) for line in text.splitlines())


def for_launch(job: Job, found: tuple[Image, str] | None) -> list[str]:
    """A TPU launch's lines: `found` is its image and accelerator type (None: tpuctl knows no image for the type, and
    the hunt says so). A JAX run's workers never import TensorFlow: the pairing does not apply, its image is said alone;
    a TensorFlow run on a TPU TensorFlow is leaving is told the way to Keras 3 on JAX (preflight.leaving_tensorflow)."""
    if found is None:
        return []
    image, accelerator = found
    if job.framework == contract.JAX:
        said = [f"JAX: on the TPU {image.name} ({image.why}); this machine's TensorFlow is not paired with it: a JAX run's workers never import TensorFlow"]
        if image.name in software.JAX_IMAGES.values() and not job.requirements and not job.setup:
            said.append(f"{image.name} has no JAX (cloud.google.com/tpu/docs/runtimes: install the framework): list jax[tpu] and keras in --requirements FILE")
        return said
    said = lines(this_interpreter(), image, job.script, dict(job.env), job.requirements, accelerator)
    leaving = leaving_tensorflow(job, accelerator)
    return said if leaving is None else [*said, leaving]

"""Which TensorFlow a `--rehearse` runs on, so that its verdict is about the TensorFlow the TPU will run.

- `--runtime IMAGE`, else a runtime-version setting (TPUCTL_RUNTIME_VERSION, tpuctl.toml, the user's file: the image
  `--new-tpu` and `create` use): that image's TensorFlow. Where the rehearsing interpreter (this one, or --python) has
  the same X.Y it runs there; otherwise in a cached environment with the CPU build of that line (envs.py), built before
  the run from --python (default: this Python), or the interpreter TPUCTL_REHEARSE_PYTHON_<X>_<Y> names.
- Neither: this machine's TensorFlow, and the line says which image `--new-tpu ACCELERATOR` would run (the one with
  this TensorFlow, or where none has it the generation's newest) and how to rehearse under that one instead: a build
  of 1.6 GB is never started unasked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import Job
from tpuctl.launch.tfpair import envs
from tpuctl.launch.tfpair.here import Installed, of_interpreter
from tpuctl.settings import cloud as settings
from tpuctl.tpu import software

RUNTIME = "runtime-version"


@dataclass(frozen=True)
class Runtime:
    """What a rehearsal runs on: the worker's interpreter, the image it stands for (None: this machine's TensorFlow, no
    image named), the environment to build first (None: none), and what the dry run and the run say of it."""

    python: str
    image: str | None
    env: envs.Env | None
    lines: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        built = None if self.env is None else {"folder": str(self.env.folder), "pins": list(self.env.pins), "ready": self.env.ready}
        return {"python": self.python, "image": self.image, "environment": built, "said": list(self.lines)}

    def prepare(self, notice: Callable[[str], None]) -> None:
        """Say what the rehearsal runs on, and build its environment where it is not built yet."""
        for line in self.lines:
            notice(line)
        if self.env is not None:
            envs.ensure(self.env, notice)


def image_of(name: str) -> software.Image:
    """A runtime image with TensorFlow, read from its name; anything else is a one-line refusal."""
    image = software.read_image(name)
    if image is None:
        raise TpuctlError(
            f"--runtime {name}: not a TPU VM image with TensorFlow (tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se]): there is no TensorFlow to rehearse under",
            hint="e.g. --runtime tpu-vm-tf-2.15.1-pjrt (https://cloud.google.com/tpu/docs/runtimes)",
        )
    return image


def resolve(job: Job) -> Runtime | None:
    """A rehearsing job's runtime (None for any other launch); its environment is planned, not built."""
    if job.rehearse is None:
        return None
    setting = settings.picked(RUNTIME)
    named = job.runtime or setting.value
    installed = of_interpreter(job.python)
    if named is None:
        return Runtime(job.python, None, None, (_unnamed(job.rehearse, installed),))
    source = "--runtime" if job.runtime else f"runtime-version from {setting.source}"
    if job.runtime is None and software.read_image(named) is None:  # a base image from the setting: nothing to stand for
        return Runtime(job.python, None, None, (f"rehearsing on {installed.describe()} ({job.python}): {named} ({source}) has no TensorFlow to stand for",))
    image = image_of(named)
    line = f"{image.tensorflow[0]}.{image.tensorflow[1]}"
    mine = installed.tensorflow_version
    if mine is not None and mine[:2] == image.tensorflow[:2]:
        return Runtime(job.python, named, None, (f"rehearsing under {named} ({source}) on {installed.describe()} ({job.python}): the same TensorFlow {line}",))
    given = envs.override(image.tensorflow)
    if given is not None:
        variable, python = given
        found = of_interpreter(python).tensorflow_version
        if found is None or found[:2] != image.tensorflow[:2]:
            have = "none" if found is None else ".".join(map(str, found))
            raise TpuctlError(f"{variable}={python} has TensorFlow {have}, not {line}", hint=f"name an interpreter with TensorFlow {line}, or unset {variable}")
        return Runtime(python, named, None, (f"rehearsing under {named}'s TensorFlow {line} ({source}) with {python} ({variable})",))
    env = envs.planned(image.tensorflow, job.python)
    state = "built" if env.ready else "built before the run starts, once"
    lines = [f"rehearsing under {named}'s TensorFlow {line} ({source}) in its environment {env.folder} ({state})"]
    if job.requirements:
        lines.append(f"note: the rehearsal's environment holds TensorFlow {line} and its Keras only: --requirements is not installed into it yet")
    return Runtime(str(env.python), named, env, tuple(lines))


def _unnamed(accelerator: str, installed: Installed) -> str:
    """A rehearsal with no image named runs on this machine's TensorFlow: said beside the image `--new-tpu` would run."""
    mine = installed.tensorflow_version
    here = f"rehearsing on {installed.describe()} ({installed.python})"
    chosen = software.image_for_tensorflow(accelerator, mine) if mine is not None else None
    if chosen is None:
        return here
    if chosen.matched:
        return f"{here}: `--new-tpu {accelerator}` would run {chosen.image}, the same TensorFlow {chosen.tensorflow[0]}.{chosen.tensorflow[1]}"
    theirs = f"{chosen.tensorflow[0]}.{chosen.tensorflow[1]}"
    return (
        f"{here}, which no TPU image has: `--new-tpu {accelerator}` would run {chosen.image} (TensorFlow {theirs}); "
        f"--runtime {chosen.image} rehearses under {theirs} (its environment is built once: about 1.6 GB)"
    )

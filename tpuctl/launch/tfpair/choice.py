"""The runtime image `launch --new-tpu` creates its VM with: the user's where they named one; for a JAX run
(job.framework "jax") the documented JAX image of each type's generation (software.jax_image: no TensorFlow on it, JAX
comes from --requirements); else the documented TensorFlow image of each type's generation that has this machine's
TensorFlow (tpuctl/tpu/software.py's table), and where none has it, the generation's newest; each with why, for the dry
run and the run to say. The laptop/TPU TensorFlow pairing is TensorFlow's: a JAX run's workers never import it.

`tpuctl create` and `init` keep their fixed default (software.tensorflow_image): a VM made for a launch runs the
script this machine tried, a VM made by hand does not know which script it is for.
"""

from __future__ import annotations

from tpuctl.cluster import worker_contract as contract
from tpuctl.launch.tfpair.here import Installed
from tpuctl.launch.tfpair.pair import Image
from tpuctl.settings import cloud as settings
from tpuctl.tpu import software
from tpuctl.tpu.accelerators import shape_of

RUNTIME = "runtime-version"


def given_image(resolved: settings.Settings) -> Image | None:
    """The runtime version a flag, TPUCTL_RUNTIME_VERSION or a file named: the user's choice wins."""
    if not resolved.given(RUNTIME):
        return None
    return Image(resolved.require(RUNTIME), f"runtime-version from {resolved.source(RUNTIME)}, used as given")


def image_for(accelerator_type: str, here: Installed) -> Image | None:
    """The image for one type when the user named none; None where tpuctl knows no image for its generation (the
    hunt says so before any create)."""
    tensorflow = here.tensorflow_version
    if tensorflow is not None:
        chosen = software.image_for_tensorflow(accelerator_type, tensorflow)
        if chosen is not None:
            return Image(chosen.image, f"picked: {chosen.why}")
    default = settings.default_runtime(accelerator_type)
    if default is None:
        return None
    generation = shape_of(accelerator_type).generation
    if software.read_image(default) is None:
        return Image(default, f"{generation} has no TensorFlow image: its base image (TensorFlow comes from pip there)")
    return Image(default, f"tpuctl's default for {generation}: this machine has no TensorFlow to match")


def jax_image_for(accelerator_type: str) -> Image:
    """A JAX run's image for one type; TPU7x and a generation without a row are software.jax_image's one-line errors."""
    image = software.jax_image(accelerator_type)
    generation = shape_of(accelerator_type).generation
    return Image(image, f"the JAX image for {generation}, {software.JAX_IMAGE_SOURCE}: a JAX run takes no TensorFlow image; jax[tpu] comes from --requirements")


def images_for(types: list[str], resolved: settings.Settings, here: Installed, framework: str = contract.TENSORFLOW) -> dict[str, Image]:
    """Each --new-tpu type's image, by type (a type with none is left out; for a JAX run, every type has one or the
    launch is refused)."""
    given = given_image(resolved)
    if given is not None:
        return dict.fromkeys(types, given)
    if framework == contract.JAX:
        return {name: jax_image_for(name) for name in types}
    return {name: image for name in types if (image := image_for(name, here)) is not None}

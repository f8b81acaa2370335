"""The runtime image `launch --new-tpu` creates its VM with: the user's where they named one, else the documented
TensorFlow image of each type's generation that has this machine's TensorFlow (tpuctl/tpu/software.py's table), and
where none has it, the generation's newest; each with why, for the dry run and the run to say.

`tpuctl create` and `init` keep their fixed default (software.tensorflow_image): a VM made for a launch runs the
script this machine tried, a VM made by hand does not know which script it is for.
"""

from __future__ import annotations

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


def images_for(types: list[str], resolved: settings.Settings, here: Installed) -> dict[str, Image]:
    """Each --new-tpu type's image, by type (a type with none is left out)."""
    given = given_image(resolved)
    if given is not None:
        return dict.fromkeys(types, given)
    return {name: image for name in types if (image := image_for(name, here)) is not None}

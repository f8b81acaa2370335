"""The software side of a TPU, beside the hardware table (tpuctl/tpu/accelerators.py): what each chip is on the PCI
bus, which TPU VM runtime image has TensorFlow for it and which one a JAX run takes, which libtpu each tensorflow-tpu
release needs, which Pythons each TensorFlow release has wheels for.

`init`/`create` take their default runtime image from here and `tpuctl doctor` checks machines against the
same rows, so a default never produces an environment doctor fails. Facts are data, each with where it was
read (docs/doctor.md repeats them with the same sources); pure and cheap to import.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.tpu.accelerators import GENERATIONS, shape_of

Verdict = Literal["ok", "warn", "fail"]

GOOGLE_PCI_VENDOR = 0x1AE0


@dataclass(frozen=True)
class Chip:
    """A TPU chip as the PCI bus names it, and how TensorFlow fares on it."""

    device_id: int
    name: str  # as people say it
    generation: str | None  # the accelerator table's name (tpuctl.tpu.accelerators), None where tpuctl cannot create it
    nodes: Literal["accel", "vfio"]  # how a TPU VM exposes it: /dev/accelN (gasket driver) or /dev/vfio/N (vfio-pci)
    tensorflow: Verdict
    why: str = ""
    pjrt_only: bool = False  # TensorFlow reaches it through PJRT only: 2.15 and later (the runtimes page, below)


# Device ids: Google's PCI vendor 0x1ae0 and the ids libtpu and tpu-info (google/cloud-accelerator-diagnostics,
# tpu_info/device.py) match chips by. v2 and v3 share one id.
CHIPS: dict[int, Chip] = {
    chip.device_id: chip
    for chip in (
        Chip(0x0027, "v2/v3", "v2", "accel", "ok"),
        Chip(0x005E, "v4", "v4", "accel", "ok"),
        Chip(0x0062, "v5p", "v5p", "vfio", "ok", pjrt_only=True),
        Chip(0x0063, "v5e", "v5litepod", "vfio", "ok", pjrt_only=True),
        Chip(
            0x006F, "v6e", "v6e", "vfio", "warn",
            "TensorFlow on v6e (Trillium) is reported broken (no tensorflow-tpu release is built for it; Vertex AI "
            "does not offer TensorFlow training there): use v5e or v5p for TensorFlow",
            pjrt_only=True,
        ),
        Chip(
            0x0076, "TPU7x", None, "vfio", "fail",
            "TensorFlow does not support TPU7x (Ironwood) at all: no TensorFlow runtime image, no tensorflow-tpu "
            "build; run TensorFlow on v5e, v5p or v4",
        ),
    )
}  # fmt: skip


# tensorflow-tpu's own metadata (Requires-Dist of its wheels on PyPI, read 2026-11-27): the libtpu each release
# pins. tensorflow-tpu starts at 2.16 (2.15 and older TPU builds came only on the tpu-vm-tf-* images, with
# /lib/libtpu.so) and stops at 2.20.
LIBTPU_FOR_TENSORFLOW_TPU: dict[str, str] = {
    "2.16.1": "libtpu==2.16.0rc0",
    "2.16.2": "libtpu==2.16.0rc0",
    "2.17.0": "libtpu==2.17.0",
    "2.17.1": "libtpu==2.17.1",
    "2.18.0": "libtpu==2.18.0",
    "2.19.1": "libtpu==0.0.10",
    "2.20.0": "libtpu~=0.0.14",
}
NEWEST_TENSORFLOW_TPU = (2, 20)
LIBTPU_INDEX = "https://storage.googleapis.com/libtpu-tf-releases/index.html"

# The Pythons each TensorFlow release has wheels for (Requires-Python and the cpXY tags of its wheels on PyPI;
# tensorflow.org/install/pip "Tested build configurations").
PYTHONS_FOR_TENSORFLOW: dict[tuple[int, int], tuple[tuple[int, int], tuple[int, int]]] = {
    (2, 15): ((3, 9), (3, 11)),
    (2, 16): ((3, 9), (3, 12)),
    (2, 17): ((3, 9), (3, 12)),
    (2, 18): ((3, 9), (3, 12)),
    (2, 19): ((3, 9), (3, 12)),
    (2, 20): ((3, 9), (3, 13)),
    (2, 21): ((3, 10), (3, 13)),
}
NEWEST_TENSORFLOW = (2, 21)


# TPU VM runtime images with TensorFlow (cloud.google.com/tpu/docs/runtimes and /supported-tpu-versions,
# "TensorFlow"): tpu-vm-tf-X.Y.Z[-pod][-{pjrt|se}], -pod for a slice of several hosts; from 2.15 on a device
# API must be named, and v5e, v5p (and v6e) take PJRT only. Newer images add a generation tail
# (tpu-vm-tf-2.18.0-pjrt-v5e-and-v6); the newest version that page lists for every generation is 2.16.1.
DEFAULT_TENSORFLOW_IMAGE = "2.16.1"
TENSORFLOW_IMAGE_GENERATIONS = ("v2", "v3", "v4", "v5litepod", "v5p")
NO_TENSORFLOW_IMAGE = "v2-alpha-tpuv6e"  # v6e: the base image, TensorFlow from pip (and reported broken)
# Version numbers stay short: int() refuses more than 4300 digits, and a name is any text a TPU API or a user gave.
_IMAGE = re.compile(r"tpu-vm-tf-([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,4})(-pod)?(?:-(pjrt|se))?(?:-[a-z0-9-]{1,40})?\Z")
# TensorFlow before 2.15 on v5e/v5p: no image; 2.15 there needs its PJRT plugin named (tensorflow#90807).
PJRT_ENV_2_15 = {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"}


# The TPU VM images with TensorFlow that a source shows, newest first: (TensorFlow version, the generations it is for, the
# tail its name carries). `--new-tpu` picks the row of this machine's TensorFlow (launch/tfpair/choice.py). Sources:
# - the runtimes page above (and supported-tpu-versions before it, read 2026-11-27): 2.16.1, 2.15.1 and 2.15.0 for every
#   generation with TensorFlow ("TPU v6e, v5e, and v5p support TensorFlow 2.15.0 and newer", PJRT there); 2.14.1 back to
#   2.10.1 for v2, v3 and v4 ("TPU v4 and TensorFlow 2.10.1 or newer: follow the instructions for TPU v2 and v3"); 2.10.0
#   back to 2.7.3 for v2 and v3 (v4 had its own -v4 images then, left out); 2.18.0 for v5e with the tail -v5e-and-v6.
# - Google's own samples, run against the live API (GoogleCloudPlatform/python-docs-samples, tpu/): tpu-vm-tf-2.17.0-pjrt
#   on v2-8, a v3 2x2 and v5litepod-1.
# A version no row has for a generation is not guessed: the newest row of that generation is picked, and said so.
_EVERY = TENSORFLOW_IMAGE_GENERATIONS
_V2_TO_V4 = ("v2", "v3", "v4")
TENSORFLOW_IMAGES: tuple[tuple[tuple[int, int, int], tuple[str, ...], str], ...] = (
    ((2, 18, 0), ("v5litepod",), "-v5e-and-v6"),
    ((2, 17, 0), ("v2", "v3", "v5litepod"), ""),
    ((2, 16, 1), _EVERY, ""), ((2, 15, 1), _EVERY, ""), ((2, 15, 0), _EVERY, ""),
    ((2, 14, 1), _V2_TO_V4, ""), ((2, 14, 0), _V2_TO_V4, ""), ((2, 13, 1), _V2_TO_V4, ""), ((2, 13, 0), _V2_TO_V4, ""),
    ((2, 12, 1), _V2_TO_V4, ""), ((2, 12, 0), _V2_TO_V4, ""), ((2, 11, 1), _V2_TO_V4, ""), ((2, 11, 0), _V2_TO_V4, ""),
    ((2, 10, 1), _V2_TO_V4, ""), ((2, 10, 0), ("v2", "v3"), ""), ((2, 9, 3), ("v2", "v3"), ""), ((2, 9, 1), ("v2", "v3"), ""),
    ((2, 8, 4), ("v2", "v3"), ""), ((2, 8, 3), ("v2", "v3"), ""), ((2, 8, 0), ("v2", "v3"), ""),
    ((2, 7, 4), ("v2", "v3"), ""), ((2, 7, 3), ("v2", "v3"), ""),
)  # fmt: skip
# TensorFlow 2.16 made Keras 3 its tf.keras (its wheels require keras>=3.0; the 2.16 release notes: "Keras 3 will be the
# default Keras version"); 2.15 and older ship Keras 2 (keras 2.X.*), and tf-keras keeps Keras 2 on 2.16+ under
# TF_USE_LEGACY_KERAS=1 (https://keras.io/getting_started/#tensorflow--keras-2-backwards-compatibility).
KERAS_3_FROM = (2, 16)


def image_name(tensorflow: tuple[int, int, int], pod: bool, tail: str = "") -> str:
    """The runtime page's tpu-vm-tf-X.Y.Z[-pod][-pjrt] for a version: PJRT from 2.15 (v5e and v5p take nothing else), no
    device API before (stream executor only)."""
    api = "-pjrt" if tensorflow >= (2, 15, 0) else ""
    return f"tpu-vm-tf-{'.'.join(map(str, tensorflow))}{'-pod' if pod else ''}{api}{tail}"


def documented_images(generation: str) -> list[tuple[tuple[int, int, int], str]]:
    """The TensorFlow versions a generation has an image for, newest first, each with its name's tail."""
    return [(version, tail) for version, generations, tail in TENSORFLOW_IMAGES if generation in generations]


def keras_major(tensorflow: tuple[int, ...]) -> int:
    """The Keras a TensorFlow release brings as tf.keras (KERAS_3_FROM)."""
    return 3 if tuple(tensorflow[:2]) >= KERAS_3_FROM else 2


def tensorflow_image(accelerator_type: str) -> str:
    """The runtime image `init`/`create` default to: TensorFlow for the type's generation, `-pod` on several hosts.

    A generation the accelerator table does not know is shape_of's one-line error: there is no image to name for it."""
    shape = shape_of(accelerator_type)
    if shape.generation not in TENSORFLOW_IMAGE_GENERATIONS:
        return NO_TENSORFLOW_IMAGE
    return f"tpu-vm-tf-{DEFAULT_TENSORFLOW_IMAGE}{'-pod' if shape.hosts > 1 else ''}-pjrt"


def tensorflow_generations() -> tuple[str, ...]:
    """The generations with a TensorFlow runtime image, newest first (the accelerator table lists them oldest
    first): what `tpuctl doctor` recommends, so its advice moves with the table instead of naming a type."""
    return tuple(name for name in reversed(GENERATIONS) if name in TENSORFLOW_IMAGE_GENERATIONS)


def newest_tensorflow_image() -> str:
    """The runtime image a TPU VM of the newest generation with TensorFlow takes (its smallest slice: one host)."""
    gen = GENERATIONS[tensorflow_generations()[0]]
    return tensorflow_image(f"{gen.name}-{gen.size(gen.smallest_chips)}")


@dataclass(frozen=True)
class ImageChoice:
    """The TensorFlow image for a slice, picked for a TensorFlow version, and why in words."""

    image: str
    tensorflow: tuple[int, int, int]
    matched: bool  # the image has the asked TensorFlow's X.Y
    why: str


def image_for_tensorflow(accelerator_type: str, tensorflow: tuple[int, int, int]) -> ImageChoice | None:
    """The documented image (TENSORFLOW_IMAGES) of the type's generation with `tensorflow`'s X.Y (its own patch where
    there is one, else that line's newest); where none has it, the generation's newest, and why. None: the generation
    has no TensorFlow image at all (v6e, a generation newer than the table)."""
    shape = shape_of(accelerator_type)
    rows = documented_images(shape.generation)
    if not rows:
        return None
    pod = shape.hosts > 1
    here = ".".join(map(str, tensorflow))
    same = [row for row in rows if row[0][:2] == tensorflow[:2]]
    if same:
        version, tail = next((row for row in same if row[0] == tensorflow), same[0])
        ours = ".".join(map(str, version))
        why = f"this machine's TensorFlow {here}" if version == tensorflow else f"this machine's TensorFlow {here} has no image; {ours} is its line's newest"
        return ImageChoice(image_name(version, pod, tail), version, True, why)
    version, tail = rows[0]
    line = f"{tensorflow[0]}.{tensorflow[1]}"
    why = f"no TPU image has this machine's TensorFlow {line} for {shape.generation}; this is the newest documented for it"
    return ImageChoice(image_name(version, pod, tail), version, False, why)


@dataclass(frozen=True)
class Image:
    """A TensorFlow runtime image's name, read."""

    tensorflow: tuple[int, int, int]
    pod: bool
    api: str | None  # pjrt, se, or None (before 2.15: stream executor only)


def read_image(name: str) -> Image | None:
    """The TensorFlow version a runtime image name carries; None for an image without TensorFlow."""
    found = _IMAGE.match(name)
    if found is None:
        return None
    major, minor, patch = (int(found.group(i)) for i in (1, 2, 3))
    return Image((major, minor, patch), found.group(4) is not None, found.group(5))


# The TPU VM images for JAX (and PyTorch), https://cloud.google.com/tpu/docs/runtimes, "PyTorch and JAX": "Use the
# following common TPU software versions for PyTorch and JAX, then install the framework you want to use": Trillium (v6e)
# v2-alpha-tpuv6e, v5p v2-alpha-tpuv5, v5e v2-alpha-tpuv5-lite, "v4 and older" tpu-ubuntu2204-base. None has JAX: the
# JAX quickstart (https://cloud.google.com/tpu/docs/run-calculation-jax) creates the VM with one of them, then runs
# `pip install jax[tpu]` (which brings the libtpu that jax release pins). One image serves a slice of any size (no -pod).
JAX_BASE_IMAGE = "tpu-ubuntu2204-base"
JAX_IMAGES: dict[str, str] = {
    "v2": JAX_BASE_IMAGE,
    "v3": JAX_BASE_IMAGE,
    "v4": JAX_BASE_IMAGE,
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}
JAX_IMAGE_SOURCE = "cloud.google.com/tpu/docs/runtimes"
def jax_image(accelerator_type: str) -> str:
    """The runtime image a JAX run's TPU VM of this type is created with (JAX_IMAGES). TPU7x, which the Cloud TPU API does
    not manage (accelerators.NO_TPU7X), and a generation the accelerator table does not know are shape_of's one-line
    errors: no image is guessed."""
    generation = shape_of(accelerator_type).generation
    image = JAX_IMAGES.get(generation)
    if image is None:  # a generation added to the accelerator table before its row here
        raise TpuctlError(f"{one_line(accelerator_type, 40)}: tpuctl knows no JAX image for {generation}", hint="name one with --runtime-version")
    return image


# Where a TensorFlow user reads the way to Keras 3 on JAX, and the launch that takes a script there.
JAX_GUIDE = "docs/jax.md"


def jax_launch(script: str, accelerator_type: str | None, requirements: str = "requirements.txt") -> str:
    """The command that runs a script ported to Keras 3 on JAX: on a new TPU VM of that type (its JAX image, jax[tpu] and
    keras from `requirements`), or here where no type is given (a TPU7x machine, made outside the Cloud TPU API)."""
    where = f" --new-tpu {accelerator_type} --requirements {shlex.quote(requirements)}" if accelerator_type else ""
    return f"tpuctl launch {shlex.quote(script)} --framework jax{where}"


def chip(device_id: int) -> Chip | None:
    return CHIPS.get(device_id)

"""The software table beside the accelerator table: default images per slice, image names read back, chips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings import cloud as settings
from tpuctl.tpu import accelerators
from tpuctl.tpu import software as sw


@pytest.mark.parametrize(
    ("accelerator_type", "image"),
    [
        ("v2-8", "tpu-vm-tf-2.16.1-pjrt"), ("v2-32", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v3-8", "tpu-vm-tf-2.16.1-pjrt"), ("v3-1024", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v4-8", "tpu-vm-tf-2.16.1-pjrt"), ("v4-16", "tpu-vm-tf-2.16.1-pod-pjrt"), ("v4-32", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v5litepod-1", "tpu-vm-tf-2.16.1-pjrt"), ("v5litepod-8", "tpu-vm-tf-2.16.1-pjrt"),
        ("v5litepod-16", "tpu-vm-tf-2.16.1-pod-pjrt"), ("v5e-4", "tpu-vm-tf-2.16.1-pjrt"),
        ("v5p-8", "tpu-vm-tf-2.16.1-pjrt"), ("v5p-16", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v6e-1", sw.NO_TENSORFLOW_IMAGE), ("v6e-8", sw.NO_TENSORFLOW_IMAGE), ("v6e-256", "v2-alpha-tpuv6e"),
    ],
)  # fmt: skip
def test_each_generations_default_image(accelerator_type: str, image: str) -> None:
    assert sw.tensorflow_image(accelerator_type) == image
    assert settings.default_runtime(accelerator_type) == image


def test_every_slice_of_the_table_gets_an_image_that_reads_back_as_its_own() -> None:
    """-pod exactly where the slice has several hosts, PJRT (v5e and v5p know no other), the version of the table."""
    version = tuple(int(part) for part in sw.DEFAULT_TENSORFLOW_IMAGE.split("."))
    for name in sw.TENSORFLOW_IMAGE_GENERATIONS:
        gen = accelerators.GENERATIONS[name]
        for topology in gen.topologies:
            shape = accelerators.shape_from_config(gen.config_type, topology)
            image = sw.read_image(sw.tensorflow_image(shape.accelerator_type))
            assert image == sw.Image(version, shape.hosts > 1, "pjrt"), shape


def test_a_type_without_an_image_to_name() -> None:
    """A generation newer than the table: no default (the user names one); a malformed size is the table's error."""
    for unknown in ("v9-8", "v5x-4", ""):
        assert settings.default_runtime(unknown) is None
        with pytest.raises(TpuctlError):
            sw.tensorflow_image(unknown)
    with pytest.raises(TpuctlError, match="multiple of 2 TensorCores"):
        sw.tensorflow_image("v4-7")


@pytest.mark.parametrize(
    ("name", "image"),
    [
        ("tpu-vm-tf-2.16.1-pod-pjrt", sw.Image((2, 16, 1), True, "pjrt")),
        ("tpu-vm-tf-2.16.1-pjrt", sw.Image((2, 16, 1), False, "pjrt")),
        ("tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", sw.Image((2, 18, 0), False, "pjrt")),
        ("tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6", sw.Image((2, 18, 0), True, "pjrt")),
        ("tpu-vm-tf-2.18.0-pod-se", sw.Image((2, 18, 0), True, "se")),
        ("tpu-vm-tf-2.10.0-pod-v4", sw.Image((2, 10, 0), True, None)),
        ("tpu-vm-tf-2.10.0-v4", sw.Image((2, 10, 0), False, None)),
        ("tpu-vm-tf-2.14.1", sw.Image((2, 14, 1), False, None)),
        ("tpu-ubuntu2204-base", None),
        ("v2-alpha-tpuv5-lite", None),
        ("v2-alpha-tpuv6e", None),
        ("tpu-vm-base", None),
        ("tpu-vm-tf-2.16", None),
        ("tpu-vm-tf-2.16.1-", None),
        ("TPU-VM-TF-2.16.1", None),
        ("tpu-vm-tf-2.16.1-pjrt\n", None),
    ],
)
def test_read_image_on_real_names(name: str, image: sw.Image | None) -> None:
    assert sw.read_image(name) == image


@hsettings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.builds(lambda digits, tail: f"tpu-vm-tf-{digits}.{digits}.{digits}{tail}", st.text("0123456789", min_size=1, max_size=6000), st.text(max_size=60)),
        st.builds("tpu-vm-tf-2.16.1{}".format, st.text("-podjrtsev0123456789a", max_size=80)),
    )
)
def test_read_image_never_raises_on_hostile_names(name: str) -> None:
    """Any text a TPU API, a metadata server or a user hands over: an Image of short numbers, or None."""
    image = sw.read_image(name)
    if image is not None:
        assert all(0 <= part < 10_000 for part in image.tensorflow) and image.api in (None, "pjrt", "se")


def test_read_image_of_a_long_name_is_quick() -> None:
    """No backtracking that grows with the name: a megabyte-long near miss is refused at once."""
    import time

    started = time.monotonic()
    for name in ("tpu-vm-tf-2.16.1" + "-pod" * 250_000, "tpu-vm-tf-" + "1" * 1_000_000 + ".1.1", "tpu-vm-tf-2.16.1-" + "a-" * 500_000):
        assert sw.read_image(name) is None
    assert time.monotonic() - started < 1.0


def test_chips_by_pci_id() -> None:
    assert all(chip.device_id == device_id for device_id, chip in sw.CHIPS.items())
    assert {c.generation for c in sw.CHIPS.values()} - {None} <= set(accelerators.GENERATIONS)
    v4 = sw.chip(0x005E)
    assert v4 is not None and (v4.name, v4.nodes, v4.tensorflow) == ("v4", "accel", "ok")
    v6e = sw.chip(0x006F)
    assert v6e is not None and v6e.tensorflow == "warn" and v6e.why
    tpu7x = sw.chip(0x0076)
    assert tpu7x is not None and tpu7x.generation is None and tpu7x.tensorflow == "fail"
    assert sw.chip(0x0000) is None and sw.chip(-1) is None


def test_release_tables_agree_with_each_other() -> None:
    assert max(sw.PYTHONS_FOR_TENSORFLOW) == sw.NEWEST_TENSORFLOW
    assert all(low <= high for low, high in sw.PYTHONS_FOR_TENSORFLOW.values())
    released = {tuple(int(part) for part in version.split(".")[:2]) for version in sw.LIBTPU_FOR_TENSORFLOW_TPU}
    assert max(released) == sw.NEWEST_TENSORFLOW_TPU and released <= set(sw.PYTHONS_FOR_TENSORFLOW)
    assert all(pin.startswith("libtpu") for pin in sw.LIBTPU_FOR_TENSORFLOW_TPU.values())
    default = sw.read_image(sw.tensorflow_image("v4-8"))
    assert default is not None and default.tensorflow[:2] in sw.PYTHONS_FOR_TENSORFLOW
    assert set(accelerators.GENERATIONS) - set(sw.TENSORFLOW_IMAGE_GENERATIONS) == {"v6e"}  # NO_TENSORFLOW_IMAGE's


def test_the_doctors_recommendation_is_the_newest_generation_with_a_tensorflow_image() -> None:
    """Newest first in the table's own order (oldest first there), only generations with an image, and the image of
    the newest one's smallest slice: one host, so no -pod."""
    order = list(accelerators.GENERATIONS)
    newest_first = sw.tensorflow_generations()
    assert set(newest_first) == set(sw.TENSORFLOW_IMAGE_GENERATIONS)
    assert [order.index(name) for name in newest_first] == sorted((order.index(name) for name in newest_first), reverse=True)
    image = sw.read_image(sw.newest_tensorflow_image())
    assert image is not None and not image.pod and image.api == "pjrt"
    assert all(chip.generation in (None, *accelerators.GENERATIONS) for chip in sw.CHIPS.values())


# --- the documented TensorFlow images, and the one picked for a TensorFlow version ----------------------------------


@pytest.mark.parametrize(
    ("accelerator_type", "tensorflow", "image", "matched"),
    [
        ("v5litepod-8", (2, 16, 1), "tpu-vm-tf-2.16.1-pjrt", True),
        ("v5litepod-16", (2, 16, 1), "tpu-vm-tf-2.16.1-pod-pjrt", True),  # several hosts: -pod
        ("v5litepod-8", (2, 16, 2), "tpu-vm-tf-2.16.1-pjrt", True),  # no 2.16.2 image: that line's newest
        ("v4-8", (2, 15, 1), "tpu-vm-tf-2.15.1-pjrt", True),
        ("v4-8", (2, 14, 0), "tpu-vm-tf-2.14.0", True),  # before 2.15: no device API in the name
        ("v4-32", (2, 12, 1), "tpu-vm-tf-2.12.1-pod", True),
        ("v2-8", (2, 17, 1), "tpu-vm-tf-2.17.0-pjrt", True),
        ("v5litepod-8", (2, 21, 0), "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", False),  # none has 2.21: the generation's newest
        ("v5litepod-16", (2, 21, 0), "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6", False),
        ("v4-8", (2, 21, 0), "tpu-vm-tf-2.16.1-pjrt", False),
        ("v4-8", (2, 17, 0), "tpu-vm-tf-2.16.1-pjrt", False),  # 2.17 is documented for v2, v3 and v5e, not v4
        ("v5p-8", (2, 9, 1), "tpu-vm-tf-2.16.1-pjrt", False),  # v5p starts at 2.15
    ],
)  # fmt: skip
def test_the_image_picked_for_a_tensorflow_version(accelerator_type: str, tensorflow: tuple[int, int, int], image: str, matched: bool) -> None:
    chosen = sw.image_for_tensorflow(accelerator_type, tensorflow)
    assert chosen is not None and (chosen.image, chosen.matched) == (image, matched)
    read = sw.read_image(chosen.image)
    assert read is not None and read.tensorflow == chosen.tensorflow and read.pod == (accelerators.shape_of(accelerator_type).hosts > 1)
    line = f"{tensorflow[0]}.{tensorflow[1]}"
    assert (line in chosen.why) and (("no TPU image has" in chosen.why) is not matched)


def test_no_image_is_picked_where_a_generation_has_none() -> None:
    assert sw.image_for_tensorflow("v6e-8", (2, 18, 0)) is None


def test_every_documented_image_names_a_generation_of_the_table_and_reads_back() -> None:
    """Each row's name parses back to its own version, PJRT from 2.15; the default image is a row of every generation."""
    for version, generations, tail in sw.TENSORFLOW_IMAGES:
        assert set(generations) <= set(sw.TENSORFLOW_IMAGE_GENERATIONS)
        for pod in (False, True):
            read = sw.read_image(sw.image_name(version, pod, tail))
            assert read == sw.Image(version, pod, "pjrt" if version >= (2, 15, 0) else None)
    versions = [version for version, _, _ in sw.TENSORFLOW_IMAGES]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    default = tuple(int(part) for part in sw.DEFAULT_TENSORFLOW_IMAGE.split("."))
    assert all(default in [v for v, _ in sw.documented_images(name)] for name in sw.TENSORFLOW_IMAGE_GENERATIONS)


@pytest.mark.parametrize(("tensorflow", "keras"), [((2, 15, 1), 2), ((2, 12), 2), ((2, 16, 1), 3), ((2, 21, 0), 3), ((3, 0, 0), 3)])
def test_the_keras_a_tensorflow_release_brings(tensorflow: tuple[int, ...], keras: int) -> None:
    assert sw.keras_major(tensorflow) == keras


# The runtimes page's "PyTorch and JAX" table (https://cloud.google.com/tpu/docs/runtimes), as written there.
@pytest.mark.parametrize(
    ("accelerator_type", "image"),
    [
        ("v2-8", "tpu-ubuntu2204-base"), ("v3-32", "tpu-ubuntu2204-base"), ("v4-8", "tpu-ubuntu2204-base"), ("v4-64", "tpu-ubuntu2204-base"),
        ("v5litepod-1", "v2-alpha-tpuv5-lite"), ("v5e-16", "v2-alpha-tpuv5-lite"), ("v5p-8", "v2-alpha-tpuv5"), ("v5p-128", "v2-alpha-tpuv5"),
        ("v6e-8", "v2-alpha-tpuv6e"), ("v6e-256", "v2-alpha-tpuv6e"),
    ],
)  # fmt: skip
def test_a_jax_run_takes_the_documented_jax_image_of_its_generation(accelerator_type: str, image: str) -> None:
    assert sw.jax_image(accelerator_type) == image
    assert sw.read_image(image) is None  # no TensorFlow in its name: the framework comes from pip


def test_every_generation_of_the_table_has_a_jax_image() -> None:
    assert set(sw.JAX_IMAGES) == set(accelerators.GENERATIONS)


@pytest.mark.parametrize("name", ["tpu7x-8", "TPU7x", "v7x-16", "ironwood-4"])
def test_tpu7x_has_no_jax_image_in_the_cloud_tpu_api(name: str) -> None:
    with pytest.raises(TpuctlError) as refused:
        sw.jax_image(name)
    assert "TPU7x (Ironwood) is not in the Cloud TPU API" in refused.value.message and "\n" not in str(refused.value)
    assert refused.value.hint is not None and "GKE" in refused.value.hint


def test_an_unknown_generation_gets_no_guessed_jax_image() -> None:
    with pytest.raises(TpuctlError, match="unknown TPU generation 'v9'"):
        sw.jax_image("v9-8")


def test_a_tpu7x_type_is_told_it_is_outside_the_cloud_tpu_api_wherever_a_type_is_read() -> None:
    for name in ("tpu7x-8", "v7x-16"):
        with pytest.raises(TpuctlError, match=r"TPU7x \(Ironwood\) is not in the Cloud TPU API"):
            accelerators.shape_of(name)
    # v7x-16 has the table's grammar, so the setting takes it (a newer generation is the API's to judge); tpu7x-8 has not.
    with pytest.raises(TpuctlError, match=r"from --accelerator-type is not valid \(TPU7x \(Ironwood\) is not in the Cloud TPU API"):
        settings.resolve({"accelerator_type": "tpu7x-8"})
    assert not accelerators.is_tpu7x("v6e-8") and not accelerators.is_tpu7x("v5litepod-16")

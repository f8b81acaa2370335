"""The accelerator table: every generation, every size it documents, every product's name for it.

The tests walk the table rather than a hand-picked list, so a new generation row is
checked for consistency (chips, cores, hosts, topologies, GKE, Vertex) the day it is added.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.standins import catalog
from tpuctl.inputs.errors import USAGE, TpuctlError
from tpuctl.tpu import accelerators as acc

GENERATIONS = list(acc.GENERATIONS.values())
# Every documented size of every generation, as a type name: v4-8, v4-16, ..., v6e-256.
SIZES = [f"{g.name}-{g.size(math.prod(int(d) for d in t.split('x')))}" for g in GENERATIONS for t in g.topologies]


def one_line_usage(err: TpuctlError) -> bool:
    return err.exit_code == USAGE and "\n" not in str(err) and len(str(err)) < 400


# -- type names ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator_type", "chips", "cores", "hosts", "topology"),
    [
        ("v2-8", 4, 8, 1, "2x2"),
        ("v2-32", 16, 32, 4, "4x4"),
        ("v3-8", 4, 8, 1, "2x2"),
        ("v3-2048", 1024, 2048, 256, "32x32"),
        ("v4-8", 4, 8, 1, "2x2x1"),
        ("v4-16", 8, 16, 2, "2x2x2"),
        ("v4-32", 16, 32, 4, "2x2x4"),
        ("v5p-8", 4, 8, 1, "2x2x1"),
        ("v5p-128", 64, 128, 16, "4x4x4"),
        ("v5litepod-1", 1, 1, 1, "1x1"),
        ("v5litepod-8", 8, 8, 1, "2x4"),
        ("v5litepod-16", 16, 16, 4, "4x4"),
        ("v5e-4", 4, 4, 1, "2x2"),
        ("v6e-8", 8, 8, 1, "2x4"),
        ("v6e-256", 256, 256, 64, "16x16"),
    ],
)
def test_documented_shapes(accelerator_type: str, chips: int, cores: int, hosts: int, topology: str) -> None:
    shape = acc.shape_of(accelerator_type)
    assert (shape.accelerator_type, shape.chips, shape.cores, shape.hosts, shape.topology) == (accelerator_type, chips, cores, hosts, topology)


@pytest.mark.parametrize("accelerator_type", SIZES)
def test_every_size_is_consistent(accelerator_type: str) -> None:
    shape = acc.shape_of(accelerator_type)
    gen = acc.GENERATIONS[shape.generation]
    assert shape.cores == shape.chips * gen.cores_per_chip
    assert gen.size(shape.chips) == int(accelerator_type.rsplit("-", 1)[1])
    assert shape.topology is not None and math.prod(acc.topology_dims(shape.topology)) == shape.chips
    assert len(acc.topology_dims(shape.topology)) == gen.dims
    assert (shape.hosts == 1) == (shape.chips <= gen.single_host_chips)
    assert shape.hosts * shape.chips_per_host == shape.chips
    assert shape.chips_per_host == (shape.chips if shape.hosts == 1 else gen.chips_per_host)


@pytest.mark.parametrize("accelerator_type", SIZES)
def test_type_name_and_api_config_round_trip(accelerator_type: str) -> None:
    config_type, topology = acc.config_of(accelerator_type)
    assert config_type == acc.GENERATIONS[acc.shape_of(accelerator_type).generation].config_type
    assert acc.shape_from_config(config_type, topology) == acc.shape_of(accelerator_type)


@pytest.mark.parametrize("accelerator_type", catalog.ALL_ACCELERATOR_TYPES)
def test_shapes_agree_with_the_standin_catalog(accelerator_type: str) -> None:
    """The stand-in's catalog was written apart from tpuctl; both follow Google's pages."""
    shape = acc.shape_of(accelerator_type)
    assert (shape.chips, shape.hosts) == (catalog.chips(accelerator_type), catalog.hosts(accelerator_type))
    assert acc.config_of(accelerator_type) == tuple(catalog.accelerator_config(accelerator_type).values())


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.name)
def test_each_generation_is_found_by_its_names(generation: acc.Generation) -> None:
    for word in (generation.name, *generation.aliases, generation.name.upper()):
        assert acc.generation(word) is generation
        assert acc.config_type_of(word) == generation.config_type
    assert generation.topologies, "a generation needs at least one documented shape"


def test_an_alias_keeps_the_name_it_was_given() -> None:
    assert acc.shape_of("v5e-16") == replace(acc.shape_of("v5litepod-16"), accelerator_type="v5e-16")


def test_a_size_without_a_documented_shape_has_no_default_topology() -> None:
    shape = acc.shape_of("v4-24")
    assert (shape.chips, shape.hosts, shape.topology) == (12, 3, None)
    with pytest.raises(TpuctlError, match="no default topology"):
        acc.config_of("v4-24")
    assert acc.shape_from_config("V4", "2x2x3").accelerator_type == "v4-24"


@pytest.mark.parametrize("bad", ["", "v4", "v4-", "v4-0", "v4-7", "v9-8", "tpu7x-8", "V4-8", " v4-8", "v4-8\n", "v4-٣", "v4-" + "9" * 5000])
def test_malformed_or_unknown_types_are_one_line_usage_errors(bad: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        acc.shape_of(bad)
    assert one_line_usage(caught.value)
    assert "v4-8" in (caught.value.hint or ""), "the hint names valid examples"


def test_the_grammar_alone_lets_a_newer_generation_through() -> None:
    """create and the settings check only the grammar: the TPU API judges what a zone offers."""
    assert acc.split_type("v9-8") == ("v9", 8)
    assert acc.is_type_name("v9-8") and not acc.is_type_name("v4-0") and not acc.is_type_name("tpu-v4-podslice")


@pytest.mark.parametrize(
    ("config_type", "topology"), [("V9", "2x2"), ("V4", "2x"), ("V4", "0x2x2"), ("V4", "2x2x2x2"), ("V4", "2x4"), ("V6E", "2x2x2"), ("", "")]
)
def test_bad_accelerator_configs(config_type: str, topology: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        acc.shape_from_config(config_type, topology)
    assert one_line_usage(caught.value)


# -- Compute Engine machine types ---------------------------------------------


@pytest.mark.parametrize(
    ("accelerator_type", "machine_type"),
    [
        ("v4-8", "ct4p-hightpu-4t"),
        ("v4-32", "ct4p-hightpu-4t"),
        ("v5p-8", "ct5p-hightpu-4t"),
        ("v5litepod-1", "ct5lp-hightpu-1t"),
        ("v5litepod-4", "ct5lp-hightpu-4t"),
        ("v5litepod-8", "ct5lp-hightpu-8t"),
        ("v5litepod-16", "ct5lp-hightpu-4t"),
        ("v6e-8", "ct6e-standard-8t"),
        ("v6e-64", "ct6e-standard-4t"),
        ("v2-8", None),
    ],
)
def test_machine_types(accelerator_type: str, machine_type: str | None) -> None:
    assert acc.machine_type(acc.shape_of(accelerator_type)) == machine_type


@pytest.mark.parametrize("generation", [g for g in GENERATIONS if g.machine_types], ids=lambda g: g.name)
def test_machine_types_name_their_chip_count(generation: acc.Generation) -> None:
    for chips, name in generation.machine_types:
        assert name.endswith(f"-{chips}t"), name
    assert generation.chips_per_host in dict(generation.machine_types), "multi-host slices need a machine type"


# -- GKE ----------------------------------------------------------------------


@pytest.mark.parametrize("accelerator_type", SIZES)
def test_every_gke_size_maps_to_a_label_and_a_topology_of_its_chips(accelerator_type: str) -> None:
    shape = acc.shape_of(accelerator_type)
    gen = acc.GENERATIONS[shape.generation]
    if gen.gke_label is None:
        with pytest.raises(TpuctlError, match="GKE has no") as caught:
            acc.gke_slice(accelerator_type)
        assert one_line_usage(caught.value)
        return
    tpu = acc.gke_slice(accelerator_type)
    assert tpu.accelerator == gen.gke_label and acc.GKE_NODES[tpu.accelerator].generation == gen.name
    assert math.prod(acc.topology_dims(tpu.topology)) == tpu.chips == shape.chips
    assert (tpu.hosts, tpu.chips_per_host) == (shape.hosts, shape.chips_per_host), "GKE and the TPU API agree on hosts"
    assert acc.gke_slice(tpu.accelerator, tpu.topology) == tpu, "the type name means what its label and topology mean"


@pytest.mark.parametrize(
    ("accelerator", "topology", "chips_per_host", "expected"),
    [
        ("v4-8", None, None, ("tpu-v4-podslice", "2x2x1", 4, 1, 4)),
        ("v5litepod-16", None, None, ("tpu-v5-lite-podslice", "4x4", 16, 4, 4)),
        ("v5e-8", None, 4, ("tpu-v5-lite-podslice", "2x4", 8, 2, 4)),
        ("v6e-8", None, None, ("tpu-v6e-slice", "2x4", 8, 1, 8)),
        ("v5p-32", "2x4x2", None, ("tpu-v5p-slice", "2x4x2", 16, 4, 4)),
        ("tpu-v5-lite-podslice", "2x4", None, ("tpu-v5-lite-podslice", "2x4", 8, 1, 8)),
        ("tpu-v5-lite-device", "2x2", None, ("tpu-v5-lite-device", "2x2", 4, 1, 4)),
        ("tpu-v9-mystery", "4x4", 4, ("tpu-v9-mystery", "4x4", 16, 4, 4)),
    ],
)
def test_gke_slices(accelerator: str, topology: str | None, chips_per_host: int | None, expected: tuple[object, ...]) -> None:
    tpu = acc.gke_slice(accelerator, topology, chips_per_host)
    assert (tpu.accelerator, tpu.topology, tpu.chips, tpu.hosts, tpu.chips_per_host) == expected


@pytest.mark.parametrize(
    ("accelerator", "topology", "chips_per_host", "message"),
    [
        ("tpu-v4-podslice", None, None, "needs --topology"),
        ("tpu-v4-podslice", "2x4", None, "3 dimensions"),
        ("v4-8", "2x4", None, "3 dimensions"),
        ("v4-8", "2x2x2", None, "v4-8 has 4"),
        ("v4-24", None, None, "no default topology"),
        ("v3-8", None, None, "GKE has no v3"),
        ("tpu-v9-mystery", "2x2", None, "unknown TPU type"),
        ("tpu-v5-lite-device", "4x4", None, "single-host"),
        ("tpu-v5-lite-podslice", "2x4", 3, "whole number of hosts"),
        ("tpu-v5-lite-podslice", "4x4; rm", None, "not a TPU topology"),
    ],
)
def test_gke_refusals(accelerator: str, topology: str | None, chips_per_host: int | None, message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        acc.gke_slice(accelerator, topology, chips_per_host)
    assert message in str(caught.value) and one_line_usage(caught.value)


def test_every_gke_label_belongs_to_a_generation() -> None:
    for nodes in acc.GKE_NODES.values():
        gen = acc.GENERATIONS[nodes.generation]
        assert nodes.single_host_chips <= max(dict(gen.machine_types)), nodes
    labels = {g.gke_label for g in GENERATIONS if g.gke_label}
    assert labels <= set(acc.GKE_NODES)


# -- Vertex AI ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator_type", "expected"),
    [
        ("v2-8", ("cloud-tpu", "TPU_V2", 8, None)),
        ("v3-8", ("cloud-tpu", "TPU_V3", 8, None)),
        ("v3-32", ("cloud-tpu", "TPU_V3", 32, None)),
        ("v4-8", ("cloud-tpu", "TPU_V4_POD", 8, None)),
        ("v5litepod-1", ("ct5lp-hightpu-1t", "TPU_V5_LITEPOD", None, "1x1")),
        ("v5litepod-4", ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD", None, "2x2")),
        ("v5litepod-8", ("ct5lp-hightpu-8t", "TPU_V5_LITEPOD", None, "2x4")),
        ("v5litepod-16", ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD", None, "4x4")),
    ],
)
def test_vertex_machine_specs(accelerator_type: str, expected: tuple[object, ...]) -> None:
    spec = acc.vertex_machine(accelerator_type)
    assert (spec.machine_type, spec.accelerator_type, spec.accelerator_count, spec.tpu_topology) == expected


@pytest.mark.parametrize("accelerator_type", SIZES)
def test_every_size_has_a_vertex_spec_or_a_reason(accelerator_type: str) -> None:
    gen = acc.GENERATIONS[acc.shape_of(accelerator_type).generation]
    if gen.vertex is None:
        assert gen.no_vertex, f"{gen.name} must say why Vertex AI cannot train on it"
        with pytest.raises(TpuctlError) as caught:
            acc.vertex_machine(accelerator_type)
        assert gen.no_vertex in str(caught.value) and one_line_usage(caught.value)
        return
    try:
        spec = acc.vertex_machine(accelerator_type)
    except TpuctlError as err:
        assert one_line_usage(err) and "Vertex AI" in str(err)
        return
    assert spec.accelerator_type == gen.vertex.accelerator_type
    assert (spec.accelerator_count is None) == (spec.tpu_topology is not None), "cloud-tpu takes a count, a TPU VM a topology"


@pytest.mark.parametrize("accelerator_type", ["v6e-8", "v6e-256", "v5p-8"])
def test_vertex_refuses_what_it_does_not_offer(accelerator_type: str) -> None:
    with pytest.raises(TpuctlError, match="Vertex AI") as caught:
        acc.vertex_machine(accelerator_type)
    assert one_line_usage(caught.value) and "v5litepod-8" in (caught.value.hint or "")


# -- hostile input ------------------------------------------------------------

TEXT = st.text(max_size=40) | st.from_regex(r"(v[0-9]{1,2}[a-z]{0,10}|tpu-[a-z0-9-]{0,20})-[0-9]{1,8}", fullmatch=True)
TOPOLOGY = st.none() | st.text(max_size=20) | st.from_regex(r"[0-9]{1,5}(x[0-9]{1,5}){0,3}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(TEXT, TOPOLOGY, st.none() | st.integers(min_value=-2, max_value=300))
def test_any_text_is_a_result_or_one_line_error(text: str, topology: str | None, chips_per_host: int | None) -> None:
    calls = [
        lambda: acc.shape_of(text),
        lambda: acc.config_of(text),
        lambda: acc.generation(text),
        lambda: acc.vertex_machine(text),
        lambda: acc.gke_slice(text, topology, chips_per_host),
        lambda: acc.shape_from_config(text.upper(), topology or ""),
        lambda: acc.topology_dims(topology or text),
    ]
    for call in calls:
        try:
            result = call()
        except TpuctlError as err:
            assert one_line_usage(err), str(err)
            continue
        assert result is not None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([w for g in GENERATIONS for w in (g.name, *g.aliases)]), st.integers(min_value=1, max_value=100_000))
def test_shape_invariants(word: str, size: int) -> None:
    gen = acc.generation(word)
    if size % gen.cores_per_chip:
        with pytest.raises(TpuctlError):
            acc.shape_of(f"{word}-{size}")
        return
    shape = acc.shape_of(f"{word}-{size}")
    assert shape.cores == shape.chips * gen.cores_per_chip
    assert size == gen.size(shape.chips)
    assert (shape.hosts == 1) == (shape.chips <= gen.single_host_chips)
    if shape.hosts > 1:
        assert (shape.hosts - 1) * gen.chips_per_host < shape.chips <= shape.hosts * gen.chips_per_host

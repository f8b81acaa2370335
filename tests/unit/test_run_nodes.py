"""The label that ties a TPU VM to the run that created it, and the ownership test every delete goes through."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.nodespec import LABEL_KEY as KEY_RULE
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value, owned_by
from tpuctl.runs.naming import run_id

# The strictest form Google APIs check a label value against (RFC 1035: a letter first, no `-` last), at most 63.
STRICT_VALUE = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")


def _node(labels: object) -> Node:
    return Node({"name": "projects/p/locations/us-central1-a/nodes/n", "labels": labels}, zone="us-central1-a")


@given(st.text(max_size=300))
def test_any_text_makes_a_value_cloud_accepts(text: str) -> None:
    assert STRICT_VALUE.match(label_value(text)), label_value(text)


def test_a_value_reads_as_its_run_id_and_a_long_one_keeps_its_time() -> None:
    rid = run_id("Train.v2.py")
    value = label_value(rid)
    assert value.startswith("r" + rid.lower().replace(".", "-") + "-") and len(value) == len(rid) + 18  # r, -, 16 hex
    long_rid = run_id("x" * 120 + ".py")
    long_value = label_value(long_rid)
    assert len(long_value) == 63 and long_value.startswith("r" + long_rid[:15])


def test_ids_that_clean_up_alike_never_share_a_value() -> None:
    """The field's collision: a lost record of `...-Train-3f2a` deleted the VM labelled for `...-train-3f2a`, and
    `train.v2` matched `train-v2`. The value carries a hash of the whole id: one id, one value."""
    pairs = [
        ("20260101-120000-Train-3f2a", "20260101-120000-train-3f2a"),
        ("20260101-120000-train.v2-3f2a", "20260101-120000-train-v2-3f2a"),
        ("20260101-120000-a" + "x" * 80 + "-3f2a", "20260101-120000-b" + "x" * 80 + "-3f2a"),  # cut in the middle alike
    ]
    for one, other in pairs:
        assert label_value(one) != label_value(other), (one, other)


@given(st.lists(st.text(max_size=80), min_size=2, max_size=30, unique=True))
def test_distinct_ids_get_distinct_values(ids: list[str]) -> None:
    assert len({label_value(rid) for rid in ids}) == len(ids)


def test_two_long_runs_of_one_script_in_one_second_get_two_values() -> None:
    stem = "a_very_long_training_script_name_for_the_imagenet_resnet_50_experiment"
    assert label_value(f"20260101-120000-{stem}-1a2b") != label_value(f"20260101-120000-{stem}-9f9f")


def test_the_key_is_a_valid_label_key() -> None:
    assert KEY_RULE.match(LABEL_KEY)


def test_only_the_runs_own_label_owns_the_node() -> None:
    rid = "20260101-120000-train-1a2b"
    assert owned_by(_node({LABEL_KEY: label_value(rid)}), rid)
    assert not owned_by(_node({}), rid)  # the user's node of the same name
    assert not owned_by(_node(None), rid)
    assert not owned_by(_node({LABEL_KEY: label_value("20260101-120000-train-9f9f")}), rid)  # another run's
    assert not owned_by(_node({"other": label_value(rid)}), rid)
    assert not owned_by(_node({LABEL_KEY: ""}), rid)

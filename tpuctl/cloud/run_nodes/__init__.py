"""The TPU VMs tpuctl creates for a run (`launch --new-tpu`): the label that ties one to its run, and who may delete it.

A run may delete only a node its record names AND that carries its label: a node of the same name that
the user made (no label) or that another run made (another value) is never this run's to delete. The
creating side (the launch engine) and the deleting sides (`stop`, `runs --delete-lost-vms`, the end of a
launch) all go through this one module, so that what one writes the others read.

Label rules (cloud.google.com/compute/docs/labeling-resources): a key starts with a lowercase letter,
a value holds lowercase letters, digits, `_` and `-`, at most 63 characters. Some Google APIs check
values as RFC 1035 labels (a letter first, no `-` last); label_value keeps to that stricter form too.
"""

from __future__ import annotations

import re

from tpuctl.cloud.node import Node

LABEL_KEY = "tpuctl-run"  # the same key Vertex AI jobs carry their run id under (cloud/vertex_api.py RUN_LABEL)
MAX_VALUE = 63
_TAIL = 13  # a run id's last characters kept whole when it is cut: `-HHMMSS-` is in the head, the random `-1a2b` here
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def label_value(run_id: str) -> str:
    """The label value of a run id: `20260101-120000-Train.v2-1a2b` -> `r20260101-120000-train-v2-1a2b`.

    Lowercased, every other character run a `-`, a letter first, at most 63 characters. A longer id (a long
    script name) loses the middle of its stem, not its end: the end is the id's random tail, which keeps two
    runs of one script started in the same second apart."""
    value = _NOT_LABEL.sub("-", run_id.lower())
    if not value[:1].isalpha():
        value = "r" + value
    if len(value) > MAX_VALUE:
        value = value[: MAX_VALUE - _TAIL] + value[-_TAIL:]
    return value.rstrip("-") or "r"


def owned_by(node: Node, run_id: str) -> bool:
    """Whether `node` carries the label of run `run_id`: the one test before tpuctl deletes a node for a run."""
    return node.labels.get(LABEL_KEY) == label_value(run_id)

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

import enum
import re
import time
from collections.abc import Callable

from tpuctl.cloud import lifecycle
from tpuctl.cloud.node import Node
from tpuctl.cloud.tpu import NodeApi

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


class Deletion(enum.Enum):
    DELETED = "deleted"  # it was this run's and is gone now
    GONE = "gone"  # no node of that name: deleted earlier (by hand, by the service after a preemption)
    NOT_OURS = "not-ours"  # a node of that name without this run's label: the user's, or another run's; left alone


def delete_owned(
    api: NodeApi, zone: str, name: str, run_id: str, progress: lifecycle.Progress, *, sleep: Callable[[float], None] = time.sleep
) -> Deletion:
    """Delete node `name` only if it carries run `run_id`'s label, and wait until it is gone.

    The node is read first and its label checked; the delete then goes by name (the TPU API deletes by
    name only), so a node swapped for another of the same name in the moment between is the one gap left."""
    node = api.get_node(zone, name)
    if node is None:
        return Deletion.GONE
    if not owned_by(node, run_id):
        return Deletion.NOT_OURS
    return Deletion.DELETED if lifecycle.delete(api, zone, name, progress, sleep=sleep) else Deletion.GONE

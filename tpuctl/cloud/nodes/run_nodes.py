"""The TPU VMs tpuctl creates for a run (`launch --new-tpu`): the label that ties one to its run, and who may delete it.

A run may delete only a node its record names AND that carries its label: a node of the same name that
the user made (no label) or that another run made (another value) is never this run's to delete. The
creating side (the launch engine) and the deleting sides (`stop`, `runs --delete-lost-vms`, the end of a
launch) all go through this one module, so that what one writes the others read.

Label rules (cloud.google.com/compute/docs/labeling-resources): a key starts with a lowercase letter,
a value holds lowercase letters, digits, `_` and `-`, at most 63 characters. Some Google APIs check
values as RFC 1035 labels (a letter first, no `-` last); label_value keeps to that stricter form too.
The label alone proves nothing if two runs can share it, so its value carries a hash of the whole run id; the
deleting sides also check that the record naming the node is a file of the user's, in a folder only the user can
write (runs/records.proven), before any DELETE is sent.
"""

from __future__ import annotations

import enum
import hashlib
import re
import time
from collections.abc import Callable

from tpuctl.cloud.nodes import lifecycle
from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.tpu import NodeApi

LABEL_KEY = "tpuctl-run"  # the same key Vertex AI jobs carry their run id under (cloud/vertex/vertex_api.py RUN_LABEL)
MAX_VALUE = 63
_DIGEST = 16  # hex digits of the run id's SHA-256 (64 bits): what tells two ids apart, whatever their spelling
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def label_value(run_id: str) -> str:
    """The label value of a run id: `20260101-120000-Train.v2-1a2b` -> `r20260101-120000-train-v2-1a2b-<16 hex>`.

    A readable head (lowercased, every other character run a `-`, a letter first) and a hash of the whole id, so
    the mapping is one to one: `...-Train-3f2a` and `...-train-3f2a`, `train.v2` and `train-v2` read alike in the head
    but never share a value (a label that merely cleaned up the id let a lost record delete another run's VM). At
    most 63 characters, no `-` last: a valid node id too, which is what the run's VM is named."""
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogateescape")).hexdigest()[:_DIGEST]
    head = _NOT_LABEL.sub("-", run_id.lower()).strip("-")
    if not head[:1].isalpha():
        head = "r" + head
    return f"{head[: MAX_VALUE - _DIGEST - 1].rstrip('-')}-{digest}"


def owned_by(node: Node, run_id: str) -> bool:
    """Whether `node` carries the label of run `run_id`: the one test before tpuctl deletes a node for a run."""
    return node.labels.get(LABEL_KEY) == label_value(run_id)


class Deletion(enum.Enum):
    DELETED = "deleted"  # it was this run's and is gone now (with the queued resource that made it)
    GONE = "gone"  # no node of that name: deleted earlier (by hand, by the service after a preemption)
    NOT_OURS = "not-ours"  # a node of that name without this run's label: the user's, or another run's; left alone


def delete_owned(
    api: NodeApi, zone: str, name: str, run_id: str, progress: lifecycle.Progress, *, sleep: Callable[[float], None] = time.sleep
) -> Deletion:
    """Delete node `name` (lifecycle.remove: and its queued resource, or that alone once the node is gone) only if
    it carries run `run_id`'s label, and wait until it is gone.

    The node is read first and its label checked; the delete then goes by name (the TPU API deletes by
    name only), so a node swapped for another of the same name in the moment between is the one gap left."""
    node = api.get_node(zone, name)
    if node is not None and not owned_by(node, run_id):
        return Deletion.NOT_OURS
    # No node: a queued resource of the run's node name (a reserved=NAME run's, SUSPENDED after a preemption) goes.
    return Deletion.DELETED if lifecycle.remove(api, zone, name, progress, sleep=sleep).found else Deletion.GONE

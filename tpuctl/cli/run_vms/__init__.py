"""The TPU VMs tpuctl created for runs (`launch --new-tpu`), seen from this machine's run records (docs/managed-runs.md).

A run deletes its VM as it ends; a launcher killed (SIGKILL, a laptop shut) cannot, and its VM bills
on. Such a run's record still names the VM, so `tpuctl runs` says it bills, and `tpuctl stop RUN` or
`tpuctl runs --delete-lost-vms` delete it. What may be deleted is decided by the record alone, never
by a search: a node named in a record of this machine's, whose run has no supervisor left (its
folder's lock is free), and which carries that run's label (cloud/nodes/run_nodes.py). A node the user
made, or another run's, is left alone with one line saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import click

from tpuctl.endings import RUNNING, Kind
from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError
from tpuctl.runs import records
from tpuctl.runs.proof import elsewhere
from tpuctl.runs.records import NODE_DELETED, RunRecord


def orphaned(record: RunRecord) -> bool:
    """A VM this run created that may still bill, with nobody left to delete it: the run is lost, or it ended but its
    launcher died before the delete (a run holds its folder's lock until its VM is gone)."""
    return record.bills and record.state != RUNNING and not record.folder.is_running()


def vm_text(record: RunRecord) -> str:
    """The VM column of `tpuctl runs`: the node's name and, once it is no longer simply the run's, what became of it."""
    if record.created_node is None:
        return "-"
    if orphaned(record):
        return f"{record.created_node} (BILLING)"
    return record.created_node if record.node_fate == records.NODE_LIVE else f"{record.created_node} ({record.node_fate})"


def warn_billing(found: list[RunRecord], say: Callable[[str], None]) -> None:
    """One line per orphaned VM under the listing (at most 5, then a count): what bills, where, and how to end it."""
    left = [record for record in found if orphaned(record)]
    for record in left[:5]:
        vm = f"TPU VM {record.created_node} in {record.zone}"
        say(f"run {record.run_id} ({record.state}) left its {vm} billing: `tpuctl stop {record.run_id}` deletes it")
    if len(left) > 5:
        say(f"... and {len(left) - 5} more run(s) that left a VM billing")
    if left:
        say("`tpuctl runs --delete-lost-vms` deletes every lost run's VM (only VMs tpuctl created for them)")


def delete_vm(record: RunRecord, others: list[RunRecord]) -> str:
    """Delete the VM an orphaned run's record names, then write its fate; the line that says so, or one line
    (TpuctlError) where it may not be.

    The record is the whole authority: its node name, project and zone, checked as names before any call; its file
    must be the user's own in a folder only the user can write (records.proven), and no other record (`others`:
    this machine's) may map to the same label value; the node must still carry the run's label (a node of that name without it is not the run's VM, which is
    then gone: the fate is written, the node left alone). A lost run's record is written `lost` with its end
    (the moment its VM went: its workers could not outlive it); an ended run keeps its state."""
    from tpuctl.cli.cloud_options import resolve, tpu_api
    from tpuctl.cli.display import StatusLine
    from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, Deletion, delete_owned, label_value

    name, zone, project = _checked(record)
    here = elsewhere(record)
    if here is not None:
        raise TpuctlError(
            f"run {record.run_id} was launched on {inputs.shown(record.host)}, not on this machine ({here}); its VM {name} was not touched",
            hint=f"run `tpuctl stop {record.run_id}` there, or `tpuctl delete {name} --zone {zone}` if you know it is done",
            exit_code=FAILED,
        )
    records.proven(record)
    shared = [other.run_id for other in others if other.run_id != record.run_id and label_value(other.run_id) == label_value(record.run_id)]
    if shared:  # a 64-bit hash apart: never seen, but then the label proves nothing, and nothing is deleted on its word
        raise TpuctlError(f"run {record.run_id}'s label value is also run {shared[0]}'s; its VM {name} was not touched", exit_code=FAILED)
    api = tpu_api(resolve(project=project, zone=zone))
    with StatusLine(f"deleting {name}") as progress:
        outcome = delete_owned(api, zone, name, record.run_id, progress)
    ended = replace(record, node_fate=NODE_DELETED)  # gone either way: a node of that name without the label is another's
    if record.state == Kind.LOST:
        ended = replace(ended, ended=record.ended if record.ended is not None else time.time())
    try:
        records.write(ended)
    except OSError as err:
        raise TpuctlError(f"{name}: {outcome.value}, but run {record.run_id}'s record could not be written: {err.strerror or err}", exit_code=FAILED) from None
    if outcome is Deletion.NOT_OURS:
        raise TpuctlError(
            f"TPU VM {name} in {zone} does not carry run {record.run_id}'s label ({LABEL_KEY}={label_value(record.run_id)}): not deleted;"
            " the run's own VM is gone (its record says so now)",
            hint=f"tpuctl deletes only a VM it created for the run; if this one is yours to delete: tpuctl delete {name} --zone {zone}",
            exit_code=FAILED,
        )
    done = f"deleted TPU VM {name} in {zone}" if outcome is Deletion.DELETED else f"TPU VM {name} in {zone} was already gone"
    return f"{done} (run {record.run_id}, {record.state}); its record says so"


def delete_every(found: list[RunRecord], yes: bool, say: Callable[[str], None]) -> int:
    """`tpuctl runs --delete-lost-vms`: every orphaned VM of this machine's records, after one confirmation; the
    exit status (1 where any was refused or failed: each gets its line, the others are still deleted)."""
    left = [record for record in found if orphaned(record)]
    if not left:
        click.echo("no lost run has a TPU VM that still bills")
        return 0
    for record in left:
        click.echo(f"  {record.created_node} in {record.zone} (project {record.project}): run {record.run_id}, {record.state}")
    if not yes:
        from tpuctl.cli.node_ops import confirm

        confirm(f"delete these {len(left)} TPU VM(s)?")
    failed = 0
    for record in left:
        try:
            click.echo(delete_vm(record, found))
        except TpuctlError as err:
            failed += 1
            say(f"run {record.run_id}: {err.message}")
    return FAILED if failed else 0


def _checked(record: RunRecord) -> tuple[str, str, str]:
    """The record's node, zone and project, each a valid name, or one line: a record is a file anyone could edit."""
    from tpuctl.cloud.nodes.nodespec import NODE_ID
    from tpuctl.settings.cloud import BY_KEY

    name, zone, project = record.created_node or "", record.zone or "", record.project or ""
    bad = (
        f"names {inputs.shown(name)} as its TPU VM, which is no TPU node name"
        if not NODE_ID.match(name)
        else f"names zone {inputs.shown(zone)}, which is no zone"
        if BY_KEY["zone"].check(zone) is not None
        else f"names project {inputs.shown(project)}, which is no project id"
        if BY_KEY["project"].check(project) is not None
        else None
    )
    if bad is not None:
        raise TpuctlError(f"run {record.run_id}'s record {bad}; nothing deleted", hint="the record is not as tpuctl wrote it", exit_code=USAGE)
    return name, zone, project

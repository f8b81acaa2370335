"""`tpuctl runs | logs | stop | attach`: every run of yours, its workers' output, stopping it, following its console (docs/runs.md).

RUN is a run id or a unique prefix of one; left out, the newest running run (and a line on
stderr says which). The machinery is tpuctl/runs/ (records, reading, attaching, stopping);
these commands parse, call it and render.

A run deletes the TPU VM tpuctl created for it (`launch --new-tpu`) as it ends; a launcher killed (SIGKILL, a laptop
shut) cannot, and its VM bills on. Such a run's record still names the VM (RunRecord.orphaned), so `tpuctl runs` says
it bills, and `tpuctl stop RUN` or `tpuctl runs --delete-lost-vms` delete it (docs/managed-runs.md). What may be deleted
is decided by the record alone, never by a search: a node named in a record of this machine's, whose run has no
supervisor left, and which carries that run's label (cloud/nodes/run_nodes.py). A node the user made, or another run's,
is left alone with one line saying why.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable

import click

from tpuctl import endings
from tpuctl.cli.cloud_options import api_timeout_option, project_options, zone_option
from tpuctl.cli.display import age, print_table, rich_wanted
from tpuctl.endings import Kind
from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError
from tpuctl.inputs.seconds import Seconds
from tpuctl.inputs.terminal import printable
from tpuctl.runs import records
from tpuctl.runs.naming import default_log_dir
from tpuctl.runs.proof import elsewhere
from tpuctl.runs.records import RunRecord
from tpuctl.runs.stopping import DEFAULT_WAIT_S
from tpuctl.runs.stopping import stop as stop_run
from tpuctl.runs.vm_record import VmRecord

_DAYS = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6})?\Z")
MAX_DAYS = 36500.0
TERMINAL_ROWS = 200  # rows of a table on a terminal without --limit; a pipe gets every run
_HEADERS = ("RUN", "BACKEND", "SCRIPT", "STARTED", "DURATION", "STATE", "EXIT", "LOG DIR")
_VM_HEADERS = ("VM", "ZONE", "KIND")


def _say(line: str) -> None:
    """A notice on stderr; it may quote a record or a log folder's names, so it is made safe for a terminal."""
    click.echo(f"tpuctl: {printable(line)}", err=True)


def _find(run_id: str | None, *, running: bool) -> RunRecord:
    record, chosen = records.find(run_id, _say, running=running)
    if chosen is not None:
        _say(chosen)
    return record


def _days(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    days = float(value.strip()) if _DAYS.match(value.strip()) else 0.0
    if not 0 < days <= MAX_DAYS:
        raise TpuctlError(f"--prune {inputs.shown(value)} is not a number of days", hint=f"a positive number such as 30 or 0.5, at most {MAX_DAYS:g}")
    return days


def _limit(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else inputs.whole_number(value, "--limit", minimum=1, digits=6)


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="A JSON list of the runs: every field of their records, duration_s and cost_usd.")
@click.option("--state", type=click.Choice(endings.RUN_STATES), help="Only the runs in this state.")
@click.option("--limit", metavar="N", callback=_limit, help="Only the newest N runs.")
@click.option("--prune", "prune_days", metavar="DAYS", callback=_days, help="Remove the records of runs that ended more than DAYS ago.")
@click.option("--delete-lost-vms", is_flag=True, help="Delete the TPU VMs tpuctl created for runs that are lost and still bill (asks first).")
@click.option("--yes", "-y", is_flag=True, help="With --delete-lost-vms: do not ask for confirmation.")
@api_timeout_option
def runs(as_json: bool, state: str | None, limit: int | None, prune_days: float | None, delete_lost_vms: bool, yes: bool) -> None:
    """List your runs, newest first: running and ended, every backend, launched attached or with --detach.

    A run whose supervisor died without writing how it ended (SIGKILL, a power cut) shows `lost`;
    a TPU VM tpuctl created for it (`launch --new-tpu`) shows BILLING until it is deleted:
    --delete-lost-vms deletes every such VM named in your run records that still carries its
    run's label (never a VM found by label alone, never one tpuctl did not create).
    --prune removes old records only (never a running run's, nor one whose VM may still bill), and
    only files of yours in your own records folder (never through a symlink); the runs' log folders stay.
    """
    if yes and not delete_lost_vms:
        raise TpuctlError("--yes goes with --delete-lost-vms", exit_code=USAGE)
    if delete_lost_vms:
        if state is not None or limit is not None or as_json or prune_days is not None:
            raise TpuctlError("--delete-lost-vms goes alone (no --state, --limit, --json or --prune)", hint="`tpuctl runs` lists the VMs", exit_code=USAGE)
        sys.exit(_delete_every(records.read_all(_say), yes, _say))
    if prune_days is not None:
        if state is not None or limit is not None:
            raise TpuctlError("--prune does not combine with --state or --limit", hint="prune first, then list", exit_code=USAGE)
        removed = records.prune(prune_days, _say)
        if as_json:
            click.echo(json.dumps({"pruned": [record.run_id for record in removed]}))
        else:
            click.echo(f"removed the records of {len(removed)} run(s) that ended more than {prune_days:g} day(s) ago (their log folders stay)")
        return
    found = [record for record in records.read_all(_say) if state is None or record.state == state]
    found = found[:limit] if limit is not None else found
    now = time.time()
    if as_json:
        body = [{**record.to_json(), "duration_s": round(record.duration(now), 3), "cost_usd": _cost(record, now), **_vm_json(record)} for record in found]
        # One run a line: json's C encoder writes it; indent= would take the pure-Python one, 60% of the listing's time.
        click.echo("[\n" + ",\n".join("  " + json.dumps(run) for run in body) + "\n]" if body else "[]")
        return
    if not found:
        _say("no runs" + (f" {state}" if state else "") + " (a launch adds one: tpuctl launch train.py --detach)")
        return
    _table(found, now, capped=limit is None)
    _warn_billing(found, _say)


def _table(found: list[RunRecord], now: float, *, capped: bool) -> None:
    """Every column in full for a pipe (`awk`, `column`); on a terminal, a table that fits it: the newest
    TERMINAL_ROWS runs (10,000 rows take rich seconds), a log folder in its default place shown as `default`."""
    terminal = rich_wanted(sys.stdout)
    if terminal and capped and len(found) > TERMINAL_ROWS:
        _say(f"the newest {TERMINAL_ROWS} of {len(found)} runs: --limit N shows more, a pipe or --json all; --prune DAYS drops old ones")
        found = found[:TERMINAL_ROWS]
    default = str(default_log_dir("RUN")) if terminal else None
    with_job = any(record.job for record in found)
    with_goodput = any(record.goodput is not None for record in found)  # a column only once a run trained (docs/report.md)
    vms = [record.vm for record in found if record.vm is not None]
    with_vm = any(vm.created_node is not None for vm in vms)  # a VM tpuctl created for a run (launch --new-tpu)
    with_cost = with_vm or any(vm.price_per_hour is not None for vm in vms)  # a column only once a run was priced (a TPU VM's)
    rows = [
        _row(record, now, with_job, default)
        + ([_goodput(record)] if with_goodput else [])
        + (_vm_row(record) if with_vm else [])
        + ([_cost_text(record, now)] if with_cost else [])
        for record in found
    ]
    headers = (*_HEADERS, *(["JOB"] if with_job else []), *(["GOODPUT"] if with_goodput else []), *(_VM_HEADERS if with_vm else ()))
    headers += ("COST",) if with_cost else ()
    print_table(headers, rows, whole=("RUN", "STATE", "EXIT", "VM"))
    if default is not None and any(row[7] == "default" for row in rows):
        _say(f"LOG DIR default: {_home(default)}")
    if with_cost:
        _say("COST: wall time x the TPU VM's list price per hour as the run started, no discounts (`tpuctl report RUN` splits it)")


def _row(record: RunRecord, now: float, with_job: bool, default: str | None) -> list[str]:
    log_dir = "default" if default is not None and record.log_dir == default.replace("RUN", record.run_id) else _home(record.log_dir)
    exit_code = "-" if record.exit_code is None else str(record.exit_code)
    started, took = f"{age(now - record.started)} ago", age(record.duration(now))
    row = [record.run_id, record.backend or record.kind, record.script, started, took, record.state, exit_code, log_dir]
    return [*row, record.job or "-"] if with_job else row


def _goodput(record: RunRecord) -> str:
    """An ended run's goodput; `-` while it runs (`tpuctl report RUN` tells it so far) or where it saw no steps."""
    return "-" if record.goodput is None or record.state == endings.RUNNING else f"{record.goodput:.0%}"


def _cost(record: RunRecord, now: float) -> float | None:
    """USD of a run on TPU VMs at their list prices (kept in its record), so far for a running one."""
    cost = record.cost(now)
    return None if cost is None else round(cost, 2)


def _cost_text(record: RunRecord, now: float) -> str:
    cost = _cost(record, now)
    if cost is None:
        return "no list price" if record.vm is not None and record.vm.created_node is not None else "-"  # a reservation's, flex-start's: tpuctl never guesses
    return f"${cost:,.2f}"


def _vm_row(record: RunRecord) -> list[str]:
    """VM, ZONE, KIND of a run on a TPU VM tpuctl created for it; dashes for any other run."""
    vm = record.vm
    if vm is None or vm.created_node is None:
        return ["-", "-", "-"]
    return [_vm_text(vm, record.orphaned), vm.zone or "-", vm.capacity or "-"]


def _vm_json(record: RunRecord) -> dict[str, bool]:
    """vm_billing: the VM tpuctl created for the run may still bill; vm_orphaned: and nobody is left to delete it."""
    return {"vm_billing": record.bills, "vm_orphaned": record.orphaned}


def _home(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home not in ("", "/") and path.startswith(home + "/") else path


@click.command("logs")
@click.argument("run_id", metavar="[RUN]", required=False)
@click.option("--worker", metavar="N|TYPE:N", help="Only this worker: its index (1 is worker:1), or TYPE:N such as chief:0.")
@click.option("-f", "--follow", is_flag=True, help="Follow: new lines, attempts and workers as they come, until the run ends.")
def logs(run_id: str | None, worker: str | None, follow: bool) -> None:
    """Print a run's worker output from its log folder, tagged as its console tags it, every attempt in order.

    Works while the run goes on and after it ended, for every backend (a Vertex or Kubernetes
    job's replicas are saved in the same layout). Each worker's lines come together, in the
    cluster's order; with --follow, lines from then on come as they are written.
    """
    from tpuctl.launch.console import logs as console
    from tpuctl.runs import reading

    selected = reading.worker_name(worker) if worker is not None else None
    record = _find(run_id, running=False)
    colour = console.use_colour(sys.stdout)
    shown = 0
    pending: list[str] = []  # written in pieces: one write a line is slow (and PYTHONUNBUFFERED makes each a syscall)

    def flush() -> None:
        sys.stdout.write("".join(pending))
        sys.stdout.flush()
        pending.clear()

    for event in reading.lines(record.folder, _say, worker=selected, follow=follow, idle=flush):
        if isinstance(event, reading.NewAttempt):
            pending.append(f"--- attempt {event.number} ---\n")
            continue
        prefix = console.tag(event.log.worker, event.log.position, colour, host=event.log.host)
        pending.append(f"{prefix} {console.display_text(event.raw)}".rstrip() + "\n")  # a progress bar's redraws: its last
        shown += 1
        if len(pending) >= 512 or len(event.raw) > 4096:  # a few hundred KiB at most (a line is cut at 64 KiB)
            flush()
    flush()
    if not shown:
        _say(f"no worker output in {record.log_dir} (run {record.run_id}, {record.state})")


@click.command("stop")
@click.argument("run_id", metavar="[RUN]", required=False)
@click.option("--wait", "wait_s", type=Seconds(), metavar="S", default=DEFAULT_WAIT_S, show_default=True, help="Seconds to wait for a run to stop.")
@project_options
@zone_option
def stop(run_id: str | None, wait_s: float, **cloud: str | None) -> None:
    """Stop a run of yours as Ctrl-C stops an attached launch, and wait until it has.

    RUN is a run id or a unique prefix of one (stderr says which run it took); left out, the newest
    running run. Every worker is stopped and the run ends `stopped`; a Vertex AI job is cancelled,
    a Kubernetes job deleted. Only a supervisor proven to be the run's is signalled (its record and
    log folder yours alone, its process started when the record says and holding the folder's lock
    itself): a record that fails that is refused in one line, with nothing written or signalled.
    A run that already ended is left as it is (exit 0). A TPU VM is stopped with
    `tpuctl stop-vm NAME`; the old `tpuctl stop NAME` for one still works for now (with a notice on
    stderr), which is all --project, --zone and the credentials options are for here.
    """
    if run_id is not None and not records.names_a_run(run_id, _say):
        from tpuctl.cli import node_ops

        if not node_ops.stop_vm_by_old_name(run_id, **cloud):
            hint = "`tpuctl runs` lists your runs; a TPU VM is stopped with `tpuctl stop-vm NAME`"
            raise TpuctlError(f"no such run: {inputs.shown(run_id)}", hint=hint, exit_code=USAGE)
        return
    if any(value is not None for value in cloud.values()):
        raise TpuctlError("--project, --zone and the credentials options are for a TPU VM (tpuctl stop-vm NAME), not a run", exit_code=USAGE)
    record = _find(run_id, running=True)
    if record.orphaned:  # lost (or ended with its launcher dead) and its VM still bills: ending it is deleting that
        click.echo(printable(_delete_vm(record, records.read_all(_say))))
        return
    if record.state != endings.RUNNING:
        click.echo(printable(f"run {record.run_id} already ended: {_how(record)}"))
        return
    ended = stop_run(record, _say, _say, wait_s)
    click.echo(printable(f"run {ended.run_id} {_how(ended) if ended.state == Kind.STOPPED else f'ended: {_how(ended)}'}"))


def _how(record: RunRecord) -> str:
    if record.state == Kind.LOST:
        job = f"; {record.job} may still run: docs/runs.md says how to end it" if record.job else ""
        return f"lost (its supervisor ended without writing how the run ended){job}"
    return f"{record.state} (exit {record.exit_code})" if record.exit_code is not None else record.state


@click.command("attach")
@click.argument("run_id", metavar="[RUN]", required=False)
def attach(run_id: str | None) -> None:
    """Follow a detached run's console from its start, as if it had been launched attached; exit with its exit status.

    Ctrl-C detaches and leaves the run running (`tpuctl stop RUN` stops it). A run that
    already ended shows its whole console, summary included.
    """
    from tpuctl.runs import attaching

    record = _find(run_id, running=True)
    out = sys.stdout.buffer

    def write(piece: bytes) -> None:
        out.write(piece)
        out.flush()

    result = attaching.attach(record, write, _say)
    ended = result.record
    if result.detached:
        _say(f"detached from {ended.run_id}; it runs on: tpuctl stop {ended.run_id} stops it")
        sys.exit(endings.INTERRUPTED)
    if ended.exit_code is None:
        raise TpuctlError(f"run {ended.run_id} {_how(ended)}", hint=f"its workers' output: tpuctl logs {ended.run_id}", exit_code=FAILED)
    sys.exit(ended.exit_code)


def _vm_text(vm: VmRecord, orphaned: bool) -> str:
    """The VM column of `tpuctl runs`: the node's name and, once it is no longer simply the run's, what became of it."""
    if orphaned:
        return f"{vm.created_node} (BILLING)"
    return f"{vm.created_node}" if vm.bills else f"{vm.created_node} ({vm.node_fate})"


def _warn_billing(found: list[RunRecord], say: Callable[[str], None]) -> None:
    """One line per orphaned VM under the listing (at most 5, then a count): what bills, where, and how to end it."""
    left = [record for record in found if record.orphaned]
    for record in left[:5]:
        vm = f"TPU VM {_vm(record).created_node} in {_vm(record).zone}"
        say(f"run {record.run_id} ({record.state}) left its {vm} billing: `tpuctl stop {record.run_id}` deletes it")
    if len(left) > 5:
        say(f"... and {len(left) - 5} more run(s) that left a VM billing")
    if left:
        say("`tpuctl runs --delete-lost-vms` deletes every lost run's VM (only VMs tpuctl created for them)")


def _delete_vm(record: RunRecord, others: list[RunRecord]) -> str:
    """Delete the VM an orphaned run's record names, then write its fate; the line that says so, or one line
    (TpuctlError) where it may not be.

    The record is the whole authority: its node name, project and zone, checked as names before any call; its file
    must be the user's own in a folder only the user can write (records.proven), and no other record (`others`:
    this machine's) may map to the same label value; the node must still carry the run's label (a node of that name without it is not the run's VM, which is
    then gone: the fate is written, the node left alone). What the record says then is RunRecord.vm_gone's."""
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
    try:
        records.write(record.vm_gone(outcome is not Deletion.NOT_OURS, time.time()))
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


def _delete_every(found: list[RunRecord], yes: bool, say: Callable[[str], None]) -> int:
    """`tpuctl runs --delete-lost-vms`: every orphaned VM of this machine's records, after one confirmation; the
    exit status (1 where any was refused or failed: each gets its line, the others are still deleted)."""
    left = [record for record in found if record.orphaned]
    if not left:
        click.echo("no lost run has a TPU VM that still bills")
        return 0
    for record in left:
        vm = _vm(record)
        click.echo(f"  {vm.created_node} in {vm.zone} (project {vm.project}): run {record.run_id}, {record.state}")
    if not yes:
        from tpuctl.cli.node_ops import confirm

        confirm(f"delete these {len(left)} TPU VM(s)?")
    failed = 0
    for record in left:
        try:
            click.echo(_delete_vm(record, found))
        except TpuctlError as err:
            failed += 1
            say(f"run {record.run_id}: {err.message}")
    return FAILED if failed else 0


def _checked(record: RunRecord) -> tuple[str, str, str]:
    """The record's node, zone and project, each a valid name, or one line: a record is a file anyone could edit."""
    from tpuctl.cloud.nodes.nodespec import NODE_ID
    from tpuctl.settings.cloud import BY_KEY

    vm = _vm(record)
    name, zone, project = vm.created_node or "", vm.zone or "", vm.project or ""
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


def _vm(record: RunRecord) -> VmRecord:
    """The VM an orphaned run's record names (RunRecord.orphaned: it has one)."""
    assert record.vm is not None
    return record.vm

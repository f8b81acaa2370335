"""TPU node lifecycle with idempotent steps: each one first looks at what exists.

`create` reuses a node with the same spec, `delete` of a gone node and `stop`
of a stopped node are no-ops, and every wait polls the node itself (not only
the operation) so a create whose reply was lost, or one started by an earlier
interrupted run, is still followed to READY.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tpuctl.cloud.nodes import nodespec
from tpuctl.cloud.nodes.creating import AS_ASKED, Accepted, Heard, Naming, Terms, deaf
from tpuctl.cloud.nodes.node import Node, last_part
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import NodeApi, Queued
from tpuctl.cloud.plumbing.api_errors import INTERNAL, Unanswered, Where, operation_failed
from tpuctl.endings import INTERRUPTED
from tpuctl.inputs.errors import FAILED, CapacityError, QuotaError, Stockout, TpuctlError

# (state, seconds since the wait began) -> shown to the user
Progress = Callable[[str, float], None]
FIRST_POLL_S = 0.1
# 2 s, not more: a create's operation ending (a stockout after ~10 s) is seen at most 2 s late, which a hunt over
# ten zones pays ten times (benchmarks/hunt.py). A 30-minute create then polls about 900 times instead of ~360: two
# reads a poll (operation, node), about one request a second from one wait, far below the per-minute read-request
# quotas Google Cloud APIs are given per project (the TPU API's: console, IAM & Admin > Quotas, tpu.googleapis.com).
MAX_POLL_S = 2.0
QUEUED_WAITING = ("CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING")
DELETE_DEADLINE_S = 900.0  # a node is usually gone in a few minutes; one still DELETING after 15 is the service's to finish
LATE_CREATE_S = 10.0  # how long a create request a Ctrl-C cut off (its reply never read) is watched for the node it may make


class _FirstInternal(Exception):
    """A create's operation ended in an opaque INTERNAL once: tried again before it counts (operation_failed)."""


def _polls(sleep: Callable[[float], None]) -> Callable[[], None]:
    """Short polls first (stand-ins and quick operations), backing off to MAX_POLL_S for long creates."""
    interval = [FIRST_POLL_S]

    def wait() -> None:
        sleep(interval[0])
        interval[0] = min(MAX_POLL_S, interval[0] * 1.6)

    return wait


@dataclass(frozen=True)
class Ensured:
    node: Node
    created: bool  # False when an existing node with the same spec was reused
    spec: NodeSpec  # what the node is: a reused node keeps its own runtime where the user named none


def ensure(api: NodeApi, spec: NodeSpec, progress: Progress, terms: Terms = AS_ASKED, heard: Heard = deaf) -> Ensured:
    """The node as specified: reused when it exists with this spec, created otherwise, as `terms` say (creating.py);
    `heard` hears the create's Naming before the request is sent and its Accepted before the wait.

    A create that stocks out (CapacityError, with its kind), meets a quota or fails after the service accepted it leaves
    nothing behind: what it made (node, queued resource) is deleted and the spec it saved taken back; one whose request
    got no usable answer says how to delete what the service may still make. A node found DELETING (an interrupted
    delete) is waited for, then made anew."""
    sleep, deadline_s, runtime_given = terms.sleep, terms.deadline_s, terms.runtime_given
    existing = api.get_node(spec.zone, spec.name)
    if existing is not None and existing.state == "DELETING":  # an interrupted delete's: gone soon, then made anew
        _gone(api, Removed(spec.name, spec.zone, existing.state, None), None, progress, sleep, deadline_s)
        existing = None
    if existing is not None:
        spec = _adopt(spec, existing, runtime_given)
        _check_reusable(spec, existing)
        if nodespec.load(spec.project, spec.zone, spec.name) is None:
            nodespec.save(spec)
        node = wait_ready(api, spec, None, progress, sleep=sleep, deadline_s=deadline_s, reused=True) if terms.wait else existing
        return Ensured(node, created=False, spec=spec)
    operation: str | None = None
    made = True  # False: the create met a node or queued resource of that name, an earlier create's or someone's
    heard(Naming(spec))
    try:
        if spec.queues():
            made = api.create_queued(spec.zone, spec.name, spec.queued_resource())
        else:
            try:
                operation = api.create_node(spec.zone, spec.name, spec.resource())
            except CapacityError as refused:
                raise _cleaned(api, spec, refused, progress, sleep) from None
    except Unanswered as lost:  # the request went out (a reply lost, cut short or unreadable): the node may be made all the same
        raise lost.retold(f"{lost.message}; the service may still make {spec.name}: {delete_command(spec.name, spec.zone)}") from None
    if not spec.queues() and operation is None:
        made = False  # 409: our own earlier attempt (a lost reply) or someone else's node
        raced = api.get_node(spec.zone, spec.name)
        if raced is not None:
            spec = _adopt(spec, raced, runtime_given)
            _check_reusable(spec, raced)
    # Saved before the wait, so an interrupted create can still be recreated or deleted by name; a try that
    # fails takes back the spec it saved (not one an earlier create saved: recreate and babysit need that).
    pending = nodespec.load(spec.project, spec.zone, spec.name) is None
    nodespec.save(spec)
    heard(Accepted(spec))  # after the save: a Ctrl-C while prices are read still leaves a node tpuctl can find by name
    if not terms.wait:
        found = api.get_node(spec.zone, spec.name)
        return Ensured(found or Node({"name": spec.path()}, spec.zone), created=True, spec=spec)
    try:
        if spec.queues():
            wait_queued(api, spec, progress, sleep=sleep, deadline_s=terms.queued_deadline_s)
            return Ensured(wait_ready(api, spec, None, progress, sleep=sleep), created=True, spec=spec)
        return Ensured(_created(api, spec, operation, progress, sleep, deadline_s), created=True, spec=spec)
    except (CapacityError, QuotaError) as failed:
        if pending:
            nodespec.forget(spec)
        raise _cleaned(api, spec, failed, progress, sleep) from None
    except TpuctlError as failed:
        if pending:
            nodespec.forget(spec)
        if not made and not spec.queues():
            raise  # a node this call did not make: left as it is
        raise failed.retold(f"{failed.message}; {_clean(api, spec, progress, sleep)}") from None


class Interrupted(TpuctlError):
    """A create stopped by Ctrl-C (or TERM/HUP, which `create` turns into it), its message saying what is left."""

    default_exit = INTERRUPTED


def attempt(api: NodeApi, spec: NodeSpec, progress: Progress, terms: Terms = AS_ASKED, heard: Heard = deaf) -> Ensured:
    """One `ensure` that a Ctrl-C may cut short: what this call made (node, queued resource, saved spec) is deleted
    then, never a node that was there before; where that cannot be done (a second Ctrl-C, an API error) the line
    names what may be left and the command that deletes it."""
    existed = api.get_node(spec.zone, spec.name) is not None
    saved_before = nodespec.load(spec.project, spec.zone, spec.name) is not None
    sent = [False]
    sleep = terms.sleep

    def told(event: Naming | Accepted) -> None:
        heard(event)
        sent[0] = sent[0] or isinstance(event, Naming)  # the create request goes next: from here the service may make the node

    try:
        return ensure(api, spec, progress, terms, told)
    except KeyboardInterrupt:
        if existed:
            raise Interrupted(f"interrupted; {spec.name} in {spec.zone} was there before and is left as it is") from None
        doing = f"interrupted while creating {spec.name} in {spec.zone}"
        try:
            removed = remove(api, spec.zone, spec.name, progress, queued_id=spec.queued_id(), forget=False, sleep=sleep)
            if not removed.found and sent[0]:
                removed = late(api, spec, progress, sleep)
            if not saved_before:
                nodespec.forget(spec)
        except (KeyboardInterrupt, TpuctlError):
            raise Interrupted(f"{doing}; it may be left: {delete_command(spec.name, spec.zone)}") from None
        if removed.found:
            were = "were" if removed.node and removed.queued else "was"
            raise Interrupted(f"{doing}; {removed.what()} it had made {were} deleted, nothing was left behind") from None
        if sent[0]:
            later = f"should the service still make it, {delete_command(spec.name, spec.zone)}"
            raise Interrupted(f"{doing}; nothing was made within {LATE_CREATE_S:.0f} s; {later}") from None
        raise Interrupted(f"{doing}; nothing had been made, nothing was left behind") from None


def late(api: NodeApi, spec: NodeSpec, progress: Progress, sleep: Callable[[float], None], *, wait: bool = True, forget: bool = False) -> Removed:
    """The node (or queued resource) an interrupted create request makes after all, removed once it shows (`wait`,
    `forget`: as remove's); nothing removed when none shows within LATE_CREATE_S."""
    started = time.monotonic()
    while time.monotonic() - started < LATE_CREATE_S:
        progress("looking for what the interrupted create may still make", time.monotonic() - started)
        sleep(0.5)
        removed = remove(api, spec.zone, spec.name, progress, queued_id=spec.queued_id(), forget=forget, wait=wait, sleep=sleep)
        if removed.found:
            return removed
    return Removed(spec.name, spec.zone, None, None)


def _created(api: NodeApi, spec: NodeSpec, operation: str | None, progress: Progress, sleep: Callable[[float], None], deadline_s: float) -> Node:
    """The created node; an opaque INTERNAL ends the first try only, its leftovers deleted and the create sent again
    with what is left of the deadline (a hunt's bound holds across both)."""
    started = time.monotonic()
    try:
        return wait_ready(api, spec, operation, progress, sleep=sleep, deadline_s=deadline_s)
    except _FirstInternal:
        progress("internal error; trying once more", 0.0)
        _clean(api, spec, progress, sleep)
        operation = api.create_node(spec.zone, spec.name, spec.resource())
        left = max(0.0, deadline_s - (time.monotonic() - started))
        return wait_ready(api, spec, operation, progress, sleep=sleep, deadline_s=left, repeated=True)


def _clean(api: NodeApi, spec: NodeSpec, progress: Progress, sleep: Callable[[float], None]) -> str:
    """Remove whatever a failed try left (a node CREATING, PREEMPTED, a FAILED queued resource keeping its id taken, ...);
    what the user is told about it. The saved spec is the caller's to take back (ensure keeps an earlier create's)."""
    try:
        removed = remove(api, spec.zone, spec.name, progress, queued_id=spec.queued_id(), forget=False, sleep=sleep)
    except TpuctlError as err:
        return f"{spec.name} may be left in {spec.zone} ({err.message}): {delete_command(spec.name, spec.zone)}"
    if not removed.found:
        return "nothing was left behind"
    return f"{removed.what()} it left {'were' if removed.node and removed.queued else 'was'} deleted, nothing was left behind"


def delete_command(name: str, zone: str) -> str:
    """How the user deletes what tpuctl may have left of node `name`: `tpuctl delete` removes the node and the
    queued resource that made it, or the queued resource alone once its node is gone (`remove`)."""
    return f"`tpuctl delete {name} --zone {zone}` deletes it"


def _cleaned(api: NodeApi, spec: NodeSpec, failed: TpuctlError, progress: Progress, sleep: Callable[[float], None]) -> TpuctlError:
    """The failure of a try, once its leftovers are deleted, in one line that says what is left."""
    left = _clean(api, spec, progress, sleep)
    if isinstance(failed, CapacityError):
        line = f"{spec.zone}: no capacity for {spec.accelerator()} ({failed.kind.value}); {left}"
        return CapacityError(line, kind=failed.kind, hint=failed.hint)
    return failed.retold(f"{failed.message}; {left}") if isinstance(failed, QuotaError) else QuotaError(f"{failed.message}; {left}", hint=failed.hint)


def _adopt(spec: NodeSpec, node: Node, runtime_given: bool) -> NodeSpec:
    return spec if runtime_given or not node.runtime_version else replace(spec, runtime_version=node.runtime_version)


def _check_reusable(spec: NodeSpec, node: Node) -> None:
    differences = spec.differences(node)
    if differences:
        raise TpuctlError(
            f"node {spec.name} already exists in zone {spec.zone} with a different spec: " + "; ".join(differences),
            hint="delete it first (`tpuctl delete`) or choose another name",
            exit_code=FAILED,
        )
    if node.lost:
        raise TpuctlError(
            f"node {spec.name} exists but is {node.state}",
            hint=f"`tpuctl recreate {spec.name}` deletes and creates it again",
            exit_code=FAILED,
        )


def _finished(api: NodeApi, zone: str, operation: str, where: Where, *, creating: bool = False, repeated: bool = False) -> bool:
    """Whether the operation is done; one that ended in error ends the wait with its reason."""
    done = api.operation(zone, operation)
    if done.failed and done.error_code == INTERNAL and creating and not repeated:
        raise _FirstInternal(done.error_message)
    if done.failed:
        raise operation_failed(done.error_code, done.error_message, where, creating=creating, repeated=repeated)
    return done.done


def wait_ready(
    api: NodeApi,
    spec: NodeSpec,
    operation: str | None,
    progress: Progress,
    *,
    sleep: Callable[[float], None] = time.sleep,
    deadline_s: float | None = None,
    repeated: bool = False,
    reused: bool = False,
) -> Node:
    """Poll until READY and HEALTHY; a failed operation or a vanished node ends the wait with its reason.

    With `deadline_s` the wait follows a create of its own: a node still CREATING past it, or PREEMPTED
    before it was ever READY (a spot node taken back while being made), is a stockout. `reused`: the node was
    there before (an interrupted create's): not READY by `deadline_s` is one line naming it, and it is left as it is."""
    where = Where(f"create node {spec.name}", spec.project, spec.zone, "tpu.nodes.create")
    creating = deadline_s is not None and not reused
    started = time.monotonic()
    pause = _polls(sleep)
    while True:
        if operation and _finished(api, spec.zone, operation, where, creating=creating, repeated=repeated):
            operation = None
        node = api.get_node(spec.zone, spec.name)
        elapsed = time.monotonic() - started
        if node is None:
            if operation is None:
                raise TpuctlError(
                    f"node {spec.name} disappeared while it was being created in zone {spec.zone}",
                    hint="the service may have run out of capacity or preempted it; try again, --spot, or another zone",
                    exit_code=FAILED,
                )
            progress("CREATING", elapsed)
        else:
            health = node.health or "HEALTH_UNSPECIFIED"
            progress(node.state if node.state != "READY" or node.ready else f"READY, {health}", elapsed)
            if node.ready:
                return node
            if node.state == "PREEMPTED" and creating:
                raise CapacityError(f"{spec.name} was preempted while being created", kind=Stockout.PREEMPTED)
            if node.lost:
                raise TpuctlError(f"node {spec.name} became {node.state} while starting", exit_code=FAILED)
        if reused and deadline_s is not None and elapsed > deadline_s and node is not None:
            raise TpuctlError(
                f"node {spec.name} in {spec.zone} was there already and is still {node.state} after {deadline_s:.0f} s",
                hint=f"wait and run this again; {delete_command(spec.name, spec.zone)}, and a rerun then makes it anew",
                exit_code=FAILED,
            )
        if creating and deadline_s is not None and elapsed > deadline_s and (node is None or node.state == "CREATING"):
            raise CapacityError(f"{spec.name} was still CREATING after {deadline_s:.0f} s", kind=Stockout.STUCK)
        pause()


def wait_queued(
    api: NodeApi, spec: NodeSpec, progress: Progress, *, sleep: Callable[[float], None] = time.sleep, deadline_s: float | None = None
) -> None:
    """A queued resource waits (possibly hours) for capacity; follow it until its node exists. With `deadline_s`
    (a hunt's try), one still waiting past it is a stockout (Stockout.QUEUED): the caller deletes the request."""
    started = time.monotonic()
    pause = _polls(sleep)
    where = Where(f"queue resource {spec.name}", spec.project, spec.zone, "tpu.queuedresources.create")
    while True:
        queued = api.get_queued(spec.zone, spec.name)
        if queued is None:
            raise TpuctlError(f"queued resource {spec.name} disappeared in zone {spec.zone}", exit_code=FAILED)
        progress(f"queued: {queued.state}", time.monotonic() - started)
        if queued.state == "ACTIVE":
            return
        if queued.state == "FAILED" and queued.error_code:
            # Its failedData.error reads as a create's operation error: no capacity (code 8, a flex-start or a
            # `--valid-until` that found none in time), "Insufficient reserved capacity" (code 9), a quota, ...
            raise operation_failed(queued.error_code, queued.error_message, where, creating=True, repeated=True)
        if queued.state not in QUEUED_WAITING:
            raise TpuctlError(
                f"queued resource {spec.name} is {queued.state} in zone {spec.zone}",
                hint="`--valid-until` may have passed; delete it and queue again",
                exit_code=FAILED,
            )
        if deadline_s is not None and time.monotonic() - started > deadline_s:
            raise CapacityError(f"{spec.name} was still {queued.state} after {deadline_s:.0f} s", kind=Stockout.QUEUED)
        pause()


@dataclass(frozen=True)
class Removed:
    """What `remove` found and deleted: the states the node and the queued resource that made it were in (None: none)."""

    name: str
    zone: str
    node: str | None
    queued: str | None
    queued_id: str = ""
    kept_queued: str = ""  # a queued resource that asks for other nodes too: left as it is, named here

    @property
    def found(self) -> bool:
        return self.node is not None or self.queued is not None

    def what(self) -> str:
        """The things removed, in words: `the READY node` and `the SUSPENDED queued resource`."""
        return " and ".join(f"the {state} {thing}" for state, thing in ((self.node, "node"), (self.queued, "queued resource")) if state)

    def line(self) -> str:
        """One line for the user: what was deleted where, or that nothing was there."""
        if not self.found:
            return f"{self.name} does not exist in {self.zone}; nothing to delete"
        if self.node is None:
            done = f"queued resource {self.queued_id} ({self.queued}), which had outlived its node {self.name},"
        else:
            done = f"node {self.name} ({self.node})" + (f" and its queued resource {self.queued_id} ({self.queued})" if self.queued else "")
        kept = f"; queued resource {self.kept_queued} asks for other nodes too and is left as it is" if self.kept_queued else ""
        return f"deleted {done} in {self.zone}{kept}"


def find(api: NodeApi, zone: str, name: str, queued_id: str | None = None) -> tuple[Node | None, Queued | None, str]:
    """Node `name`, the queued resource that made it (when it asked for that node alone), and the id of one that made
    it but asks for other nodes too ("" if none). Without a node, the queued resource is found by `queued_id`, else
    by the node's own name (tpuctl names its queued resources after their node): a SUSPENDED one outlives its node."""
    node = api.get_node(zone, name)
    if node is not None and not node.queued_resource:
        return node, None, ""  # made directly: no queued resource to look for
    qid = last_part(node.queued_resource) if node is not None else queued_id or name
    queued = api.get_queued(zone, qid)
    if queued is not None and queued.node_ids != (name,):
        return node, None, qid if node is not None else ""
    return node, queued, ""


def remove(
    api: NodeApi,
    zone: str,
    name: str,
    progress: Progress,
    *,
    queued_id: str | None = None,
    wait: bool = True,
    forget: bool = True,
    deadline_s: float = DELETE_DEADLINE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Removed:
    """Delete node `name` and the queued resource that made it: the one way tpuctl deletes a TPU VM (`delete`, a run's
    end, `stop RUN`, `runs --delete-lost-vms`, a hunt's clean-up, recreate's and babysit's). Deleting the node alone
    leaves its queued resource SUSPENDED, which no node listing shows and which still counts against quota (Cloud TPU
    docs, queued-resources: "Delete a queued resource"; FIELD-NOTES); its delete with `force` takes the node too.
    `wait`: until both are gone, for at most `deadline_s`, else one line naming what is left and how to delete it;
    without it, until the service accepted the delete. `forget`: the saved spec goes once the delete is accepted (a
    recreate keeps it: it creates the node again from it). Ownership is the caller's to prove first (run_nodes)."""
    node, queued, kept = find(api, zone, name, queued_id)
    removed = Removed(name, zone, node.state if node else None, queued.state if queued else None, queued.resource_id if queued else "", kept)
    if not removed.found:
        return removed
    operation: str | None = None
    if queued is not None:
        api.delete_queued(zone, queued.resource_id)
    else:
        operation = api.delete_node(zone, name)
    if forget:
        nodespec.forget_named(api.project, zone, name)
    if wait:
        _gone(api, removed, operation, progress, sleep, deadline_s)
    return removed


def _gone(api: NodeApi, removed: Removed, operation: str | None, progress: Progress, sleep: Callable[[float], None], deadline_s: float) -> None:
    """Poll until the node and its queued resource are both gone; a failed delete operation ends it with its reason."""
    zone, name = removed.zone, removed.name
    where = Where(f"delete node {name}", api.project, zone, "tpu.nodes.delete")
    started = time.monotonic()
    pause = _polls(sleep)
    while True:
        if operation and _finished(api, zone, operation, where):
            operation = None
        node = api.get_node(zone, name)
        queued = api.get_queued(zone, removed.queued_id) if removed.queued else None
        if node is None and queued is None:
            return
        elapsed = time.monotonic() - started
        progress(node.state if node is not None else f"queued resource {queued.state if queued else ''}", elapsed)
        if elapsed > deadline_s:
            left = " and ".join(f"{thing} {state}" for thing, state in (("node", node and node.state), ("queued resource", queued and queued.state)) if state)
            raise TpuctlError(
                f"{name} in {zone} is still there after {deadline_s:.0f} s ({left}); the service goes on deleting it",
                hint=f"{delete_command(name, zone)} (it waits again)",
                exit_code=FAILED,
            )
        pause()


def change_power(api: NodeApi, zone: str, name: str, stop: bool, progress: Progress, *, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Stop or start and wait for the end state; False when the node is already there."""
    node = api.get_node(zone, name)
    if node is None:
        raise TpuctlError(f"no node {name} in zone {zone} of project {api.project}", hint="`tpuctl list` shows the nodes", exit_code=FAILED)
    target = "STOPPED" if stop else "READY"
    if node.state == target:
        return False
    verb = "stop" if stop else "start"
    operation = api.stop_node(zone, name) if stop else api.start_node(zone, name)
    where = Where(f"{verb} node {name}", api.project, zone, f"tpu.nodes.{verb}")
    started = time.monotonic()
    pause = _polls(sleep)
    while True:
        # A start stocks out as a create does (code 8 in its operation); repeated: it is not tried twice.
        if operation and _finished(api, zone, operation, where, creating=not stop, repeated=True):
            operation = None
        node = api.get_node(zone, name)
        if node is None:
            raise TpuctlError(f"node {name} disappeared while trying to {verb} it", exit_code=FAILED)
        progress(node.state, time.monotonic() - started)
        if node.state == target:
            return True
        pause()


def recreate(api: NodeApi, spec: NodeSpec, progress: Progress, terms: Terms = AS_ASKED, heard: Heard = deaf) -> Ensured:
    """From the saved spec: a lost (preempted, terminated, deleted) node is replaced; a live one is kept."""
    clear_lost(api, spec, api.get_node(spec.zone, spec.name), progress, terms.sleep)
    return ensure(api, spec, progress, terms, heard)


def clear_lost(api: NodeApi, spec: NodeSpec, existing: Node | None, progress: Progress, sleep: Callable[[float], None]) -> None:
    """Before `spec` is made again: a lost node goes with the queued resource that made it, and a queued resource
    left alone (SUSPENDED) goes too, as it keeps its id taken; a live node is left (the caller keeps or refuses it)."""
    if (existing is not None and existing.lost) or (existing is None and spec.queues()):
        if existing is not None:
            progress(f"deleting {existing.state} node", 0.0)
        remove(api, spec.zone, spec.name, progress, queued_id=spec.queued_id(), forget=False, sleep=sleep)

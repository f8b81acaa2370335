"""What a user asked a TPU node to be, kept locally so it can be compared and recreated.

The service forgets a node once it is preempted and deleted; `tpuctl recreate`
and `tpuctl babysit` need the original request, so every create saves it. The
same spec is what an idempotent `create` compares an existing node against.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from tpuctl.cloud.nodes.node import JSON, Node, last_part
from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.settings import cloud as settings
from tpuctl.tpu import accelerators
from tpuctl.tpu.capacity import FLEX_START, ON_DEMAND, PREEMPTIBLE, RESERVED, SPOT, Capacity, check_reservation, reservation_name, run_duration_s

NODE_ID = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
# Cloud label rules: lower-case keys starting with a letter, values may be empty.
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}\Z")
MAX_LABELS = 64
DURATION = re.compile(r"([0-9]{1,9})([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    project: str
    zone: str
    runtime_version: str
    accelerator_type: str | None = None
    config_type: str | None = None  # AcceleratorConfig.Type name, with topology
    topology: str | None = None
    spot: bool = False
    preemptible: bool = False
    queued: bool = False
    valid_until: str | None = None  # "6h" or an RFC 3339 time, queued resources only
    reserved: bool = False  # take the slice from a reservation (tpuctl/tpu/capacity.py: RESERVED)
    reservation: str | None = None  # with reserved: the one reservation named; None: any the project has
    flex_start: bool = False  # a flex-start queued resource (FLEX_START), deleted after max_run_duration
    max_run_duration: str | None = None  # "7d", "12h": flex-start only
    labels: dict[str, str] = field(default_factory=dict)
    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    startup_script: str | None = None  # the script's text: the file may be gone at recreate time
    # Where a hunting create looked (its --zones spelling, "all" for every zone) and which kinds (its --capacity
    # spelling): babysit hunts the same way when recreating the node. None: the create did not hunt (older specs too).
    hunt_zones: str | None = None
    hunt_capacity: str | None = None
    # The node's description (the API's Node.description): `launch --new-tpu` writes the full run id there, which
    # the label (cut to Cloud's label rules) may not hold whole.
    description: str | None = None

    def accelerator(self) -> str:
        return self.accelerator_type or f"{self.config_type} {self.topology}"

    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.name}"

    def capacity(self) -> str:
        """The capacity kind asked for, as `Node.capacity` names a node's (a stockout is remembered per kind)."""
        if self.flex_start:
            return FLEX_START
        if self.reserved:
            return RESERVED
        return SPOT if self.spot else PREEMPTIBLE if self.preemptible else ON_DEMAND

    def with_capacity(self, capacity: Capacity) -> NodeSpec:
        """This spec asking for `capacity` instead of its own kind: one try of a hunt across kinds."""
        kind = capacity.kind
        return replace(
            self,
            spot=kind == SPOT,
            preemptible=kind == PREEMPTIBLE,
            reserved=kind == RESERVED,
            reservation=capacity.reservation if kind == RESERVED else None,
            flex_start=kind == FLEX_START,
            max_run_duration=self.max_run_duration if kind == FLEX_START else None,
        )

    def queues(self) -> bool:
        """Whether the node is asked for through a queued resource: `--queued`, flex-start (queued resources only)
        and a named reservation (v2 has a reservation's name only on a queued resource, not on a Node)."""
        return self.queued or self.flex_start or self.reservation is not None

    def queued_id(self) -> str | None:
        """The id of the queued resource this spec's create makes (queued_resource: named after the node), None for a
        node created directly."""
        return self.name if self.queues() else None

    def resource(self) -> JSON:
        """The create request's body: the v2 API's JSON `Node`, the same shape `Node.resource` reads."""
        node: JSON = {"runtimeVersion": self.runtime_version, "labels": dict(self.labels)}
        if self.accelerator_type:
            node["acceleratorType"] = self.accelerator_type
        else:
            node["acceleratorConfig"] = {"type": self.config_type, "topology": self.topology}
        # A queued resource carries spot and the reservation itself; the node inside repeats neither (as gcloud).
        if not self.queues() and (self.spot or self.preemptible):
            node["schedulingConfig"] = {"spot": self.spot, "preemptible": self.preemptible}
        if not self.queues() and self.reserved:  # `gcloud compute tpus tpu-vm create --reserved`
            node["schedulingConfig"] = {"reserved": True}
        if self.network or self.subnetwork:
            node["networkConfig"] = {"network": self.network or "", "subnetwork": self.subnetwork or "", "enableExternalIps": True}
        if self.service_account:
            node["serviceAccount"] = {"email": self.service_account, "scope": ["https://www.googleapis.com/auth/cloud-platform"]}
        if self.startup_script is not None:
            node["metadata"] = {"startup-script": self.startup_script}
        if self.description is not None:
            node["description"] = self.description
        return node

    def queued_resource(self) -> JSON:
        """The queued-resource request holding this node: the v2 API's JSON `QueuedResource`, but v2alpha1's for
        flex-start, whose `provisioningModel` and `runDuration` only v2alpha1 has (TpuApi.create_queued sends it there)."""
        parent = f"projects/{self.project}/locations/{self.zone}"
        resource: JSON = {"tpu": {"nodeSpec": [{"parent": parent, "nodeId": self.name, "node": self.resource()}]}}
        if self.spot or self.preemptible:
            resource["spot"] = {}
        if self.reserved:  # gcloud's GA `queued-resources create --reserved` / alpha `--reservation NAME`
            resource["reservationName"] = reservation_name(self.project, self.zone, self.reservation)
        if self.flex_start:  # gcloud alpha `queued-resources create --provisioning-model flex-start --max-run-duration D`
            resource["provisioningModel"] = "FLEX_START"
            if self.max_run_duration:
                resource["runDuration"] = {"maxRunDuration": f"{run_duration_s(self.max_run_duration)}s"}
        if self.valid_until:
            seconds = duration_seconds(self.valid_until)
            if seconds is not None:
                resource["queueingPolicy"] = {"validUntilDuration": f"{seconds}s"}
            else:
                stamp = parse_time(self.valid_until).astimezone(timezone.utc)
                resource["queueingPolicy"] = {"validUntilTime": stamp.isoformat().replace("+00:00", "Z")}
        return resource

    def differences(self, node: Node) -> list[str]:
        """What an existing node has that this spec does not ask for, as `field: have != want` lines."""
        have: dict[str, object] = {"runtime version": node.runtime_version}
        want: dict[str, object] = {"runtime version": self.runtime_version}
        if self.accelerator_type:
            have["accelerator type"], want["accelerator type"] = node.accelerator_type, self.accelerator_type
        else:
            have["accelerator"] = f"{node.config_type or 'TYPE_UNSPECIFIED'} {node.topology}"
            want["accelerator"] = f"{self.config_type} {self.topology}"
        if not self.queues():
            have["spot"], want["spot"] = node.spot, self.spot
            have["preemptible"], want["preemptible"] = node.preemptible, self.preemptible
            have["reserved"], want["reserved"] = node.reserved, self.reserved
        elif self.flex_start or self.reserved:  # only a queued resource makes these: a node made otherwise is another kind
            have["made by a queued resource"], want["made by a queued resource"] = bool(node.queued_resource), True
        if self.labels:
            have["labels"], want["labels"] = node.labels, self.labels
        if self.network:
            have["network"], want["network"] = last_part(node.network), last_part(self.network)
        if self.subnetwork:
            have["subnetwork"], want["subnetwork"] = last_part(node.subnetwork), last_part(self.subnetwork)
        if self.service_account:
            have["service account"], want["service account"] = node.service_account, self.service_account
        if self.startup_script is not None:
            have["startup script"] = "(differs)" if node.metadata.get("startup-script") != self.startup_script else "(same)"
            want["startup script"] = "(same)"
        return [f"{key}: {have[key]!r} != {want[key]!r}" for key in want if have[key] != want[key]]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str) -> NodeSpec:
        """The spec a create saved, or one line saying the file is damaged.

        json.loads recurses once per level, so `[[[…` 100,000 deep is a RecursionError;
        a file that parses must still have every field with the type a create writes,
        or recreate would fail later, far from the cause, with a traceback."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise _damaged(source, err.__class__.__name__) from None
        if not isinstance(data, dict):
            raise _damaged(source, "not a JSON object")
        for name, value in data.items():
            problem = _field_problem(name, value)
            if problem:
                raise _damaged(source, problem)
        try:
            return cls(**data)
        except TypeError as err:
            raise _damaged(source, err.__class__.__name__) from None


# The type each saved field must have: what to_json() writes.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    f: (str,) for f in ("name", "project", "zone", "runtime_version")
} | {
    f: (str, type(None))
    for f in (
        "accelerator_type", "config_type", "topology", "valid_until", "network", "subnetwork", "service_account", "startup_script",
        "reservation", "max_run_duration", "hunt_zones", "hunt_capacity", "description",
    )
} | {f: (bool,) for f in ("spot", "preemptible", "queued", "reserved", "flex_start")} | {"labels": (dict,)}


def _field_problem(name: str, value: object) -> str | None:
    """Why a saved field cannot be what a create wrote, or None."""
    types = _FIELD_TYPES.get(name)
    if types is None:
        return f"unknown field {name[:40]!r}"
    if not isinstance(value, types):
        return f"{name} is a {type(value).__name__}"
    if isinstance(value, dict) and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return f"{name} holds more than text"
    return None


def _damaged(source: str, why: str) -> TpuctlError:
    return TpuctlError(f"saved node spec {source} is damaged: {why}", hint="delete it and create the node again", exit_code=FAILED)


def check_name(name: str) -> str:
    if not NODE_ID.match(name):
        raise TpuctlError(
            f"{name!r} is not a valid TPU node name",
            hint="lower-case letters, digits and hyphens, starting with a letter, at most 63 characters",
        )
    return name


def parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    """`--labels k=v,k2=v2` (repeatable), as gcloud takes them, checked against Cloud's label rules."""
    labels: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            key, sep, text = item.partition("=")
            if not sep or not LABEL_KEY.match(key):
                raise TpuctlError(
                    f"label {item!r} is not KEY=VALUE with a valid key",
                    hint="keys: lower-case letters, digits, _ and -, starting with a letter, at most 63",
                )
            if not LABEL_VALUE.match(text):
                raise TpuctlError(f"label value {text!r} of {key} is not valid", hint="lower-case letters, digits, _ and -, at most 63")
            if key in labels and labels[key] != text:
                raise TpuctlError(f"label {key} is given twice with different values")
            labels[key] = text
    if len(labels) > MAX_LABELS:
        raise TpuctlError(f"{len(labels)} labels given; Cloud allows at most {MAX_LABELS}")
    return labels


def parse_accelerator(accelerator_type: str | None, config_type: str | None, topology: str | None) -> tuple[str | None, str | None, str | None]:
    """Either `--accelerator-type v4-8` or `--type v5litepod --topology 2x4`, never half of each.

    Names are checked against the accelerator table's grammar only: whether a zone
    offers the type (or a generation newer than tpuctl) is the TPU API's to say.
    """
    if config_type or topology:
        if not (config_type and topology):
            raise TpuctlError("--type and --topology go together", hint="e.g. --type v5litepod --topology 2x4")
        if accelerator_type:
            raise TpuctlError("give --accelerator-type or --type/--topology, not both")
        api_type = accelerators.config_type_of(config_type)
        accelerators.topology_dims(topology)
        return None, api_type, topology
    if accelerator_type is None:
        raise TpuctlError("no accelerator type given", hint="e.g. --accelerator-type v4-8 or --type v5litepod --topology 2x4")
    accelerators.split_type(accelerator_type)
    return accelerator_type, None, None


def duration_seconds(text: str) -> int | None:
    found = DURATION.match(text)
    return int(found.group(1)) * _UNIT_S[found.group(2)] if found else None


def parse_time(text: str) -> datetime:
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TpuctlError(f"--valid-until {text!r} is neither a duration nor a time", hint="e.g. 6h, 2d or 2026-12-01T00:00:00Z") from None
    if stamp.tzinfo is None:
        raise TpuctlError(f"--valid-until {text!r} has no time zone", hint="end it with Z or +00:00")
    return stamp


def check_valid_until(text: str) -> str:
    if duration_seconds(text) is None:
        parse_time(text)
    return text



def from_flags(
    name: str,
    *,
    accelerator_type: str | None,
    config_type: str | None,
    topology: str | None,
    runtime_version: str | None,
    spot: bool,
    preemptible: bool,
    queued: bool,
    valid_until: str | None,
    labels: tuple[str, ...],
    network: str | None,
    subnetwork: str | None,
    service_account: str | None,
    startup_script: Path | None,
    reserved: bool = False,
    reservation: str | None = None,
    flex_start: bool = False,
    max_run_duration: str | None = None,
    **cloud: str | None,
) -> tuple[NodeSpec, settings.Settings]:
    """`tpuctl create`'s flags as a checked spec, with the settings they resolve to (cloud: project, zone, credentials).

    Flags that contradict each other fail before any setting is read; the
    accelerator comes from the flags, else from the [cloud] defaults.
    """
    check_name(name)
    check_kind(spot, preemptible, reserved, reservation, flex_start, max_run_duration, queued, valid_until)
    resolved = settings.resolve({**cloud, "accelerator_type": accelerator_type, "runtime_version": runtime_version})
    by_config = bool(config_type or topology)
    accel, api_type, topo = parse_accelerator(accelerator_type if by_config else resolved.get("accelerator-type"), config_type, topology)
    spec = NodeSpec(
        name=name,
        project=resolved.project,
        zone=resolved.zone,
        runtime_version=_runtime_version(resolved, accel, api_type, topo),
        accelerator_type=accel,
        config_type=api_type,
        topology=topo,
        spot=spot,
        preemptible=preemptible,
        queued=queued,
        valid_until=check_valid_until(valid_until) if valid_until else None,
        reserved=reserved,
        reservation=reservation,
        flex_start=flex_start,
        max_run_duration=max_run_duration,
        labels=parse_labels(labels),
        network=network,
        subnetwork=subnetwork,
        service_account=service_account,
        startup_script=_read_script(startup_script) if startup_script else None,
    )
    return spec, resolved


def check_kind(
    spot: bool, preemptible: bool, reserved: bool, reservation: str | None, flex_start: bool, run: str | None, queued: bool, valid_until: str | None
) -> None:
    """One capacity kind per create (a hunt across kinds is `--capacity`'s); each kind's own flags only with it.
    Checked before any setting is read, by a plain create and a hunt alike: a contradiction is the user's to fix first."""
    if spot and preemptible:
        raise TpuctlError("--spot and --preemptible exclude each other", hint="--spot is the current kind")
    if valid_until and not (queued or flex_start):
        raise TpuctlError("--valid-until needs --queued (or --flex-start, which always queues)")
    if reservation is not None and not reserved:
        raise TpuctlError("--reservation needs --reserved", hint="e.g. --reserved --reservation my-reservation")
    if run is not None and not flex_start:
        raise TpuctlError("--max-run-duration needs --flex-start", hint="only flex-start has a run duration: --flex-start, or flex-start in --capacity")
    kinds = [flag for flag, given in (("--spot", spot), ("--preemptible", preemptible), ("--reserved", reserved), ("--flex-start", flex_start)) if given]
    if len(kinds) > 1:
        raise TpuctlError(f"{' and '.join(kinds)} are different capacity kinds; give one")
    if flex_start and run is None:
        raise TpuctlError("--flex-start needs --max-run-duration", hint="how long the slice may run, at most 7d: e.g. --max-run-duration 2d")
    if run is not None:
        run_duration_s(run)
    if reservation is not None:
        check_reservation(reservation)


def _runtime_version(resolved: settings.Settings, accelerator_type: str | None, config_type: str | None, topology: str | None) -> str:
    """The one the user named, else TensorFlow's image for the slice being created (which `--type/--topology`
    may give, not the accelerator-type setting the resolved default was chosen for)."""
    if resolved.given("runtime-version"):
        return resolved.require("runtime-version")
    if accelerator_type is None:  # parse_accelerator gave the type and topology instead
        accelerator_type = accelerators.shape_from_config(config_type or "", topology or "").accelerator_type
    image = settings.default_runtime(accelerator_type)
    if image is None:
        raise TpuctlError(
            f"tpuctl knows no TensorFlow runtime image for {accelerator_type}",
            hint="name one with --runtime-version (`tpuctl runtimes` lists a zone's)",
        )
    return image


def _read_script(path: Path) -> str:
    """The script's text, kept in the spec: the file may be gone when the node is recreated."""
    text = inputs.read_small_text(path, "--startup-script")  # metadata values are at most 256 KiB anyway
    if text is None:
        raise TpuctlError(f"cannot read --startup-script {path}: FileNotFoundError")
    return text

# Saved specs: one JSON file per node under the user's data directory.


def specs_dir() -> Path:
    from platformdirs import user_data_path

    return user_data_path("tpuctl") / "nodes"


def spec_path(project: str, zone: str, name: str) -> Path:
    return specs_dir() / project / zone / f"{name}.json"


def save(spec: NodeSpec) -> Path:
    """Write the spec 0600 into a 0700 folder of this user's (a recreate runs what it says: no one else
    may write or plant a link there), through a fresh temporary file renamed over the old one."""
    from tpuctl.inputs.private_files import private_dir, write_private

    path = spec_path(spec.project, spec.zone, spec.name)
    try:
        private_dir(path.parent)
        write_private(path, spec.to_json() + "\n")
    except OSError as err:
        raise TpuctlError(f"cannot save the node spec to {path}: {err.strerror}", exit_code=FAILED) from None
    return path


def load(project: str, zone: str, name: str) -> NodeSpec | None:
    """The saved spec of a node, None when there is none; a file that is not one a create
    wrote (huge, a device, not UTF-8, damaged) is one line, exit 1."""
    path = spec_path(project, zone, name)
    text = inputs.read_small_text(path, "saved node spec", exit_code=FAILED)
    return None if text is None else NodeSpec.from_json(text, str(path))


def load_saved(project: str, zone: str, name: str, purpose: str) -> NodeSpec:
    """The saved spec, or an error saying that only tpuctl-created nodes have one."""
    spec = load(project, zone, name)
    if spec is None:
        raise TpuctlError(
            f"no saved spec for {name} in project {project}, zone {zone}",
            hint=f"{purpose} uses the spec `tpuctl create` saves; create the node with tpuctl first",
            exit_code=FAILED,
        )
    return spec


def forget(spec: NodeSpec) -> None:
    """Take back the spec a failed create saved: no node, no spec (a later create in another zone is not shadowed)."""
    forget_named(spec.project, spec.zone, spec.name)


def forget_named(project: str, zone: str, name: str) -> None:
    """Remove node `name`'s saved spec, if any: the node is being deleted, so nothing finds it there any more."""
    path = spec_path(project, zone, name)
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        raise TpuctlError(f"cannot remove the saved node spec {path}: {err.strerror}", exit_code=FAILED) from None


def saved_zones(project: str, name: str) -> list[str]:
    """The zones holding a saved spec of node `name` in `project`: where tpuctl created it, for commands given no zone."""
    folder = specs_dir() / project
    if not folder.is_dir():
        return []
    return sorted(zone.name for zone in folder.iterdir() if (zone / f"{name}.json").is_file())

"""What a user asked a TPU node to be, kept locally so it can be compared and recreated.

The service forgets a node once it is preempted and deleted; `tpuctl recreate`
and `tpuctl babysit` need the original request, so every create saves it. The
same spec is what an idempotent `create` compares an existing node against.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tpuctl.errors import FAILED, TpuctlError

if TYPE_CHECKING:
    from google.cloud import tpu_v2

NODE_ID = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
ACCELERATOR_TYPE = re.compile(r"v[0-9]+[a-z]*-[0-9]+\Z")
TOPOLOGY = re.compile(r"[1-9][0-9]*(?:x[1-9][0-9]*){1,2}\Z")
# Cloud label rules: lower-case keys starting with a letter, values may be empty.
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}\Z")
MAX_LABELS = 64
DURATION = re.compile(r"([0-9]+)([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# --type words users write -> the v2 API's AcceleratorConfig.Type
CONFIG_TYPES = {"v2": "V2", "v3": "V3", "v4": "V4", "v5litepod": "V5LITE_POD", "v5e": "V5LITE_POD", "v5p": "V5P", "v6e": "V6E"}


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
    labels: dict[str, str] = field(default_factory=dict)
    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    startup_script: str | None = None  # the script's text: the file may be gone at recreate time

    def accelerator(self) -> str:
        return self.accelerator_type or f"{self.config_type} {self.topology}"

    def to_node(self) -> tpu_v2.Node:
        from google.cloud import tpu_v2

        node = tpu_v2.Node(runtime_version=self.runtime_version, labels=dict(self.labels))
        if self.accelerator_type:
            node.accelerator_type = self.accelerator_type
        else:
            node.accelerator_config = tpu_v2.AcceleratorConfig(type_=self.config_type, topology=self.topology)
        # A queued resource carries spot itself; the node inside must not repeat it.
        if not self.queued and (self.spot or self.preemptible):
            node.scheduling_config = tpu_v2.SchedulingConfig(spot=self.spot, preemptible=self.preemptible)
        if self.network or self.subnetwork:
            node.network_config = tpu_v2.NetworkConfig(network=self.network or "", subnetwork=self.subnetwork or "", enable_external_ips=True)
        if self.service_account:
            node.service_account = tpu_v2.ServiceAccount(
                email=self.service_account, scope=["https://www.googleapis.com/auth/cloud-platform"]
            )
        if self.startup_script is not None:
            node.metadata = {"startup-script": self.startup_script}
        return node

    def to_queued(self) -> tpu_v2.QueuedResource:
        from google.cloud import tpu_v2
        from google.protobuf import duration_pb2, timestamp_pb2

        resource = tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(
                node_spec=[
                    tpu_v2.QueuedResource.Tpu.NodeSpec(
                        parent=f"projects/{self.project}/locations/{self.zone}", node_id=self.name, node=self.to_node()
                    )
                ]
            )
        )
        if self.spot or self.preemptible:
            resource.spot = tpu_v2.QueuedResource.Spot()
        if self.valid_until:
            seconds = duration_seconds(self.valid_until)
            if seconds is not None:
                policy = tpu_v2.QueuedResource.QueueingPolicy(valid_until_duration=duration_pb2.Duration(seconds=seconds))
            else:
                stamp = timestamp_pb2.Timestamp()
                stamp.FromDatetime(parse_time(self.valid_until))
                policy = tpu_v2.QueuedResource.QueueingPolicy(valid_until_time=stamp)
            resource.queueing_policy = policy
        return resource

    def differences(self, node: tpu_v2.Node) -> list[str]:
        """What an existing node has that this spec does not ask for, as `field: have != want` lines."""
        have: dict[str, object] = {"runtime version": node.runtime_version}
        want: dict[str, object] = {"runtime version": self.runtime_version}
        if self.accelerator_type:
            have["accelerator type"], want["accelerator type"] = node.accelerator_type, self.accelerator_type
        else:
            config = node.accelerator_config
            have["accelerator"] = f"{config.type_.name} {config.topology}"
            want["accelerator"] = f"{self.config_type} {self.topology}"
        if not self.queued:
            have["spot"], want["spot"] = bool(node.scheduling_config.spot), self.spot
            have["preemptible"], want["preemptible"] = bool(node.scheduling_config.preemptible), self.preemptible
        if self.labels:
            have["labels"], want["labels"] = dict(node.labels), self.labels
        if self.network:
            have["network"], want["network"] = _last(node.network_config.network), _last(self.network)
        if self.subnetwork:
            have["subnetwork"], want["subnetwork"] = _last(node.network_config.subnetwork), _last(self.subnetwork)
        if self.service_account:
            have["service account"], want["service account"] = node.service_account.email, self.service_account
        if self.startup_script is not None:
            have["startup script"] = "(differs)" if node.metadata.get("startup-script") != self.startup_script else "(same)"
            want["startup script"] = "(same)"
        return [f"{key}: {have[key]!r} != {want[key]!r}" for key in want if have[key] != want[key]]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str) -> NodeSpec:
        try:
            data = json.loads(text)
            return cls(**data)
        except (ValueError, TypeError) as err:
            raise TpuctlError(f"saved node spec {source} is damaged: {err.__class__.__name__}", hint="delete it and create the node again") from None


def _last(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


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
    """Either `--accelerator-type v4-8` or `--type v5litepod --topology 2x4`, never half of each."""
    if config_type or topology:
        if not (config_type and topology):
            raise TpuctlError("--type and --topology go together", hint="e.g. --type v5litepod --topology 2x4")
        if accelerator_type:
            raise TpuctlError("give --accelerator-type or --type/--topology, not both")
        api_type = CONFIG_TYPES.get(config_type.lower())
        if api_type is None:
            raise TpuctlError(f"--type {config_type!r} is not a TPU generation", hint=f"one of {', '.join(CONFIG_TYPES)}")
        if not TOPOLOGY.match(topology):
            raise TpuctlError(f"--topology {topology!r} is not a topology", hint="e.g. 2x4 or 2x2x2")
        return None, api_type, topology
    if accelerator_type is None or not ACCELERATOR_TYPE.match(accelerator_type):
        raise TpuctlError(f"accelerator type {accelerator_type!r} is not valid", hint="e.g. v4-8, v5litepod-16")
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


# Saved specs: one JSON file per node under the user's data directory.


def specs_dir() -> Path:
    from platformdirs import user_data_path

    return user_data_path("tpuctl") / "nodes"


def spec_path(project: str, zone: str, name: str) -> Path:
    return specs_dir() / project / zone / f"{name}.json"


def save(spec: NodeSpec) -> Path:
    path = spec_path(spec.project, spec.zone, spec.name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: an interrupted save must not leave half a spec behind.
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(spec.to_json() + "\n", encoding="utf-8")
        partial.replace(path)
    except OSError as err:
        raise TpuctlError(f"cannot save the node spec to {path}: {err.strerror}", exit_code=FAILED) from None
    return path


def load(project: str, zone: str, name: str) -> NodeSpec | None:
    path = spec_path(project, zone, name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise TpuctlError(f"cannot read the saved node spec {path}: {err.__class__.__name__}", exit_code=FAILED) from None
    return NodeSpec.from_json(text, str(path))


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

"""Vertex AI v1 custom jobs (aiplatform.googleapis.com/v1) as the stand-in serves them, with their Cloud Logging output.

Routes (google/cloud/aiplatform/v1/job_service.proto): ``POST|GET
/v1/projects/P/locations/L/customJobs``, ``GET|DELETE .../customJobs/ID``,
``POST .../customJobs/ID:cancel`` (``{}`` back), and the delete operation at
``GET .../operations/O``. A job moves through the states of its JobScript on
the monotonic clock (timed events applied whenever the stand-in is touched,
no background thread) and writes Cloud Logging entries shaped like Vertex's:
``resource.type="ml_job"`` with labels job_id / project_id / task_name, one
log per task (``projects/P/logs/workerpool0-0``), jsonPayload {message,
levelname, attrs.tag}, plus the service's own textPayload entries under
task_name "service". logging_api.py serves them through entries:list.

Request bodies are checked like Google's front end does (unknown names,
types, enums; wire.py) and then like Vertex's validator does ("List of found
errors:\\t1.Field: ...; Message: ...\\t"), including the TPU machine rules.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tests.standins.logging_api import FilterSyntaxError, LoggingService, evaluate, parse_filter
from tests.standins.project_apis import SERVICE_TITLES
from tests.standins.wire import JSON, ApiError, Enum, Schema, failed_precondition, invalid, normalize, not_found, page, rfc3339

if TYPE_CHECKING:
    from tests.standins.google_apis import GoogleStandin

AIPLATFORM = "aiplatform.googleapis.com"
LOGGING = "logging.googleapis.com"
# Titles for the SERVICE_DISABLED message; registered here so project_apis.py stays untouched.
SERVICE_TITLES.setdefault(AIPLATFORM, "Vertex AI API")
SERVICE_TITLES.setdefault(LOGGING, "Cloud Logging API")

JOB_STATE = Enum(
    "google.cloud.aiplatform.v1.JobState",
    {"JOB_STATE_UNSPECIFIED": 0, "JOB_STATE_QUEUED": 1, "JOB_STATE_PENDING": 2, "JOB_STATE_RUNNING": 3, "JOB_STATE_SUCCEEDED": 4,
     "JOB_STATE_FAILED": 5, "JOB_STATE_CANCELLING": 6, "JOB_STATE_CANCELLED": 7, "JOB_STATE_PAUSED": 8, "JOB_STATE_EXPIRED": 9,
     "JOB_STATE_UPDATING": 10, "JOB_STATE_PARTIALLY_SUCCEEDED": 11},
)  # fmt: skip
ACCELERATOR_TYPE = Enum(
    "google.cloud.aiplatform.v1.AcceleratorType",
    {"ACCELERATOR_TYPE_UNSPECIFIED": 0, "NVIDIA_TESLA_K80": 1, "NVIDIA_TESLA_P100": 2, "NVIDIA_TESLA_V100": 3, "NVIDIA_TESLA_P4": 4,
     "NVIDIA_TESLA_T4": 5, "NVIDIA_TESLA_A100": 8, "NVIDIA_A100_80GB": 9, "NVIDIA_L4": 11, "NVIDIA_H100_80GB": 13,
     "NVIDIA_H100_MEGA_80GB": 14, "NVIDIA_H200_141GB": 15, "NVIDIA_B200": 16, "NVIDIA_GB200": 17, "NVIDIA_RTX_PRO_6000": 18,
     "TPU_V2": 6, "TPU_V3": 7, "TPU_V4_POD": 10, "TPU_V5_LITEPOD": 12},
)  # fmt: skip
RESERVATION_TYPE = Enum(
    "google.cloud.aiplatform.v1.ReservationAffinity.Type",
    {"TYPE_UNSPECIFIED": 0, "NO_RESERVATION": 1, "ANY_RESERVATION": 2, "SPECIFIC_RESERVATION": 3},
)
STRATEGY = Enum(
    "google.cloud.aiplatform.v1.Scheduling.Strategy",
    {"STRATEGY_UNSPECIFIED": 0, "ON_DEMAND": 1, "LOW_COST": 2, "STANDARD": 3, "SPOT": 4, "FLEX_START": 6},
)

ENV_VAR: Schema = {"name": "str", "value": "str"}
MACHINE_SPEC: Schema = {
    "machineType": "str",
    "acceleratorType": ACCELERATOR_TYPE,
    "acceleratorCount": "int",
    "gpuPartitionSize": "str",
    "tpuTopology": "str",
    "reservationAffinity": {"reservationAffinityType": RESERVATION_TYPE, "key": "str", "values": "strs"},
}
WORKER_POOL_SPEC: Schema = {
    "containerSpec": {"imageUri": "str", "command": "strs", "args": "strs", "env": [ENV_VAR]},
    "pythonPackageSpec": {"executorImageUri": "str", "packageUris": "strs", "pythonModule": "str", "args": "strs", "env": [ENV_VAR]},
    "machineSpec": MACHINE_SPEC,
    "replicaCount": "int",  # int64: a JSON string on the way out
    "nfsMounts": [{"server": "str", "path": "str", "mountPoint": "str"}],
    "lustreMounts": [{"instanceIp": "str", "volumeHandle": "str", "filesystem": "str", "mountPoint": "str"}],
    "diskSpec": {"bootDiskType": "str", "bootDiskSizeGb": "int"},
}
CUSTOM_JOB_SPEC: Schema = {
    "persistentResourceId": "str",
    "workerPoolSpecs": [WORKER_POOL_SPEC],
    "scheduling": {
        "timeout": "str",
        "restartJobOnWorkerRestart": "bool",
        "strategy": STRATEGY,
        "disableRetries": "bool",
        "maxWaitDuration": "str",
    },
    "serviceAccount": "str",
    "network": "str",
    "reservedIpRanges": "strs",
    "pscInterfaceConfig": {
        "networkAttachment": "str",
        "dnsPeeringConfigs": [{"domain": "str", "targetProject": "str", "targetNetwork": "str"}],
    },
    "baseOutputDirectory": {"outputUriPrefix": "str"},
    "protectedArtifactLocationId": "str",
    "tensorboard": "str",
    "enableWebAccess": "bool",
    "enableDashboardAccess": "bool",
    "experiment": "str",
    "experimentRun": "str",
    "models": "strs",
}
CUSTOM_JOB: Schema = {
    "name": "str",
    "displayName": "str",
    "jobSpec": CUSTOM_JOB_SPEC,
    "state": JOB_STATE,
    "createTime": "str",
    "startTime": "str",
    "endTime": "str",
    "updateTime": "str",
    "error": "any",
    "labels": "map",
    "encryptionSpec": {"kmsKeyName": "str"},
    "webAccessUris": "map",
    "satisfiesPzs": "bool",
    "satisfiesPzi": "bool",
}
OUTPUT_ONLY = ("name", "state", "createTime", "startTime", "endTime", "updateTime", "error", "webAccessUris", "satisfiesPzs", "satisfiesPzi")
TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED")
CANCELLABLE = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_PAUSED", "JOB_STATE_UPDATING")

DELETE_METADATA = "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata"
EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"

# Machine types Vertex training accepts, by family prefix; TPU families with their accelerator.
MACHINE_FAMILIES = (
    "n1-", "n2-", "n2d-", "e2-", "c2-", "c2d-", "c3-", "m1-", "a2-", "a3-", "a4-", "g2-", "g4-",
    "cloud-tpu", "ct4p-", "ct5lp-", "ct5p-", "ct6e-",
)  # fmt: skip
TPU_MACHINE_PREFIX = {"TPU_V4_POD": "ct4p-hightpu-", "TPU_V5_LITEPOD": "ct5lp-hightpu-"}
CLOUD_TPU_COUNTS = {"TPU_V2": (8, 32, 128, 256, 512), "TPU_V3": (8, 32, 64, 128, 256, 512, 1024, 2048)}
# v5e topologies (chips) per machine type, from the Cloud TPU v5e configuration table.
V5E_TOPOLOGIES = {
    "ct5lp-hightpu-1t": ("1x1",),
    "ct5lp-hightpu-4t": ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
    "ct5lp-hightpu-8t": ("2x4",),
}
GPU_FAMILIES = {
    "a2-ultragpu-": ("NVIDIA_A100_80GB",),
    "a2-": ("NVIDIA_TESLA_A100",),
    "a3-megagpu-": ("NVIDIA_H100_MEGA_80GB",),
    "a3-ultragpu-": ("NVIDIA_H200_141GB",),
    "a3-": ("NVIDIA_H100_80GB",),
    "a4-": ("NVIDIA_B200",),
    "g2-": ("NVIDIA_L4",),
    "n1-": ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_K80"),
}
LABEL_KEY = re.compile(r"[\w\-]{1,63}\Z")
LABEL_VALUE = re.compile(r"[\w\-]{0,63}\Z")
DURATION = re.compile(r"-?\d+(\.\d{1,9})?s\Z")

_L = r"/v1/projects/(?P<p>[^/:]+)/locations/(?P<l>[^/:]+)"
_RES = "//aiplatform.googleapis.com/projects/{p}/locations/{l}"
# (HTTP method, path regex, handler, IAM permission, resource the permission is checked on)
ROUTES: list[tuple[str, re.Pattern[str], str, str, str]] = [
    (m, re.compile(rx + r"\Z"), h, perm, res)
    for m, rx, h, perm, res in [
        ("POST", _L + r"/customJobs", "create_job", "aiplatform.customJobs.create", _RES),
        ("GET", _L + r"/customJobs", "list_jobs", "aiplatform.customJobs.list", _RES),
        ("GET", _L + r"/customJobs/(?P<j>[^/:]+)", "get_job", "aiplatform.customJobs.get", _RES + "/customJobs/{j}"),
        ("DELETE", _L + r"/customJobs/(?P<j>[^/:]+)", "delete_job", "aiplatform.customJobs.delete", _RES + "/customJobs/{j}"),
        ("POST", _L + r"/customJobs/(?P<j>[^/:]+):cancel", "cancel_job", "aiplatform.customJobs.cancel", _RES + "/customJobs/{j}"),
        ("GET", _L + r"/customJobs/(?P<j>[^/:]+)/operations/(?P<o>[^/:]+)", "get_operation", "aiplatform.customJobs.get", _RES + "/customJobs/{j}"),
        ("GET", _L + r"/operations/(?P<o>[^/:]+)", "get_operation", "aiplatform.operations.get", _RES + "/operations/{o}"),
    ]
]  # fmt: skip
ENTRIES_LIST = "/v2/entries:list"

# (project, service, permission, resource) checks the host runs before a handler.
Gate = tuple[str, str, str, str]


@dataclass
class JobScript:
    """How the next created job behaves: its states (each lasting some seconds), how it ends, what it logs.

    `logs` maps a task name ("workerpool0-0", "workerpool1-3") to its stdout lines, written as INFO
    entries spread over the RUNNING period; `stderr` the same as ERROR entries. None: two lines per
    replica of every pool. `error` is error.message when `end` is JOB_STATE_FAILED (default: the
    message Vertex gives for a replica that exited 1).
    """

    states: list[tuple[str, float]] = field(default_factory=lambda: [("JOB_STATE_QUEUED", 0.3), ("JOB_STATE_PENDING", 0.3), ("JOB_STATE_RUNNING", 1.0)])
    end: str = "JOB_STATE_SUCCEEDED"
    error: str | None = None
    logs: dict[str, list[str]] | None = None
    stderr: dict[str, list[str]] = field(default_factory=dict)
    error_code: int = 3
    service_logs: bool = True


@dataclass(order=True)
class _Event:
    due: float
    seq: int
    run: Callable[[], None] = field(compare=False)


def _found_errors(*problems: tuple[str, str]) -> ApiError:
    """Vertex's validator error: every problem numbered in one message, tab-separated."""
    body = "".join(f"{i}.Field: {where}; Message: {message}\t" for i, (where, message) in enumerate(problems, start=1))
    return invalid(f"List of found errors:\t{body}", problems[0][0])


class VertexService:
    """All custom jobs (keyed by numeric id), their delete operations, and the log entries they write."""

    def __init__(self, host: GoogleStandin, seed: int) -> None:
        self.host = host
        self._jobs: dict[str, JSON] = {}
        self.created_bodies: list[JSON] = []
        self.cancelled: list[str] = []
        self.operations: dict[str, JSON] = {}
        self.cancel_delay_s = 0.3
        # A refusal of a create that quotes the request (an organisation policy, say): its message, or None to accept.
        self.refuse: Callable[[JSON], str | None] | None = None
        self.logging = LoggingService(host)
        self._scripts: list[JobScript] = []
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self._generation: dict[str, int] = {}
        self._rng = random.Random(seed * 104729 + 7)
        self._anchor = (time.time(), time.monotonic())

    # --- test-facing ------------------------------------------------------------------------------

    @property
    def jobs(self) -> dict[str, JSON]:
        """id -> stored CustomJob, with time applied first (the live dict)."""
        with self.host._lock:
            self.advance()
            return self._jobs

    def next_script(self, script: JobScript) -> None:
        """The next created job follows `script` (scripts queue up, one per create)."""
        if script.end not in TERMINAL:
            raise ValueError(f"JobScript.end must be a terminal state, not {script.end}")
        for state, _ in script.states:
            if state not in JOB_STATE.values:
                raise ValueError(f"unknown job state {state}")
        with self.host._lock:
            self._scripts.append(script)

    def log_entries(self, job_id: str | None = None) -> list[JSON]:
        """The entries visible now (oldest first), optionally of one job."""
        with self.host._lock:
            self.advance()
            entries = self.logging.visible()
        return [e for e in entries if job_id is None or e["resource"]["labels"].get("job_id") == job_id]

    # --- time -------------------------------------------------------------------------------------

    def wall(self, mono: float) -> datetime:
        return datetime.fromtimestamp(self._anchor[0] + (mono - self._anchor[1]), timezone.utc)

    def stamp(self, mono: float) -> str:
        return rfc3339(self.wall(mono))

    def _later(self, due: float, job_id: str, run: Callable[[float], None]) -> None:
        generation = self._generation.get(job_id, 0)

        def fire() -> None:
            if self._generation.get(job_id, 0) == generation:
                run(due)

        heapq.heappush(self._events, _Event(due, next(self._seq), fire))

    def advance(self) -> None:
        """Apply every state change whose time has come (under the host's lock)."""
        now = time.monotonic()
        while self._events and self._events[0].due <= now:
            heapq.heappop(self._events).run()

    # --- dispatch ---------------------------------------------------------------------------------

    def route(self, method: str, path: str, body: JSON) -> tuple[str, dict[str, str], list[Gate]] | None:
        """(handler, path params, permission gates) for a Vertex or Logging path, None if not ours."""
        if path == ENTRIES_LIST and method == "POST":
            request = self.logging.parse_request(body)
            projects = self.logging.projects_of(request)
            gates = [(p, LOGGING, "logging.logEntries.list", f"projects/{p}") for p in dict.fromkeys(projects)]
            return "list_entries", {}, gates
        for m, pattern, handler, permission, resource in ROUTES:
            match = pattern.match(path)
            if match and m == method:
                params = match.groupdict()
                return handler, params, [(params["p"], AIPLATFORM, permission, resource.format_map(params))]
        return None

    def handle(self, handler: str, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        if handler == "list_entries":
            return self.logging.list_entries(body)
        result: JSON = getattr(self, handler)(params, query, body)
        return result

    # --- names ------------------------------------------------------------------------------------

    def parent(self, location: str) -> str:
        return f"projects/{self.host.project_number}/locations/{location}"

    def job_name(self, location: str, job_id: str) -> str:
        return f"{self.parent(location)}/customJobs/{job_id}"

    def _job(self, params: dict[str, str]) -> JSON:
        job_id = params["j"]
        if not job_id.isdigit():
            raise invalid(f"Invalid CustomJob resource name: projects/{params['p']}/locations/{params['l']}/customJobs/{job_id}.", "name")
        job = self._jobs.get(job_id)
        if job is None or not job["name"].startswith(self.parent(params["l"]) + "/"):
            raise not_found(f"projects/{params['p']}/locations/{params['l']}/customJobs/{job_id}")
        return job

    # --- create -----------------------------------------------------------------------------------

    def create_job(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        spec = normalize(body, CUSTOM_JOB, "custom_job")
        self.validate(spec)
        refused = self.refuse(body) if self.refuse else None
        if refused:
            raise invalid(refused)
        for key in OUTPUT_ONLY:
            spec.pop(key, None)
        self.created_bodies.append(body)
        script = self._scripts.pop(0) if self._scripts else JobScript()
        job_id = str(self._rng.randrange(10**18, 9 * 10**18))
        now = time.monotonic()
        job: JSON = {"name": self.job_name(params["l"], job_id), "displayName": spec["displayName"], "jobSpec": spec["jobSpec"]}
        for pool in job["jobSpec"]["workerPoolSpecs"]:
            if pool:
                pool["replicaCount"] = str(pool.get("replicaCount", 1))
                pool.setdefault("diskSpec", {})
                pool["diskSpec"].setdefault("bootDiskType", "pd-ssd")
                pool["diskSpec"].setdefault("bootDiskSizeGb", 100)
        first = script.states[0][0] if script.states else script.end
        job["state"] = first
        job["createTime"] = job["updateTime"] = self.stamp(now)
        if spec.get("labels"):
            job["labels"] = spec["labels"]
        if spec.get("encryptionSpec"):
            job["encryptionSpec"] = spec["encryptionSpec"]
        self._jobs[job_id] = job
        self._generation[job_id] = 0
        self._play(job_id, script, now, params["l"])
        return job

    def validate(self, spec: JSON) -> None:
        """The semantic checks Vertex applies after parsing, reported all at once as it does."""
        problems: list[tuple[str, str]] = []
        name = spec.get("displayName", "")
        if not name:
            problems.append(("custom_job.display_name", "Required field is not set."))
        elif len(name) > 128:
            problems.append(("custom_job.display_name", "The display name can be up to 128 characters long."))
        job_spec = spec.get("jobSpec")
        pools = (job_spec or {}).get("workerPoolSpecs") or []
        if not job_spec:
            problems.append(("custom_job.job_spec", "Required field is not set."))
        elif not pools:
            problems.append(("custom_job.job_spec.worker_pool_specs", "Required field is not set."))
        if len(pools) > 4:
            problems.append(("custom_job.job_spec.worker_pool_specs", "At most 4 worker pools are allowed."))
        for i, pool in enumerate(pools):
            problems.extend(self._pool_problems(i, pool))
        for key, value in (spec.get("labels") or {}).items():
            if not LABEL_KEY.match(key) or not key[0].isalpha() or key != key.lower() or not LABEL_VALUE.match(value) or value != value.lower():
                message = (
                    f"Label key '{key}' or value '{value}' is invalid: only lowercase letters, digits, '_' and '-' "
                    "are allowed (keys must start with a letter), up to 63 characters."
                )
                problems.append(("custom_job.labels", message))
        scheduling = (job_spec or {}).get("scheduling") or {}
        for key in ("timeout", "maxWaitDuration"):
            if key in scheduling and not DURATION.match(scheduling[key]):
                where = "custom_job.job_spec.scheduling." + ("timeout" if key == "timeout" else "max_wait_duration")
                raise invalid(f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Duration), \"{scheduling[key]}\"", where)
        if problems:
            raise _found_errors(*problems)

    def _pool_problems(self, index: int, pool: JSON) -> list[tuple[str, str]]:
        where = f"custom_job.job_spec.worker_pool_specs[{index}]"
        if not pool:
            # An empty spec skips a pool (say, no parameter servers), but never the chief's.
            return [(where, "The first worker pool spec must not be empty.")] if index == 0 else []
        problems: list[tuple[str, str]] = []
        container, package = pool.get("containerSpec"), pool.get("pythonPackageSpec")
        if container is not None and package is not None:
            problems.append((where, "Only one of container_spec and python_package_spec may be set."))
        elif container is None and package is None:
            problems.append((f"{where}.container_spec", "Either container_spec or python_package_spec must be set."))
        if container is not None and not container.get("imageUri"):
            problems.append((f"{where}.container_spec.image_uri", "Required field is not set."))
        if package is not None:
            for key, snake in (("executorImageUri", "executor_image_uri"), ("packageUris", "package_uris"), ("pythonModule", "python_module")):
                if not package.get(key):
                    problems.append((f"{where}.python_package_spec.{snake}", "Required field is not set."))
        for env_index, env in enumerate((container or package or {}).get("env", [])):
            if not env.get("name"):
                problems.append((f"{where}.env[{env_index}].name", "Required field is not set."))
        replicas = int(pool.get("replicaCount", 0))
        if replicas < 1:
            problems.append((f"{where}.replica_count", "Replica count must be greater than 0."))
        elif index == 0 and replicas != 1:
            problems.append((f"{where}.replica_count", "The replica count of the first worker pool (the chief) must be 1."))
        problems.extend(self._machine_problems(f"{where}.machine_spec", pool.get("machineSpec") or {}))
        disk = pool.get("diskSpec") or {}
        if disk.get("bootDiskType", "pd-ssd") not in ("pd-ssd", "pd-standard", "hyperdisk-balanced"):
            problems.append((f"{where}.disk_spec.boot_disk_type", f'Boot disk type "{disk["bootDiskType"]}" is not supported.'))
        if "bootDiskSizeGb" in disk and not 100 <= int(disk["bootDiskSizeGb"]) <= 64000:
            problems.append((f"{where}.disk_spec.boot_disk_size_gb", "Boot disk size must be between 100 and 64000 GB."))
        return problems

    def _machine_problems(self, where: str, machine: JSON) -> list[tuple[str, str]]:
        machine_type = machine.get("machineType", "")
        accelerator = machine.get("acceleratorType", "ACCELERATOR_TYPE_UNSPECIFIED")
        count = int(machine.get("acceleratorCount", 0))
        topology = machine.get("tpuTopology", "")
        if not machine_type:
            return [(f"{where}.machine_type", "Required field is not set.")]
        if not machine_type.startswith(MACHINE_FAMILIES):
            return [(f"{where}.machine_type", f'Machine type "{machine_type}" is not supported.')]
        unsupported = (f"{where}.accelerator_type", f'Accelerator "{accelerator}" is not supported for machine type "{machine_type}".')
        if accelerator in CLOUD_TPU_COUNTS:
            if machine_type != "cloud-tpu":
                return [unsupported]
            if count not in CLOUD_TPU_COUNTS[accelerator]:
                allowed = ", ".join(str(c) for c in CLOUD_TPU_COUNTS[accelerator])
                message = f'Accelerator count {count} is not supported for accelerator "{accelerator}" on machine type "cloud-tpu"; '
                message += f"supported counts: {allowed}."
                return [(f"{where}.accelerator_count", message)]
            return []
        if machine_type == "cloud-tpu":
            return [(f"{where}.accelerator_type", 'Machine type "cloud-tpu" requires accelerator type TPU_V2 or TPU_V3.')]
        tpu_family = next((a for a, prefix in TPU_MACHINE_PREFIX.items() if machine_type.startswith(prefix)), None)
        if accelerator in TPU_MACHINE_PREFIX or tpu_family is not None:
            if accelerator not in (tpu_family, "ACCELERATOR_TYPE_UNSPECIFIED"):
                return [unsupported]
            family = tpu_family or accelerator
            if not machine_type.startswith(TPU_MACHINE_PREFIX[family]):
                return [unsupported]
            if not topology:
                return [(f"{where}.tpu_topology", f"tpu_topology is required for accelerator type {family}.")]
            if family == "TPU_V5_LITEPOD":
                allowed_topologies = V5E_TOPOLOGIES.get(machine_type)
                if allowed_topologies is None:
                    return [(f"{where}.machine_type", f'Machine type "{machine_type}" is not supported.')]
                if topology not in allowed_topologies:
                    return [(f"{where}.tpu_topology", f'TPU topology "{topology}" is not supported for machine type "{machine_type}".')]
            elif not re.fullmatch(r"\d+x\d+x\d+", topology):
                return [(f"{where}.tpu_topology", f'TPU topology "{topology}" is not supported for machine type "{machine_type}".')]
            return []
        if machine_type.startswith(("ct5p-", "ct6e-")):
            if accelerator != "ACCELERATOR_TYPE_UNSPECIFIED":
                return [unsupported]
            return [] if topology else [(f"{where}.tpu_topology", f'tpu_topology is required for machine type "{machine_type}".')]
        if topology:
            return [(f"{where}.tpu_topology", f'tpu_topology is only supported for TPU machine types, not "{machine_type}".')]
        if accelerator == "ACCELERATOR_TYPE_UNSPECIFIED":
            if count:
                return [(f"{where}.accelerator_type", "accelerator_type must be set when accelerator_count is set.")]
            return []
        family_gpus = next((gpus for prefix, gpus in GPU_FAMILIES.items() if machine_type.startswith(prefix)), ())
        if accelerator not in family_gpus:
            return [unsupported]
        if count < 1:
            return [(f"{where}.accelerator_count", f'Accelerator count must be at least 1 for accelerator "{accelerator}".')]
        return []

    # --- the job's life ---------------------------------------------------------------------------

    def tasks(self, job: JSON) -> list[str]:
        names: list[str] = []
        for i, pool in enumerate(job["jobSpec"]["workerPoolSpecs"]):
            if pool:
                names.extend(f"workerpool{i}-{r}" for r in range(int(pool["replicaCount"])))
        return names

    def _play(self, job_id: str, script: JobScript, start: float, location: str) -> None:
        """Schedule the script's states and write its log entries with the instants they become visible."""
        job = self._jobs[job_id]
        at = start
        run_span: tuple[float, float] | None = None
        for i, (state, seconds) in enumerate(script.states):
            if i > 0:
                self._later(at, job_id, functools.partial(self._enter, job_id, state))
            if state == "JOB_STATE_RUNNING" and run_span is None:
                run_span = (at, max(0.0, seconds))
            at += max(0.0, seconds)
        end_at = at
        if run_span is None:
            run_span = (end_at, 0.0)
        self._later(end_at, job_id, lambda due: self._finish(job_id, script, due))

        if script.service_logs:
            for i, (state, _seconds) in enumerate(script.states):
                when = start + sum(s for _, s in script.states[:i])
                message = {"JOB_STATE_PENDING": "Waiting for job to be provisioned.", "JOB_STATE_RUNNING": "Job is running."}.get(state)
                if message and (i == 0 or script.states[i - 1][0] != state):
                    self._service_entry(job_id, message, when)
            closing = {"JOB_STATE_SUCCEEDED": ("Job completed successfully.", "INFO"), "JOB_STATE_FAILED": ("Job failed.", "ERROR")}.get(script.end)
            if closing:
                self._service_entry(job_id, closing[0], end_at, closing[1])

        stdout = (
            script.logs
            if script.logs is not None
            else {task: [f"{task}: starting training (job {job_id})", f"{task}: training finished"] for task in self.tasks(job)}
        )
        for stream, severity in ((stdout, "INFO"), (script.stderr, "ERROR")):
            for task, lines in stream.items():
                for k, line in enumerate(lines):
                    due = run_span[0] + run_span[1] * (k + 1) / (len(lines) + 1)
                    self._task_entry(job_id, task, line, severity, due)

    def _enter(self, job_id: str, state: str, due: float) -> None:
        """The job moves to `state` at the monotonic instant `due` (unless it already ended)."""
        job = self._jobs.get(job_id)
        if job is None or job["state"] in TERMINAL:
            return
        job["state"] = state
        job["updateTime"] = self.stamp(due)
        if state == "JOB_STATE_RUNNING" and "startTime" not in job:
            job["startTime"] = self.stamp(due)
            if job["jobSpec"].get("enableWebAccess"):
                job["webAccessUris"] = {
                    task: f"https://{self._rng.getrandbits(64):016x}-dot-{job['name'].split('/')[3]}.aiplatform-training.googleusercontent.com"
                    for task in self.tasks(job)
                }

    def _finish(self, job_id: str, script: JobScript, due: float) -> None:
        job = self._jobs.get(job_id)
        if job is None or job["state"] in TERMINAL:
            return
        job["state"] = script.end
        job["updateTime"] = job["endTime"] = self.stamp(due)
        job.pop("webAccessUris", None)
        if script.end == "JOB_STATE_FAILED":
            job["error"] = {"code": script.error_code, "message": script.error or self.replica_failure(job_id)}
        elif script.end == "JOB_STATE_CANCELLED":
            job["error"] = {"code": 1, "message": "CANCELED"}

    def replica_failure(self, job_id: str, task: str = "workerpool0-0", status: int = 1) -> str:
        """The message Vertex puts in error.message when a replica exits non-zero, log link included."""
        number = self.host.project_number
        return (
            f"The replica {task} exited with a non-zero status of {status}. To find out more about why your job exited please "
            f"check the logs: https://console.cloud.google.com/logs/viewer?project={number}&resource=ml_job%2Fjob_id%2F{job_id}"
            f"&advancedFilter=resource.type%3D%22ml_job%22%0Aresource.labels.job_id%3D%22{job_id}%22"
        )

    # --- log entries ------------------------------------------------------------------------------

    def _insert_id(self) -> str:
        return "".join(self._rng.choice("0123456789abcdefghijklmnopqrstuvwxyz") for _ in range(14))

    def _entry(self, job_id: str, task: str, log_id: str, due: float, severity: str) -> JSON:
        project = self.host.project
        return {
            "insertId": self._insert_id(),
            "resource": {"type": "ml_job", "labels": {"job_id": job_id, "project_id": project, "task_name": task}},
            "timestamp": self.stamp(due),
            "severity": severity,
            "logName": f"projects/{project}/logs/{quote(log_id, safe='')}",
            "receiveTimestamp": self.stamp(due + 0.0042),
        }

    def _task_entry(self, job_id: str, task: str, line: str, severity: str, due: float) -> None:
        entry = self._entry(job_id, task, task, due, severity)
        entry["jsonPayload"] = {"message": line, "levelname": severity, "attrs": {"tag": task}}
        entry["labels"] = {
            "compute.googleapis.com/resource_id": str(self._rng.randrange(10**18, 9 * 10**18)),
            "compute.googleapis.com/resource_name": f"cmle-training-{self._rng.getrandbits(40):010x}",
            "compute.googleapis.com/zone": "us-central1-a",
            "ml.googleapis.com/job_id/log_area": "root",
        }
        self.logging.write(entry, due, job_id)

    def _service_entry(self, job_id: str, message: str, due: float, severity: str = "INFO") -> None:
        entry = self._entry(job_id, "service", f"ml.googleapis.com/{job_id}", due, severity)
        entry["textPayload"] = message
        self.logging.write(entry, due, job_id)

    # --- read, list -------------------------------------------------------------------------------

    def get_job(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return self._job(params)

    def list_jobs(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        try:
            tree = parse_filter(query.get("filter", ""))
            prefix = self.parent(params["l"]) + "/"
            jobs = [j for j in self._jobs.values() if j["name"].startswith(prefix)]
            jobs.sort(key=lambda j: (j["createTime"], j["name"]), reverse=True)
            matching = [j for j in jobs if evaluate(tree, j, _resolve_job_field)]
        except FilterSyntaxError as err:
            raise invalid(f"Provided filter is not valid: {err}", "filter") from None
        return page(matching, "customJobs", query)

    # --- cancel, delete ---------------------------------------------------------------------------

    def cancel_job(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        job = self._job(params)
        job_id = params["j"]
        if job["state"] == "JOB_STATE_CANCELLING":
            return {}
        if job["state"] not in CANCELLABLE:
            raise failed_precondition(f"Cannot cancel CustomJob {job['name']} because it is in state {job['state']}.")
        now = time.monotonic()
        self._generation[job_id] = self._generation.get(job_id, 0) + 1
        self.logging.withdraw(job_id, now)
        job["state"] = "JOB_STATE_CANCELLING"
        job["updateTime"] = self.stamp(now)
        self.cancelled.append(job_id)

        def done(due: float) -> None:
            job["state"] = "JOB_STATE_CANCELLED"
            job["updateTime"] = job["endTime"] = self.stamp(due)
            job["error"] = {"code": 1, "message": "CANCELED"}
            job.pop("webAccessUris", None)

        self._later(now + self.cancel_delay_s, job_id, done)
        return {}

    def delete_job(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        job = self._job(params)
        if job["state"] not in TERMINAL:
            raise failed_precondition(f"The CustomJob {job['name']} is in state {job['state']}; only jobs in a final state can be deleted. Cancel it first.")
        job_id = params["j"]
        now = time.monotonic()
        op_id = str(self._rng.randrange(10**18, 9 * 10**18))
        op: JSON = {
            "name": f"{self.parent(params['l'])}/operations/{op_id}",
            "metadata": {"@type": DELETE_METADATA, "genericMetadata": {"createTime": self.stamp(now), "updateTime": self.stamp(now)}},
            "done": False,
        }
        self.operations[op_id] = op

        def gone(due: float) -> None:
            self._jobs.pop(job_id, None)
            op["done"] = True
            op["metadata"]["genericMetadata"]["updateTime"] = self.stamp(due)
            op["response"] = {"@type": EMPTY_TYPE}

        self._later(now + self.host.create_delay_s, job_id, gone)
        return op

    def get_operation(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        op = self.operations.get(params["o"])
        if op is None:
            raise not_found(f"projects/{params['p']}/locations/{params['l']}/operations/{params['o']}")
        return op


_JOB_FIELDS = {"display_name": ("displayName", "glob"), "state": ("state", "str"), "create_time": ("createTime", "timestamp"),
               "update_time": ("updateTime", "timestamp")}  # fmt: skip


def _resolve_job_field(job: JSON, path: list[str]) -> tuple[bool, Any, str]:
    """Fields ListCustomJobs filters on: display_name, state, create_time (update_time), labels.KEY."""
    head = path[0]
    if head == "labels" and len(path) == 2:
        labels = job.get("labels", {})
        return path[1] in labels, labels.get(path[1]), "str"
    spelled = {"displayName": "display_name", "createTime": "create_time", "updateTime": "update_time"}.get(head, head)
    if spelled not in _JOB_FIELDS or len(path) != 1:
        raise FilterSyntaxError(f"unsupported field {'.'.join(path)!r}")
    key, kind = _JOB_FIELDS[spelled]
    return key in job, job.get(key), kind

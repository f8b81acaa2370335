"""Cloud settings (project, zone, accelerator, endpoints…) and where each value came from.

One precedence order for every setting: flag > `TPUCTL_*` environment variable >
`./tpuctl.toml` > the user config file > gcloud's active configuration > the
built-in default. Each value keeps its source so `tpuctl config show` and error
messages can say which layer to fix.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings import files as config
from tpuctl.settings import gcloud as gcloud_config
from tpuctl.tpu import software as tpu_software
from tpuctl.tpu.accelerators import NO_TPU7X, is_tpu7x, is_type_name
from tpuctl.tpu.capacity import Recovery, parse_capacities

SECTION = "cloud"
DEFAULT, UNSET = "default", "unset"  # the sources of a value no layer gave

_PROJECT = re.compile(r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]\Z")
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]\Z")
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+\Z")
_RUNTIME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}\Z")
_BUCKET_PATH = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?\Z")
_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?\Z")
_WHOLE_SECONDS = re.compile(r"[1-9][0-9]{0,5}\Z")  # up to 999999 s: a unit slip (ms) shows
_API_KEY = re.compile(r"[A-Za-z0-9_-]{20,100}\Z")


def _check(pattern: re.Pattern[str], example: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if pattern.match(value) else f"e.g. {example}"

    return check


def _accelerator_type(value: str) -> str | None:
    # The table's grammar only: a generation newer than tpuctl is the TPU API's to judge.
    return None if is_type_name(value) else NO_TPU7X if is_tpu7x(value) else "e.g. v4-8, v5litepod-16"


def _zones(value: str) -> str | None:
    try:
        zones_of(value)
    except TpuctlError as err:
        return f"{err.message.removeprefix('--zones: ')}; e.g. all, or us-west4-a,us-east1-d"
    return None


def _capacity(value: str) -> str | None:

    try:
        parse_capacities(value)
    except TpuctlError as err:
        return err.message.removeprefix("--capacity: ")
    return None


def _recovery(value: str) -> str | None:
    return None if value in {policy.value for policy in Recovery} else " or ".join(policy.value for policy in Recovery)


def _file(value: str) -> str | None:
    """A key or token file: /dev/zero or a FIFO would be read forever by the credential loader."""
    if not value.strip():
        return "a file path"
    try:
        info = os.stat(value)
    except (OSError, ValueError):
        return None  # missing or unreadable: the credential loader names the problem
    return None if stat.S_ISREG(info.st_mode) else "a regular file, not a device, FIFO or directory"


@dataclass(frozen=True)
class Setting:
    key: str  # as written in tpuctl.toml and shown by `config show`
    help: str
    check: Callable[[str], str | None]  # None when fine, else what a good value looks like
    default: str | None = None
    gcloud: tuple[str, str] | None = None  # (section, property) in gcloud's configuration
    secret: bool = False  # a credential: `config show` says it is set and where from, never its value

    def shown(self, value: str | None) -> str | None:
        return "(hidden)" if self.secret and value is not None else value

    @property
    def env(self) -> str:
        return "TPUCTL_" + self.key.upper().replace("-", "_")

    @property
    def attr(self) -> str:
        return self.key.replace("-", "_")


SETTINGS: tuple[Setting, ...] = (
    Setting("project", "Google Cloud project id", _check(_PROJECT, "my-project"), gcloud=("core", "project")),
    Setting("zone", "zone of the TPU VMs", _check(_ZONE, "us-central2-b"), gcloud=("compute", "zone")),
    Setting("region", "Vertex AI region of managed jobs", _check(_REGION, "us-central1"), gcloud=("ai", "region")),
    Setting("accelerator-type", "TPU accelerator type for new nodes", _accelerator_type, "v4-8"),
    # No fixed default: the image follows the accelerator type (default_runtime).
    Setting("runtime-version", "TPU VM software version for new nodes", _check(_RUNTIME, "tpu-vm-tf-2.16.1-pjrt")),
    # A create can sit in CREATING for tens of minutes when the zone has no capacity (issue 36); a slice that
    # does come up takes minutes, so half an hour is past any create that will succeed.
    # Where and as what `create` hunts when no --zone names one zone (docs/capacity.md, How tpuctl chooses).
    Setting("zones", "zones a create hunts across, best first: all (or auto) or Z1,Z2,...", _zones),
    Setting("capacity", "capacity kinds a create tries, in your order, e.g. spot,on-demand", _capacity),
    Setting("create-deadline", "seconds one create may stay CREATING before it counts as a stockout", _check(_WHOLE_SECONDS, "1800"), "1800"),
    # One request could always wait 60 s; now a whole command's requests that go unanswered share it (cloud/plumbing/retry.py).
    Setting("api-timeout", "seconds of unanswered Google API calls before a command gives up (babysit, launch: per call)", _check(_WHOLE_SECONDS, "60"), "60"),
    # No fixed default: it follows the lost node's kind (recovery.Recovery.default_for).
    Setting("recovery", "where babysit and launch --new-tpu recreate a lost node first: same-zone-first or elsewhere-first", _recovery),
    Setting("model-dir", "default bucket path for checkpoints and summaries", _check(_BUCKET_PATH, "gs://my-bucket/runs")),
    Setting("tpu-endpoint", "Cloud TPU API endpoint", _check(_URL, "https://tpu.googleapis.com"), "https://tpu.googleapis.com"),
    Setting(
        "vertex-endpoint",
        "Vertex AI API endpoint  [default: https://REGION-aiplatform.googleapis.com]",
        _check(_URL, "https://us-central1-aiplatform.googleapis.com"),
    ),
    Setting("logging-endpoint", "Cloud Logging API endpoint", _check(_URL, "https://logging.googleapis.com"), "https://logging.googleapis.com"),
    Setting(
        "resourcemanager-endpoint",
        "Cloud Resource Manager API endpoint",
        _check(_URL, "https://cloudresourcemanager.googleapis.com"),
        "https://cloudresourcemanager.googleapis.com",
    ),
    Setting("ml-endpoint", "AI Platform (legacy) API endpoint", _check(_URL, "https://ml.googleapis.com"), "https://ml.googleapis.com"),
    Setting(
        "serviceusage-endpoint",
        "Service Usage API endpoint",
        _check(_URL, "https://serviceusage.googleapis.com"),
        "https://serviceusage.googleapis.com",
    ),
    Setting("storage-endpoint", "Cloud Storage JSON API endpoint", _check(_URL, "https://storage.googleapis.com"), "https://storage.googleapis.com"),
    Setting(
        "billing-endpoint",
        "Cloud Billing Catalog API endpoint (list prices)",
        _check(_URL, "https://cloudbilling.googleapis.com"),
        "https://cloudbilling.googleapis.com",
    ),
    Setting(
        "quotas-endpoint",
        "Cloud Quotas API endpoint (TPU quota per zone, for offers)",
        _check(_URL, "https://cloudquotas.googleapis.com"),
        "https://cloudquotas.googleapis.com",
    ),
    Setting("billing-api-key", "API key for the Billing Catalog, used instead of the credentials for prices", _check(_API_KEY, "AIza..."), secret=True),
    Setting("iam-endpoint", "IAM API endpoint (service account policies)", _check(_URL, "https://iam.googleapis.com"), "https://iam.googleapis.com"),
    Setting("token-uri", "OAuth token endpoint for credential refresh", _check(_URL, "https://oauth2.googleapis.com/token")),
    Setting("access-token-file", "file holding a ready bearer token, used instead of ADC", _file),
    Setting("credentials", "service-account or authorized-user JSON key file, used instead of ADC", _file),
)
BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
EVERY_ZONE = ("all", "auto")  # how `--zones` says "every zone the TPU API lists", in `list`, `offers` and create's hunt


def zones_of(text: str) -> list[str] | None:
    """A `--zones` value: None for every zone (EVERY_ZONE), else the zones named, each a zone's name."""
    if text.strip().lower() in EVERY_ZONE:
        return None
    zones = [part.strip() for part in text.split(",")]
    bad = [zone for zone in zones if not _ZONE.match(zone)]
    if bad:  # whether each is one of the project's is the TPU API's listing to say (capacity/gather.py)
        raise TpuctlError(f"--zones: {inputs.shown(bad[0])} is not a zone", hint="e.g. --zones all, or --zones us-central2-b,us-east5-a")
    return list(dict.fromkeys(zones))


BY_KEY_ATTR: dict[str, Setting] = {s.attr: s for s in SETTINGS}


@dataclass(frozen=True)
class Value:
    value: str | None
    source: str  # "--zone", "TPUCTL_ZONE", "/path/tpuctl.toml", "gcloud configuration 'x'", DEFAULT, UNSET


class Settings:
    """Resolved settings; attribute access gives the value, `source(key)` its layer."""

    def __init__(self, values: Mapping[str, Value]) -> None:
        self._values = dict(values)

    def get(self, key: str) -> str | None:
        return self._values[key].value

    def source(self, key: str) -> str:
        return self._values[key].source

    def items(self) -> list[tuple[Setting, Value]]:
        return [(s, self._values[s.key]) for s in SETTINGS]

    def given(self, key: str) -> bool:
        """Whether a flag, the environment or a file set the key, rather than tpuctl's own default."""
        return self.source(key) not in (DEFAULT, UNSET)

    def require(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            setting = BY_KEY[key]
            raise TpuctlError(
                f"no {key} set",
                hint=f"pass --{key}, set {setting.env}, or run `tpuctl init`",
            )
        return value

    @property
    def project(self) -> str:
        return self.require("project")

    @property
    def zone(self) -> str:
        return self.require("zone")


def file_values(path: Path) -> dict[str, object]:
    """The `[cloud]` table of one config file, with unknown keys refused."""
    table = config.read_file(path).get(SECTION, {})
    if not isinstance(table, dict):
        raise TpuctlError(f"{path}: [{SECTION}] must be a table")
    for key in table:
        if key not in BY_KEY:
            raise TpuctlError(f"{path}: unknown setting {SECTION}.{key}", hint=f"known: {', '.join(BY_KEY)}")
    return table


def resolve(flags: Mapping[str, str | None] | None = None) -> Settings:
    """Every setting from the highest layer that has it, each value checked and named by its layer."""
    flags = flags or {}
    layers = _layers()
    values: dict[str, Value] = {}
    for setting in SETTINGS:
        values[setting.key] = _pick(setting, flags, layers)
    if values["runtime-version"].source == UNSET:
        image = default_runtime(values["accelerator-type"].value or "")
        if image is not None:
            values["runtime-version"] = Value(image, DEFAULT)
    return Settings(values)


def value_of(key: str, flag: str | None = None) -> str | None:
    """One setting as resolve() would give it, without reading (or checking) every other: `flag` its flag's value."""
    return picked(key, flag).value


def picked(key: str, flag: str | None = None) -> Value:
    """value_of's value with the layer it came from (UNSET where none gave it: no default is filled in)."""
    setting = BY_KEY[key]
    return _pick(setting, {setting.attr: flag}, _layers())


def _layers() -> list[tuple[str, Mapping[str, object]]]:
    # config_files() is lowest first: user file, then ./tpuctl.toml.
    return [(str(path), file_values(path)) for path in reversed(config.config_files())]


def default_runtime(accelerator_type: str) -> str | None:
    """The image a new node of this type gets when no layer names one: TensorFlow's, since tpuctl runs TensorFlow
    and the base image has none. None for a generation newer than tpuctl's table, whose image the user names."""
    try:
        return tpu_software.tensorflow_image(accelerator_type)
    except TpuctlError:
        return None


def _pick(setting: Setting, flags: Mapping[str, str | None], layers: list[tuple[str, Mapping[str, object]]]) -> Value:
    flag = flags.get(setting.attr)
    if flag is not None:
        return _checked(setting, flag, f"--{setting.key}")
    env = os.environ.get(setting.env, "")
    if env.strip():
        return _checked(setting, env.strip(), setting.env)
    for source, table in layers:
        if setting.key in table:
            raw = table[setting.key]
            if not isinstance(raw, str):
                raise TpuctlError(f"{source}: {SECTION}.{setting.key} must be a string, not {raw!r}")
            return _checked(setting, raw, source)
    if setting.gcloud:
        found = gcloud_config.read_property(*setting.gcloud)
        if found:
            return _checked(setting, found.value, found.origin)
    return Value(setting.default, DEFAULT if setting.default is not None else UNSET)


def _checked(setting: Setting, value: str, source: str) -> Value:
    # A NUL byte would pass a pattern such as the URL's and fail later in open() or an HTTP library.
    inputs.check_text(value, f"{setting.key} from {source}")
    problem = setting.check(value)
    if problem:
        raise TpuctlError(f"{setting.key} {setting.shown(value)!r} from {source} is not valid", hint=problem)
    return Value(value, source)

"""gcloud's active configuration, read from its files rather than by running gcloud.

Running `gcloud config list` costs over a second; the properties are a small INI
file. gcloud's own precedence inside that layer is kept: CLOUDSDK_* variables
over the active configuration's file.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError

_SMALL = 4096  # active_config holds one configuration's name


@dataclass(frozen=True)
class GcloudValue:
    value: str
    origin: str  # where gcloud would have taken it from, for `tpuctl config show`


def config_dir() -> Path:
    if os.environ.get("CLOUDSDK_CONFIG"):
        return Path(os.environ["CLOUDSDK_CONFIG"])
    return Path.home() / ".config" / "gcloud"


def active_configuration() -> str:
    name = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME", "").strip()
    if name:
        return name
    try:  # a small regular file, as gcloud writes it: a FIFO or /dev/zero there must not hang or fill memory
        text = inputs.read_small_text(config_dir() / "active_config", "gcloud's active_config", limit=_SMALL)
    except TpuctlError:
        return "default"
    return (text or "").strip() or "default"


def read_property(section: str, name: str) -> GcloudValue | None:
    """A property such as core/project, or None when gcloud has none (or its file is unreadable)."""
    env = f"CLOUDSDK_{section.upper()}_{name.upper()}"
    if os.environ.get(env, "").strip():
        return GcloudValue(os.environ[env].strip(), env)
    configuration = active_configuration()
    path = config_dir() / "configurations" / f"config_{configuration}"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(inputs.read_small_text(path, "gcloud configuration") or "", str(path))
        value = parser.get(section, name, fallback="").strip()
    except (configparser.Error, TpuctlError):
        # A damaged gcloud file must not break tpuctl; gcloud is only the lowest layer.
        return None
    return GcloudValue(value, f"gcloud configuration '{configuration}'") if value else None

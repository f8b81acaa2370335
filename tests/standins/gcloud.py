"""gcloud itself pointed at the Google stand-in: the fidelity checks' one way to run it.

A private configuration directory (sealed from the user's), a token file instead of a login,
and the property `api_endpoint_overrides/API` for each API the check talks to, given as gcloud's
environment form of a property (CLOUDSDK_API_ENDPOINT_OVERRIDES_API), which gcloud reads as it
reads a `config set` value: no `gcloud config set` process per API (each costs about a CPU-second).
The value keeps the trailing slash gcloud insists on; without it the paths would be joined wrongly.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin


class Gcloud:
    def __init__(self, g: GoogleStandin, tmp_path: Path, apis: Iterable[str], flags: Iterable[str] = ()) -> None:
        self.env = standin_env(g, tmp_path) | {
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
            **{f"CLOUDSDK_API_ENDPOINT_OVERRIDES_{api.upper()}": g.url + "/" for api in apis},
        }
        self.flags = ["--access-token-file", self.env["TPUCTL_ACCESS_TOKEN_FILE"], "--project", g.project, *flags]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["gcloud", *args, *self.flags]
        return subprocess.run(argv, check=False, env=self.env, capture_output=True, text=True, timeout=90)

"""The metadata stand-in's token endpoint (tests/standins/metadata_server.py) as Google's own client reads it: what a
TPU VM's programs (google-auth, and tpuctl's host program reading the run's bucket) get as the VM's access token."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.standins.metadata_server import MetadataServer

# google-auth reads GCE_METADATA_HOST when it is imported: a process of its own, as on a VM.
CLIENT = """\
import json, google.auth.transport.requests
from google.auth import compute_engine
credentials = compute_engine.Credentials()
credentials.refresh(google.auth.transport.requests.Request())
print(json.dumps([credentials.token, credentials.service_account_email, credentials.expired]))
"""


def test_google_auth_gets_the_vm_s_token_from_the_stand_in() -> None:
    with MetadataServer(access_token="ya29.the-vm-s") as server:
        env = {**os.environ, "GCE_METADATA_HOST": server.host, "GCE_METADATA_IP": server.host}
        done = subprocess.run([sys.executable, "-c", CLIENT], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == ["ya29.the-vm-s", server.service_account, False]
        unknown = server.answer("GET", "/computeMetadata/v1/instance/service-accounts/nobody@example.com/token", {"metadata-flavor": "Google"})
        assert unknown[0] == 404

"""google-cloud-tpu is imported without aiohttp (tpuctl/cloud/nodes/tpu.py: client_module), and nothing else changes.

Each case runs in a fresh interpreter: which modules an import loads is a property of the process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

MAKE_CLIENT = """
from google.auth.credentials import AnonymousCredentials
from tpuctl.cloud.nodes.tpu import client_module
tpu_v2 = client_module()
client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(), client_options={"api_endpoint": "http://127.0.0.1:9"})
assert type(client._transport).__name__ == "TpuRestTransport", type(client._transport)
assert client_module() is tpu_v2
"""


def run(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_rest_client_is_built_without_importing_aiohttp_which_stays_importable() -> None:
    pytest.importorskip("aiohttp", reason="the saving exists only where aiohttp is installed")
    run(
        "import sys\n" + MAKE_CLIENT
        + "assert 'aiohttp' not in sys.modules, sorted(m for m in sys.modules if 'aiohttp' in m)\n"
        + "import aiohttp\nassert aiohttp.ClientSession\n"
    )


def test_an_aiohttp_the_process_already_imported_is_left_as_it_is() -> None:
    pytest.importorskip("aiohttp", reason="the case needs aiohttp installed")
    run("import sys, aiohttp\nbefore = sys.modules['aiohttp']\n" + MAKE_CLIENT + "assert sys.modules['aiohttp'] is before\n")

"""The one way tpuctl gets a Cloud Storage client (tail reads, Vertex staging writes)."""

from __future__ import annotations

import os
from typing import Any


def client() -> Any:
    """A storage client: anonymous against an emulator (STORAGE_EMULATOR_HOST, how tests reach one), else tpuctl's credentials."""
    import google.cloud.storage as storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="tpuctl-emulator", credentials=AnonymousCredentials())
    from tpuctl.cloud import credentials
    from tpuctl.settings import cloud as settings

    resolved = settings.resolve()
    identity = credentials.load(resolved)
    return storage.Client(project=resolved.get("project") or identity.project, credentials=identity.credentials)

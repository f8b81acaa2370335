"""The one way tpuctl gets a Cloud Storage client (tail reads, Vertex staging writes, the run view's uploads, the
TensorBoard plugin's reads), pointed where the storage-endpoint setting says, as every other API client is."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpuctl.settings.cloud import Settings


def client(resolved: Settings | None = None) -> Any:
    """A storage client: anonymous against an emulator (STORAGE_EMULATOR_HOST, how tests reach one), else tpuctl's
    credentials at the storage-endpoint setting (TPUCTL_STORAGE_ENDPOINT: a private endpoint, or a stand-in).
    `resolved`: the command's settings, its flags among them; else the settings as the environment and files give them."""
    import google.cloud.storage as storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="tpuctl-emulator", credentials=AnonymousCredentials())
    from tpuctl.cloud import credentials
    from tpuctl.settings import cloud as settings

    resolved = resolved or settings.resolve()
    identity = credentials.load(resolved)
    endpoint = {"api_endpoint": resolved.require("storage-endpoint")}
    return storage.Client(project=resolved.get("project") or identity.project, credentials=identity.credentials, client_options=endpoint)

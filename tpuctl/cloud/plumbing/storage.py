"""The one way tpuctl gets a Cloud Storage client (tail reads, Vertex staging writes, the run view's uploads, the
TensorBoard plugin's reads), pointed where the storage-endpoint setting says, as every other API client is."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpuctl.settings.cloud import Settings


def client(resolved: Settings | None = None, *, small_replies: bool = False) -> Any:
    """A storage client: anonymous against an emulator (STORAGE_EMULATOR_HOST, how tests reach one), else tpuctl's
    credentials at the storage-endpoint setting (TPUCTL_STORAGE_ENDPOINT: a private endpoint, or a stand-in).
    `resolved`: the command's settings, its flags among them; else the settings as the environment and files give them.
    `small_replies`: every reply is read whole within its request's timeout and at most retry.MAX_REPLY_BYTES
    (retry.bounded), for callers that read a bucket's metadata, listings and tail's 4 MiB ranges, not whole objects."""
    import google.cloud.storage as storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        made = storage.Client(project="tpuctl-emulator", credentials=AnonymousCredentials())
    else:
        from tpuctl.cloud.auth import credentials
        from tpuctl.settings import cloud as settings

        resolved = resolved or settings.resolve()
        identity = credentials.load(resolved)
        endpoint = {"api_endpoint": resolved.require("storage-endpoint")}
        made = storage.Client(project=resolved.get("project") or identity.project, credentials=identity.credentials, client_options=endpoint)
    if small_replies:
        from tpuctl.cloud.plumbing.retry import bounded

        bounded(made._http)  # its AuthorizedSession (google-cloud-core's Client._http), made on first use
    return made

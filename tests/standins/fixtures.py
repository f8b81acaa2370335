"""pytest fixtures and credential-file helpers around the Google stand-in.

The helpers write the same kinds of files users have (an access token file,
a service-account key, an authorized_user file from `gcloud auth
application-default login`) but pointing at the stand-in, so credential
loading is exercised for real rather than bypassed.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.standins.google_apis import GoogleStandin

SA_NAME = "tpuctl-sa"


@pytest.fixture
def google_standin() -> Iterator[GoogleStandin]:
    """A started stand-in for the test's duration (starting one takes a few milliseconds)."""
    with GoogleStandin(project="tpuctl-test", seed=0) as standin:
        yield standin


def write_access_token_file(g: GoogleStandin, path: Path) -> Path:
    """A file holding just the bearer token, as `gcloud auth print-access-token > FILE` makes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(g.token + "\n", encoding="utf-8")
    return path


@functools.lru_cache(maxsize=1)
def _rsa_key() -> tuple[str, Any]:
    """(PKCS#8 PEM private key, public key object), made once per process: 2048-bit keygen is not free."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem.decode(), key.public_key()


def service_account_email(g: GoogleStandin) -> str:
    return f"{SA_NAME}@{g.project}.iam.gserviceaccount.com"


def write_service_account_key(g: GoogleStandin, path: Path) -> Path:
    """A real service-account key file whose token_uri is the stand-in; the stand-in trusts its key."""
    pem, public_key = _rsa_key()
    email = service_account_email(g)
    g.register_service_account(email, public_key)
    info = {
        "type": "service_account",
        "project_id": g.project,
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": pem,
        "client_email": email,
        "client_id": "109876543210987654321",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": g.url + "/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": f"https://www.googleapis.com/robot/v1/metadata/x509/{email.replace('@', '%40')}",
        "universe_domain": "googleapis.com",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=2), encoding="utf-8")
    path.chmod(0o600)
    return path


def write_authorized_user(g: GoogleStandin, path: Path) -> Path:
    """An application-default-credentials file of a user; google-auth ignores any token_uri in it.

    Reaching the stand-in's /token needs `credentials.with_token_uri(g.url + "/token")`
    (tpuctl does this through TPUCTL_TOKEN_URI).
    """
    info = {
        "type": "authorized_user",
        "client_id": g.client_id,
        "client_secret": g.client_secret,
        "refresh_token": g.refresh_token,
        "account": "dev@example.com",
        "universe_domain": "googleapis.com",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=2), encoding="utf-8")
    path.chmod(0o600)
    return path


def standin_env(g: GoogleStandin, tmp_path: Path) -> dict[str, str]:
    """Environment for running tpuctl (or gcloud) as a subprocess against the stand-in, sealed from the user's files."""
    home = tmp_path / "home"
    for folder in (home, home / ".config", home / ".local" / "share", home / ".config" / "gcloud"):
        folder.mkdir(parents=True, exist_ok=True)
    token_file = write_access_token_file(g, tmp_path / "access-token")
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "CLOUDSDK_CONFIG": str(home / ".config" / "gcloud"),
        "NO_GCE_CHECK": "true",
        "TPUCTL_TPU_ENDPOINT": g.url,
        "TPUCTL_RESOURCEMANAGER_ENDPOINT": g.url,
        "TPUCTL_ML_ENDPOINT": g.url,
        "TPUCTL_SERVICEUSAGE_ENDPOINT": g.url,
        "TPUCTL_BILLING_ENDPOINT": g.url,
        "TPUCTL_QUOTAS_ENDPOINT": g.url,
        "TPUCTL_TOKEN_URI": g.url + "/token",
        "TPUCTL_ACCESS_TOKEN_FILE": str(token_file),
        "TPUCTL_PROJECT": g.project,
        # The checkout under test, not whichever tpuctl the interpreter has installed (a worktree sets PYTHONPATH).
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }

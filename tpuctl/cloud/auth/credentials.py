"""Google credentials: a ready access token, a key file, or Application Default Credentials.

Only the account name and where the credentials came from ever leave this
module as text; tokens and keys never do (DESIGN: Secrets).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.settings import gcloud as gcloud_config
from tpuctl.settings.cloud import Settings

_TOKEN_BYTES = 64 * 1024  # an OAuth access token is a few KB at most

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
LOGIN_HINT = (
    "run `gcloud auth application-default login`, or pass --credentials KEY.json "
    "or --access-token-file FILE"
)


@dataclass(frozen=True)
class Identity:
    credentials: Any  # google.auth.credentials.Credentials; typed loosely so importing this stays cheap
    account: str | None
    project: str | None  # the project the credentials name, if any
    source: str  # human words: "access token file /x", "key file /y", "application default credentials"


def load(settings: Settings) -> Identity:
    """Credentials in gcloud's order: an explicit token file, an explicit key file, then ADC."""
    token_file = settings.get("access-token-file")
    if token_file:
        return _from_token_file(Path(token_file), settings.source("access-token-file"))
    key_file = settings.get("credentials")
    if key_file:
        return _from_key_file(Path(key_file), settings.get("token-uri"))
    return _from_adc(settings.get("token-uri"))


def bearer_token(settings: Settings) -> str:
    """Just the token, for the stdlib reader: a token file needs no google-auth import at all."""
    token_file = settings.get("access-token-file")
    if token_file:
        return _read_token_file(Path(token_file), settings.source("access-token-file"))
    identity = load(settings)
    check_token(identity)
    return str(identity.credentials.token)


def _read_token_file(path: Path, source: str) -> str:
    text = inputs.read_small_text(path, f"access token file (from {source})", limit=_TOKEN_BYTES)
    if text is None:
        raise TpuctlError(f"cannot read access token file {path} (from {source}): FileNotFoundError")
    token = text.strip()
    if not token or any(c.isspace() for c in token):
        raise TpuctlError(f"access token file {path} does not hold one token", hint="write only the token, e.g. `gcloud auth print-access-token > FILE`")
    return token


def _from_token_file(path: Path, source: str) -> Identity:
    from google.oauth2.credentials import Credentials

    token = _read_token_file(path, source)
    account = gcloud_config.read_property("core", "account")
    return Identity(Credentials(token), account.value if account else None, None, f"access token file {path}")


def _read_key(path: Path) -> dict[str, Any]:
    text = inputs.read_small_text(path, "credentials file")
    if text is None:
        raise TpuctlError(f"cannot read credentials file {path}: FileNotFoundError")
    try:
        info = json.loads(text)
    except (ValueError, RecursionError):
        # The parser's message can quote the file's content, which may be key material.
        raise TpuctlError(f"credentials file {path} is not JSON") from None
    if not isinstance(info, dict) or not isinstance(info.get("type"), str):
        raise TpuctlError(f"credentials file {path} has no \"type\"", hint="expected a service-account or authorized-user JSON file")
    return info


def _from_key_file(path: Path, token_uri: str | None) -> Identity:
    from google.auth import exceptions, load_credentials_from_dict

    info = _read_key(path)
    try:
        credentials, project = load_credentials_from_dict(info, scopes=list(SCOPES))
    except (exceptions.DefaultCredentialsError, ValueError, KeyError):
        raise TpuctlError(f"credentials file {path} is not a usable {info['type']} file") from None
    account = info.get("client_email") or info.get("account") or None
    return Identity(_with_token_uri(credentials, token_uri), account, project or info.get("quota_project_id"), f"key file {path}")


def _from_adc(token_uri: str | None) -> Identity:
    import google.auth
    from google.auth import exceptions

    try:
        credentials, project = google.auth.default(scopes=list(SCOPES))
    except exceptions.DefaultCredentialsError as err:
        # The library's message names the file it tried, which helps; it holds no secret.
        reason = one_line(str(err), first=True)
        raise TpuctlError(f"no usable Google credentials: {reason}", hint=LOGIN_HINT, exit_code=FAILED) from None
    account = getattr(credentials, "service_account_email", None) or getattr(credentials, "account", None) or None
    if account in ("default", ""):
        account = None
    if account is None:
        gcloud_account = gcloud_config.read_property("core", "account")
        account = gcloud_account.value if gcloud_account else None
    return Identity(_with_token_uri(credentials, token_uri), account, project, "application default credentials")


def _with_token_uri(credentials: Any, token_uri: str | None) -> Any:
    """authorized_user files ignore a token_uri override; with_token_uri is the one way in."""
    if token_uri and hasattr(credentials, "with_token_uri"):
        return credentials.with_token_uri(token_uri)
    return credentials


def check_token(identity: Identity) -> None:
    """Refresh once now so a bad login is one clear line here, not a traceback mid-operation. The token endpoint is a
    Google API like any other: its request is bounded by the command's deadline (cloud/plumbing/retry.py), not by google-auth's
    two minutes."""
    import requests
    from google.auth import exceptions
    from google.auth.transport.requests import Request

    from tpuctl.cloud.plumbing import retry
    if identity.credentials.valid:
        return
    send = Request(retry.bounded(requests.Session()))  # the token's reply read whole within the request's time, as every reply

    def timed(url: str, method: str = "GET", body: Any = None, headers: Any = None, timeout: Any = None, **kwargs: Any) -> Any:
        return send(url, method, body, headers, timeout=retry.timeout(retry.REQUEST_S, url), **kwargs)

    try:
        retry.call(lambda: identity.credentials.refresh(timed), attempts=1)
    except retry.NoAnswer as err:
        from tpuctl.cloud.plumbing.api_errors import no_answer_hint

        raise TpuctlError(f"{err} while getting an access token with the {identity.source}", hint=no_answer_hint(err), exit_code=FAILED) from None
    except retry.TooLarge as err:
        raise TpuctlError(f"{err} while getting an access token with the {identity.source}", exit_code=FAILED) from None
    except exceptions.RefreshError as err:
        # RefreshError carries the token endpoint's reply; keep only its first short reason.
        reason = str(err.args[0]) if err.args else "refused"
        raise TpuctlError(
            f"cannot get an access token with the {identity.source}: {one_line(reason, 160, first=True)}", hint=LOGIN_HINT, exit_code=FAILED
        ) from None
    except exceptions.TransportError as err:
        raise TpuctlError(f"cannot reach the token endpoint: {one_line(str(err), 160, first=True)}", exit_code=FAILED) from None

"""Credentials in text from outside, hidden before tpuctl shows the text: how a hidden value reads, and the user
information of a URL (`https://user:PASSWORD@host`), which lands in terminal scrollback, CI logs and pasted bug
reports with whatever line quotes it. tpuctl/launch/secret_values.py applies the same rule to a launch's values."""

from __future__ import annotations

import re

# scheme://user:PASSWORD@host (a scheme's length bounded, so that a huge argument is read in linear time)
URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/@:\s]*:)(?P<password>[^/@\s]+)(?=@)")
# scheme://USERINFO@host: a package index's user name alone is often the token itself (`https://TOKEN@host`)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<userinfo>[^/@\s]+)(?=@)")


def hidden(value: str) -> str:
    return f"<hidden: {len(value)} characters>"


def url_credentials_hidden(text: str) -> str:
    """`text` with every URL's user information hidden, user name and all, as pip hides it in what it prints
    (pip's `redact_auth_from_url` takes a user name without a password for a token)."""
    if "://" not in text or "@" not in text:
        return text
    return _USERINFO.sub(lambda m: m["head"] + hidden(m["userinfo"]), text)

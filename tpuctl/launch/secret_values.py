"""The one rule for which values tpuctl keeps off the screen, and the places that apply it.

`--env` values and script arguments reach a dry run's output (every backend's: a plan,
a Kubernetes manifest, a Vertex AI body; text and --json alike), tpuctl's notices and
its error messages, which land in terminal scrollback, CI logs, committed manifests and
pasted bug reports. A value is hidden when its name looks like a secret's, when it looks
like a well-known token, or, for a URL, its password. The records a run writes (plan.json,
manifest.yaml: 0600 in 0700 folders) and what the workers get keep every value.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from tpuctl.inputs.redact import URL_PASSWORD, hidden

if TYPE_CHECKING:
    from tpuctl.inputs.errors import TpuctlError
    from tpuctl.launch.job import Job
    from tpuctl.launch.outcome import Outcome

# A name is secret when one of its words (split at _, -, . and lowerUpper) contains one of these ...
_SECRET_PARTS = ("TOKEN", "SECRET", "PASSW", "PASSPHRASE", "CREDENTIAL", "CREDS", "AUTH", "PRIVATE", "COOKIE", "SESSION", "APIKEY", "ACCESSKEY", "SIGNATURE")
# ... or is one of these.
_SECRET_WORDS = frozenset({"KEY", "KEYS", "PAT", "PASS", "PWD", "PW", "DSN", "SALT", "JWT", "BEARER", "OTP", "CRED"})
# Names that contain such a word but are not secrets.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
# Values whose shape gives them away whatever the name: GitHub, Hugging Face, OpenAI-style, Slack, GitLab, AWS keys, PEM.
_TOKEN_SHAPE = re.compile(r"(gh[pousr]_|github_pat_|hf_|sk-|xox[abpr]-|glpat-)[A-Za-z0-9_-]{8}|(AKIA|ASIA)[A-Z0-9]{16}|-----BEGIN ")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")


def is_secret_name(name: str) -> bool:
    words = [word.upper() for word in _WORD.findall(name)]
    if name.upper() in _NOT_SECRET:
        return False
    return any(word in _SECRET_WORDS or any(part in word for part in _SECRET_PARTS) for word in words)


def shown(name: str, value: str) -> str:
    """`value` as output shows it: hidden when its name or its shape says secret, a URL's password hidden."""
    if not value:
        return value
    if is_secret_name(name) or _TOKEN_SHAPE.search(value):
        return hidden(value)
    if "://" not in value or "@" not in value:
        return value
    return URL_PASSWORD.sub(lambda m: m["head"] + hidden(m["password"]), value)


def shown_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """Script arguments as output shows them: `--api-key=V` and `--token V` hide V."""
    out: list[str] = []
    after_secret_flag = False
    for arg in args:
        flag, equals, value = arg.partition("=")
        if after_secret_flag and not arg.startswith("-"):
            out.append(hidden(arg))
        elif arg.startswith("-") and equals:
            out.append(f"{flag}={shown(flag.lstrip('-'), value)}")
        else:
            out.append(shown("", arg))
        after_secret_flag = arg.startswith("-") and not equals and is_secret_name(arg.lstrip("-"))
    return tuple(out)


def for_display(job: Job) -> Job:
    """The job as every backend's dry run shows it: secret values replaced by their length."""
    return replace(job, env=tuple((name, shown(name, value)) for name, value in job.env), args=shown_args(job.args))


def scrub(text: str, job: Job) -> str:
    """`text` (a message tpuctl prints: a relayed kubectl or API error) with the job's hidden values taken out."""
    secrets = [value for name, value in job.env if value and shown(name, value) != value] + [
        value for value, display in zip(job.args, shown_args(job.args), strict=True) if display != value
    ]
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= 4:  # a 1-3 character "secret" would blank out ordinary words
            text = text.replace(value, hidden(value))
    return text


def scrub_error(err: TpuctlError, job: Job) -> None:
    """Take the job's hidden values out of an error's words in place: the error stays the one raised, of its kind and
    with what its kind carries (a hunt's tries, a stockout's kind), which no rebuilt copy could promise every kind."""
    err.message = scrub(err.message, job)
    err.hint = err.hint and scrub(err.hint, job)
    err.args = (err.message, *err.args[1:])


def scrubbed_outcome(outcome: Outcome, job: Job) -> Outcome:
    """The outcome with the job's hidden values taken out of what it relays from elsewhere: a cluster's or an API's
    last word on the job (a failed Vertex job's error can quote the request) and the failure's cause, which the summary,
    `--json` and outcome.json print. The failure's last lines stay as the worker printed them: they are its own."""
    relayed = outcome.job
    if relayed is not None:
        relayed = replace(relayed, message=scrub(relayed.message, job))
    failure = outcome.failure
    if failure is not None:
        cause = None if failure.cause is None else replace(failure.cause, summary=scrub(failure.cause.summary, job))
        failure = replace(failure, ending=replace(failure.ending, words=scrub(failure.ending.words, job)), cause=cause)
    return replace(outcome, job=relayed, failure=failure)

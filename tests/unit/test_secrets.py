"""Secret values stay out of every backend's output (issue 29): dry-run text and --json, local, ssh,
Kubernetes and Vertex AI alike, and out of tpuctl's own messages; the files a run writes keep them."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tpuctl.cli import main
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch import secret_values
from tpuctl.launch.job import Job

NOOP = ROOT / "benchmarks" / "scripts" / "noop.py"
SECRETS = {
    "API_TOKEN": "tok-3f9a1c",
    "DB_PASSWORD": "hunter2-db",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
    "HF_TOKEN": "hf_abcdefghijkl",
    "GITHUB_PAT": "pat-11AAbbCC",
    "CREDS": "user:pw-creds",
}
BACKEND_ARGS = {
    "local": [],
    "ssh": ["--hosts", "gpu-a,gpu-b"],
    "kubernetes": ["--backend", "kubernetes", "--image", "example.com/train:1"],
    "vertex": ["--backend", "vertex", "--image", "example.com/train:1", "--project", "my-project"],
}


def _launch(*args: str) -> tuple[int, str, str]:
    with CliRunner().isolation() as (out, err, _):
        try:
            main(["launch", *args])
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
    return code, out.getvalue().decode(), err.getvalue().decode()


@pytest.mark.parametrize("backend", list(BACKEND_ARGS))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_no_backend_prints_a_secret_value_in_a_dry_run(backend: str, as_json: bool) -> None:
    env = [arg for name, value in SECRETS.items() for arg in ("--env", f"{name}={value}")]
    args = [str(NOOP), *BACKEND_ARGS[backend], "--workers", "2", *env, "--env", "BATCH=64", "--dry-run", *(["--json"] if as_json else [])]
    code, out, err = _launch(*args, "--", "--api-key=sk-live-0123456789", "--token", "plain-arg-secret", "--epochs", "3")
    assert code == 0, err
    leaked = [value for value in [*SECRETS.values(), "sk-live-0123456789", "plain-arg-secret"] if value in out + err]
    assert leaked == [], f"{backend} printed {leaked}"
    assert "<hidden: 10 characters>" in out  # API_TOKEN's value: its length, not its text
    assert "64" in out and "--epochs" in out  # what is not secret is shown, so the request can be checked
    if as_json:
        json.loads(out)


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "API_TOKEN", "WANDB_API_KEY", "DB_PASSWORD", "MYSQL_PWD", "SMTP_PASS", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
     "GOOGLE_APPLICATION_CREDENTIALS", "GITHUB_PAT", "CREDS", "DB_CRED", "MY_SECRET", "KEY", "SSH_PRIVATE_KEY", "SESSION_ID",
     "OAUTH_CLIENT", "apiKey", "hfToken", "SENTRY_DSN", "GPG_PASSPHRASE", "JWT", "KAGGLE_KEY", "SIGNING_SALT"],
)
def test_secret_looking_names_are_hidden(name: str) -> None:
    assert secret_values.shown(name, "value") == "<hidden: 5 characters>"


@pytest.mark.parametrize(
    "name", ["TF_CPP_MIN_LOG_LEVEL", "KEYRING_BACKEND", "BATCH_SIZE", "PYTHONPATH", "PWD", "CREDIT_LIMIT", "PATH", "NCCL_DEBUG", "MONKEY"]
)
def test_ordinary_names_are_shown(name: str) -> None:
    assert secret_values.shown(name, "value") == "value"


def test_values_that_give_themselves_away_are_hidden_whatever_their_name() -> None:
    assert secret_values.shown("GH", "ghp_0123456789abcdefABCDEF") == "<hidden: 26 characters>"
    assert secret_values.shown("X", "AKIAIOSFODNN7EXAMPLE") == "<hidden: 20 characters>"
    assert secret_values.shown("DATABASE_URL", "postgres://me:s3cret@db:5432/x") == "postgres://me:<hidden: 6 characters>@db:5432/x"
    assert secret_values.shown("HOME_URL", "https://example.com/a") == "https://example.com/a"


def test_script_arguments_hide_the_values_of_secret_flags() -> None:
    args = ("--api-key=abc123", "--token", "t0k3n", "--epochs", "3", "--verbose", "data.csv")
    assert secret_values.shown_args(args) == (
        "--api-key=<hidden: 6 characters>", "--token", "<hidden: 5 characters>", "--epochs", "3", "--verbose", "data.csv"
    )


def test_messages_tpuctl_relays_lose_the_jobs_secret_values() -> None:
    """A kubectl or API error that quotes the manifest (a 422 names the invalid value) is printed without it."""
    job = Job(script="t.py", env=(("API_TOKEN", "tok-3f9a1c"), ("BATCH", "64")), args=("--password", "pw-long-enough"))
    message = 'kubectl apply failed: env[0].value: Invalid value: "tok-3f9a1c"; args: pw-long-enough; BATCH=64'
    assert secret_values.scrub(message, job) == (
        'kubectl apply failed: env[0].value: Invalid value: "<hidden: 10 characters>"; args: <hidden: 14 characters>; BATCH=64'
    )


def test_a_run_keeps_every_value_in_its_private_record(tmp_path: Path) -> None:
    """Hiding is for output: the plan a run writes (0600, docs/security.md) and the workers' environment keep the value."""
    logs = tmp_path / "logs"
    code, _, err = _launch(str(NOOP), "--strategy", "none", "--env", "API_TOKEN=tok-3f9a1c", "--log-dir", str(logs))
    assert code == 0, err
    assert "tok-3f9a1c" not in err
    assert "tok-3f9a1c" in (logs / "attempt-1" / "plan.json").read_text()


def _error_kinds() -> list[type[TpuctlError]]:
    """Every TpuctlError kind tpuctl defines, its modules imported (tpuctl/runtime/ aside: it imports TensorFlow; __main__ runs the CLI)."""
    for path in sorted(ROOT.joinpath("tpuctl").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if not name.startswith("tpuctl.runtime") and not name.endswith("__main__"):
            importlib.import_module(name)
    kinds: list[type[TpuctlError]] = []
    pending: list[type[TpuctlError]] = [TpuctlError]
    while pending:
        kind = pending.pop()
        kinds.append(kind)
        pending.extend(kind.__subclasses__())
    return kinds


def _made(kind: type[TpuctlError], message: str, hint: str) -> TpuctlError:
    """An error of `kind` as its raiser makes it: the message, a hint where it takes one, a placeholder for each other
    argument its constructor requires (a hunt's tries)."""
    required = {
        name: object()
        for name, parameter in list(inspect.signature(kind).parameters.items())[1:]
        if parameter.default is inspect.Parameter.empty and parameter.kind is not inspect.Parameter.VAR_KEYWORD
    }
    if "hint" in inspect.signature(kind).parameters:
        required["hint"] = hint
    return kind(message, **required)


def test_a_runs_error_is_scrubbed_in_place_for_every_kind_of_error() -> None:
    """execute.py re-raises a run's error with the job's secrets taken out: of its own kind, with its exit status and
    what its kind carries, for every kind (a hunt's HuntStopped requires its tries and a rebuilt one crashed)."""
    job = Job(script="t.py", env=(("API_TOKEN", "tok-3f9a1c"),))
    kinds = _error_kinds()
    assert {"TpuctlError", "CapacityError", "HuntStopped"} <= {kind.__name__ for kind in kinds}
    for kind in kinds:
        err = _made(kind, "failed with tok-3f9a1c", "retry without tok-3f9a1c")
        carried = dict(vars(err))
        secret_values.scrub_error(err, job)
        assert type(err) is kind and err.exit_code == carried["exit_code"]
        assert err.message == "failed with <hidden: 10 characters>" and str(err).count("tok-3f9a1c") == 0, kind
        assert err.args == (err.message,)
        assert {k: v for k, v in vars(err).items() if k not in ("message", "hint")} == {
            k: v for k, v in carried.items() if k not in ("message", "hint")
        }

"""Hostile clouds and flags for the commands that talk to Google: endpoints that accept a request and never answer,
answer a byte at a time, answer more than any API does or page without end; a project with more zones than one page
lists, zone options that contradict each other, deadlines no clock can hold.

Every command ends within its deadline (the api-timeout setting, --api-timeout, or --hunt-timeout for a hunt's
listing) in one line naming the endpoint that did not answer, exit 1 (docs/cloud.md, Deadlines). The deadlines are
made small here through the option and the environment variable the docs name, and each command is timed from its
first unanswered request; one that ignored them would wait 8 tries of 60 s, or a trickle's bytes one by one, so
HUNG_S after its start it is killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import run_tpuctl, tpuctl_cmd
from tests.standins.cloud_cli import ZONE, error_line
from tests.standins.fixtures import standin_env, write_service_account_key
from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.plumbing import retry

DEADLINE_S = 2
GRACE_S = 10  # from the deadline to the command's exit: the line printed, on a busy 2-core machine
HUNG_S = 90  # a command still running then waits as it did before deadlines (8 tries of 60 s): killed, and the test fails


@dataclass
class Case:
    args: list[str]
    env: dict[str, str]
    said: str  # the error line after "Error: ENDPOINT did not answer within N s ": what set the deadline, what was being done
    path: str = ""  # the endpoint's, after the stand-in's address
    fault: Callable[[GoogleStandin], None] = lambda g: g.silence("/v", "/storage/", "/token")


def _cases(tmp_path: Path, g: GoogleStandin) -> dict[str, Case]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "train.py"
    script.write_text("print('never started')\n")
    by_setting = {"TPUCTL_API_TIMEOUT": str(DEADLINE_S)}
    launch = ["launch", "--api-timeout", str(DEADLINE_S), str(script), "--new-tpu", "v4-8", "--strategy", "none", "--log-dir", str(tmp_path / "logs")]
    key = {"TPUCTL_CREDENTIALS": str(write_service_account_key(g, tmp_path / "key.json")), "TPUCTL_ACCESS_TOKEN_FILE": "", **by_setting}
    in_project = f"in project {g.project}"
    return {
        "offers": Case(["offers", "v4-8"], by_setting, f"(api-timeout setting) while trying to list zones {in_project}"),
        # The api-timeout setting is left at its 60 s: the listing of the offers counts against --hunt-timeout.
        "create": Case(["create", "n", "--zones", "all", "--hunt-timeout", str(DEADLINE_S)], {}, f"(--hunt-timeout) while trying to list zones {in_project}"),
        "launch": Case(launch, {}, f"(--api-timeout) while trying to list zones {in_project}"),
        # A command that is not about the cloud but may ask it: doctor --tpu NAME asks the TPU API for the hosts.
        "doctor": Case(["doctor", "--tpu", "gone", "--no-import"], by_setting, f"(api-timeout setting) while trying to get node gone {in_project}"),
        "list": Case(["list"], by_setting, f"(api-timeout setting) while trying to list nodes {in_project}"),
        "delete": Case(["delete", "gone", "--yes"], by_setting, f"(api-timeout setting) while trying to get node gone {in_project}"),
        "describe": Case(["describe", "gone", "--api-timeout", str(DEADLINE_S)], {}, f"(--api-timeout) while trying to get node gone {in_project}"),
        # A key file's token comes from the token endpoint, silent too: google-auth alone would wait 120 s for it.
        "token": Case(["list"], key, "(api-timeout setting) while getting an access token with the key file", "/token"),
    }


def test_a_silent_endpoint_ends_each_command_within_its_deadline(tmp_path: Path) -> None:
    """Each command against a stand-in of its own whose every API and token endpoint accept, read and never answer,
    all at once, each timed from its first unanswered request (a busy machine may take seconds to start Python)."""
    names = ("offers", "create", "launch", "list", "delete", "describe", "doctor", "token")
    for name, case, g, result, took in _each_against_its_own(tmp_path, names, _cases):
        assert error_line(result).startswith(f"Error: {g.url}{case.path} did not answer within {DEADLINE_S} s {case.said}"), f"{name}: {result.stderr}"
        assert took <= DEADLINE_S + GRACE_S, name
        assert not any(g.nodes(zone) for zone in g.zones), name  # nothing was made while nothing answered


def _trickled(tmp_path: Path, g: GoogleStandin) -> dict[str, Case]:
    """Replies sent a byte a second, status line and headers too, each byte inside a 2 s request's read timeout: the
    TPU API's reads (http.client), google-cloud-tpu's REST transport (requests), a REST call of tpuctl's own (IAM,
    requests) and the token endpoint (google-auth)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    by_setting = {"TPUCTL_API_TIMEOUT": str(DEADLINE_S)}
    key = {"TPUCTL_CREDENTIALS": str(write_service_account_key(g, tmp_path / "key.json")), "TPUCTL_ACCESS_TOKEN_FILE": "", **by_setting}
    auth = ["auth", "--dry-run", "--model-dir", "gs://my-bucket/runs"]
    in_project = f"in project {g.project}"
    token = "(api-timeout setting) while getting an access token with the key file"
    return {
        "list": Case(["list"], by_setting, f"(api-timeout setting) while trying to list nodes {in_project}", fault=lambda g: g.trickle("/v2/", every_s=1)),
        # google-cloud-tpu's create: the service makes the node before the reply trickles, so the line says how to delete it.
        "create": Case(
            ["create", "n", "--accelerator-type", "v4-8"], by_setting,
            f"(api-timeout setting) while trying to create node n {in_project}, zone {ZONE}; the service may still make n: `tpuctl delete n --zone {ZONE}`",
            fault=lambda g: g.trickle("/v2/", every_s=1, methods=("POST",)),
        ),
        "iam": Case(auth, by_setting, f"(api-timeout setting) while trying to read the IAM policy {in_project}", fault=lambda g: g.trickle("/v1/", every_s=1)),
        "token": Case(["list"], key, token, "/token", lambda g: g.trickle("/token", every_s=1)),
    }


def test_an_endpoint_that_trickles_ends_each_command_within_its_deadline(tmp_path: Path) -> None:
    """A reply that comes a byte at a time, each just inside the socket's read timeout, is cut where the request's
    time is up, as silence is: the same line, the same deadline, whichever library reads it."""
    for name, case, g, result, took in _each_against_its_own(tmp_path, ("list", "create", "iam", "token"), _trickled):
        assert error_line(result).startswith(f"Error: {g.url}{case.path} did not answer within {DEADLINE_S} s {case.said}"), f"{name}: {result.stderr}"
        assert took <= DEADLINE_S + GRACE_S, name
        assert [node["name"].rsplit("/", 1)[-1] for node in g.nodes(ZONE)] == (["n"] if name == "create" else [])


def _unreal(tmp_path: Path, g: GoogleStandin) -> dict[str, Case]:
    """Replies no Google API gives (`said`: the line after "Error: "): 40 MiB of JSON whitespace before the TPU API's
    listing (http.client) and the token endpoint's answer (google-auth, requests); a listing of nodes whose pages never
    end, one of zones that gives a page token again."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    key = {"TPUCTL_CREDENTIALS": str(write_service_account_key(g, tmp_path / "key.json")), "TPUCTL_ACCESS_TOKEN_FILE": ""}
    huge = f"{g.url}{{}} answered with more than {retry.MAX_REPLY_BYTES >> 20} MiB (more than any Google API reply; not read further)"
    api, past = f"the TPU API at {g.url}", 40 << 20
    return {
        "huge": Case(["list"], {}, f"{huge.format('')} while trying to list nodes in project", fault=lambda g: g.pad("/v2/", size=past, methods=("GET",))),
        "huge-token": Case(["list"], key, f"{huge.format('/token')} while getting an access token", fault=lambda g: g.pad("/token", size=past)),
        "endless": Case(["list"], {}, f"{api} was still paging after {retry.MAX_PAGES} pages while trying to list", "", lambda g: g.endless_pages("/nodes")),
        "circle": Case(
            ["offers", "v4-8"], {}, f"{api} paged in a circle (a page token given twice) while trying to list zones",
            fault=lambda g: g.endless_pages("/locations", same_token=True),
        ),
    }  # fmt: skip


def test_a_reply_larger_than_any_or_pages_without_end_are_one_line(tmp_path: Path) -> None:
    """A reply past MAX_REPLY_BYTES is not read further, a listing past MAX_PAGES pages or given a page token twice is
    not followed further: one line each, exit 1, nothing asked again."""
    for name, case, g, result, _ in _each_against_its_own(tmp_path, ("huge", "huge-token", "endless", "circle"), _unreal):
        assert error_line(result).startswith(f"Error: {case.said}"), f"{name}: {result.stderr}"
        if name == "endless":
            assert g.count("GET", "/nodes") == retry.MAX_PAGES
        else:
            assert len(g.requests) <= 3, f"{name}: {g.requests}"


def _each_against_its_own(
    tmp_path: Path, names: tuple[str, ...], cases: Callable[[Path, GoogleStandin], dict[str, Case]], status: int = 1
) -> Iterator[tuple[str, Case, GoogleStandin, subprocess.CompletedProcess[str], float]]:
    """Each named case's command against a stand-in of its own with the case's fault, all at once; for each, its
    result (exit `status`, or the test fails) and how long it ran after its first held request."""
    with ExitStack() as stack:
        clouds = {name: stack.enter_context(GoogleStandin(project="tpuctl-test", seed=0)) for name in names}
        chosen = {name: cases(tmp_path / name, g)[name] for name, g in clouds.items()}
        started: dict[str, subprocess.Popen[str]] = {}
        stack.callback(lambda: [proc.kill() for proc in started.values() if proc.poll() is None])
        for name, g in clouds.items():
            chosen[name].fault(g)
            env = {**standin_env(g, tmp_path / name), "TPUCTL_ZONE": ZONE, **chosen[name].env}
            started[name] = subprocess.Popen(tpuctl_cmd(*chosen[name].args), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ended = _exits(started)
        for name, proc in started.items():
            g = clouds[name]
            out, err = proc.communicate()
            result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
            assert result.returncode == status, f"{name}: {result.returncode}\n{result.stdout}\n{result.stderr}"
            yield name, chosen[name], g, result, ended[name] - (g.first_held_at or ended[name])


def _exits(procs: dict[str, subprocess.Popen[str]]) -> dict[str, float]:
    """When each process ended (time.monotonic()); one still running HUNG_S from now fails the test (their output is
    a few lines: no pipe fills while they run)."""
    ended: dict[str, float] = {}
    until = time.monotonic() + HUNG_S
    while len(ended) < len(procs):
        ended |= {name: time.monotonic() for name, proc in procs.items() if name not in ended and proc.poll() is not None}
        if time.monotonic() > until:
            pytest.fail(f"still waiting {HUNG_S} s after they started: {sorted(set(procs) - set(ended))}")
        time.sleep(0.05)
    return ended


def test_one_deadline_for_all_of_a_commands_calls(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """The price catalogue and the quotas are silent, the TPU API answers: offers still ranks what it can, the price
    read spends the deadline and the quota read after it is not even sent: one deadline, not one per call."""
    g = google_standin
    g.silence("/v1/")  # the Billing Catalog (v1/services/S/skus) and Cloud Quotas (v1/projects/P/.../quotaInfos)
    env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": ZONE, "TPUCTL_API_TIMEOUT": str(DEADLINE_S)}
    result = run_tpuctl("offers", "v4-8", env=env, cwd=tmp_path, timeout=HUNG_S)
    assert google_standin.first_held_at is not None and time.monotonic() - google_standin.first_held_at <= DEADLINE_S + GRACE_S
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["TYPE", "ZONE"] and any(line.startswith("v4-8 ") for line in lines)
    said = f"quota unknown: {g.url} did not answer within {DEADLINE_S} s (api-timeout setting) while trying to"
    assert any(line.startswith(said) for line in lines), result.stdout
    assert g.count("GET", "/skus") >= 1 and g.count("GET", "/quotaInfos") == 0


def test_a_project_of_more_zones_than_a_page_is_read_whole(google_standin: GoogleStandin, tmp_path: Path) -> None:
    """250 zones, listed 50 a page (nextPageToken), all of them named in --zones: each checked against the listing."""
    g = google_standin
    zones = [f"us-zone{index:03d}-a" for index in range(250)]
    g.set_zones(zones, ["v4-8"])
    env = {**standin_env(g, tmp_path), "TPUCTL_ZONE": zones[0]}
    result = run_tpuctl("offers", "v4-8", "--zones", ",".join(zones), "--capacity", "on-demand", "--json", env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(offer["zone"] for offer in json.loads(result.stdout)) == zones
    assert len([target for method, target, _ in g.requests if urlsplit(target).path.endswith("/locations")]) == 5  # of 50
    unknown = run_tpuctl("offers", "v4-8", "--zones", ",".join([*zones, "us-zone999-a"]), env=env, cwd=tmp_path, timeout=120)
    assert unknown.returncode == 2
    assert error_line(unknown).startswith(f"Error: not a Cloud TPU zone of project {g.project}: us-zone999-a")


def test_zone_and_zones_together_are_refused_alike(tmp_path: Path) -> None:
    """launch --new-tpu hunts as create does: naming one zone and several is one refusal, in create's words."""
    script = tmp_path / "train.py"
    script.write_text("print('never started')\n")
    pair = ["--zone", "us-central2-b", "--zones", "us-central2-b,us-east5-a"]
    env = {**os.environ, "HOME": str(tmp_path)}
    create = run_tpuctl("create", "n", "--accelerator-type", "v4-8", *pair, env=env, cwd=tmp_path, timeout=60)
    launch = run_tpuctl("launch", str(script), "--new-tpu", "v4-8", *pair, "--dry-run", env=env, cwd=tmp_path, timeout=60)
    offers = run_tpuctl("offers", "v4-8", *pair, env=env, cwd=tmp_path, timeout=60)
    assert (create.returncode, launch.returncode, offers.returncode) == (2, 2, 2), launch.stdout + launch.stderr
    assert error_line(launch) == error_line(create) and error_line(create).startswith("Error: give --zone or --zones, not both")
    assert error_line(offers).startswith("Error: give --zone or --zones, not both")


@pytest.mark.parametrize("seconds", ["0", "nan", "99999999999999999999", "60s"])
def test_a_deadline_no_clock_can_hold_is_one_line(tmp_path: Path, seconds: str) -> None:
    for args, env in ((["list", "--api-timeout", seconds], {}), (["list"], {"TPUCTL_API_TIMEOUT": seconds})):
        result = run_tpuctl(*args, env={**os.environ, "HOME": str(tmp_path), **env}, cwd=tmp_path, timeout=60)
        assert result.returncode == 2, result.stderr
        assert error_line(result).startswith("Error: api-timeout ") and "is not valid" in error_line(result)


def test_tails_bucket_reads_that_trickle_end_within_their_read_time(google_standin: GoogleStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tail's gs:// requests wait TIMEOUT_S (60 s a read) for an answer: a reply a byte at a time, each inside that, is
    cut there too, and the poll ends in StorageUnreachable, as for silence. The read time is made 1 s here."""
    from tpuctl.watch import sources

    g = google_standin
    for name, value in {**standin_env(g, tmp_path), "TPUCTL_STORAGE_ENDPOINT": g.url}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(sources, "TIMEOUT_S", (1.0, 1.0))
    monkeypatch.setattr(sources, "RETRY_S", 0.5)
    g.projects.add_bucket("my-bucket")
    g.trickle("/storage/", every_s=0.4)
    source = sources.GcsSource("gs://my-bucket/runs")
    began = time.monotonic()
    with pytest.raises(sources.StorageUnreachable, match="no answer from storage"):
        source.list()
    assert time.monotonic() - began < 30  # a reply trickled whole, a byte each 0.4 s, would take minutes

"""The one deadline of a command's Google API calls (tpuctl/cloud/plumbing/retry.py): what it counts, what it stops, whose it is.

A "request" here is what a transport does: ask `retry.timeout` for its timeout, then wait that long for an answer
(`silent`) or get one (`answered`). The seconds are small and real: the deadline is read from the monotonic clock.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.auth.credentials import Identity
from tpuctl.cloud.plumbing import retry
from tpuctl.cloud.plumbing.api_errors import Where, guarded
from tpuctl.cloud.vertex import vertex_api
from tpuctl.inputs.errors import FAILED, TpuctlError

ENDPOINT = "https://tpu.example.test"


class Endpoint:
    """Counts the requests sent; `silent` ones wait out their timeout as a socket read would, then time out."""

    def __init__(self) -> None:
        self.sent = 0
        self._lock = threading.Lock()

    def _send(self) -> float:
        wait = retry.timeout(60.0, ENDPOINT)
        with self._lock:
            self.sent += 1
        return wait

    def silent(self) -> str:
        time.sleep(self._send())
        raise TimeoutError("timed out")

    def answered(self, seconds: float = 0.0) -> str:
        self._send()
        time.sleep(seconds)
        return "ok"


def test_a_silent_call_ends_at_the_deadline_naming_the_endpoint() -> None:
    endpoint = Endpoint()
    began = time.monotonic()
    with retry.limited(0.4, "--api-timeout"), pytest.raises(retry.NoAnswer) as raised:
        retry.call(endpoint.silent)
    assert 0.4 <= time.monotonic() - began < 1.5
    assert str(raised.value) == f"{ENDPOINT} did not answer within 0.4 s (--api-timeout)"


def test_the_commands_calls_share_it_and_none_is_sent_past_it() -> None:
    endpoint = Endpoint()
    with retry.limited(0.3, "--api-timeout"):
        with pytest.raises(retry.NoAnswer):
            retry.call(endpoint.silent)
        sent = endpoint.sent
        for _ in range(3):  # a note, a fallback: the command goes on, and each later call is refused at once
            began = time.monotonic()
            with pytest.raises(retry.NoAnswer):
                retry.call(endpoint.answered)
            assert time.monotonic() - began < 0.1
    assert endpoint.sent == sent


def test_answers_cost_nothing_however_long_the_command() -> None:
    """A create polling for half an hour is not cut short: only unanswered time counts."""
    endpoint = Endpoint()
    with retry.limited(0.2, "--api-timeout"):
        assert [retry.call(lambda: endpoint.answered(0.05)) for _ in range(8)] == ["ok"] * 8  # 0.4 s of answered calls


def test_each_call_has_its_own_where_a_command_runs_for_days() -> None:
    """babysit and a launch: an outage an hour ago must not refuse the delete at the end."""
    endpoint = Endpoint()
    with retry.limited(0.2, "api-timeout setting", each_call=True):
        with pytest.raises(retry.NoAnswer):
            retry.call(endpoint.silent)
        assert retry.call(endpoint.answered) == "ok"
        with pytest.raises(retry.NoAnswer, match=r"within 0\.2 s \(api-timeout setting\)"):
            retry.call(endpoint.silent)


def test_a_wall_clock_bound_caps_answered_and_unanswered_time_alike() -> None:
    """--hunt-timeout's bound on the listing: what the listing took counts, answered or not."""
    endpoint = Endpoint()
    with retry.limited(60, "--api-timeout"), retry.limited(1.0, "--hunt-timeout", wall=True):
        retry.call(lambda: endpoint.answered(0.7))
        began = time.monotonic()
        with pytest.raises(retry.NoAnswer, match=r"within 1 s \(--hunt-timeout\)"):
            retry.call(endpoint.silent)
        assert time.monotonic() - began < 0.9  # the 0.3 s left; a fresh allowance would be 1 s


def test_threads_of_one_command_spend_one_allowance() -> None:
    """A listing of many zones at once: every thread's request ends by the command's deadline, and no later one starts."""
    endpoint = Endpoint()
    began = time.monotonic()
    with retry.limited(0.4, "--api-timeout"), ThreadPoolExecutor(8) as pool:
        failed = [future.exception() for future in [pool.submit(retry.call, endpoint.silent) for _ in range(16)]]
    assert all(isinstance(error, retry.NoAnswer) for error in failed)
    assert time.monotonic() - began < 1.5 and endpoint.sent == 8  # the second wave found nothing left


def test_without_a_scope_each_call_has_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "DEFAULT_S", 0.2)
    endpoint = Endpoint()
    for _ in range(2):
        with pytest.raises(retry.NoAnswer, match=r"within 0\.2 s \(api-timeout setting\)"):
            retry.call(endpoint.silent)
    assert endpoint.sent >= 2


def test_no_answer_is_one_line_that_names_the_endpoint_and_exits_1() -> None:
    endpoint = Endpoint()
    where = Where("list zones", "my-project")
    with retry.limited(0.2, "--api-timeout"), pytest.raises(TpuctlError) as raised:
        guarded(endpoint.silent, where)
    assert raised.value.exit_code == FAILED
    assert raised.value.message == f"{ENDPOINT} did not answer within 0.2 s (--api-timeout) while trying to list zones in project my-project"
    assert raised.value.hint is not None and "--api-timeout" in raised.value.hint


def test_an_endpoint_that_keeps_answering_try_again_is_named_by_its_answer() -> None:
    """A 503 at the deadline is what the endpoint said, not silence: the line is the 503's."""
    from google.api_core import exceptions as api

    def busy() -> str:
        retry.timeout(60.0, ENDPOINT)
        raise api.ServiceUnavailable("backend busy")

    with retry.limited(0.3, "--api-timeout"), pytest.raises(api.ServiceUnavailable):
        retry.call(busy, sleep=lambda seconds: None)


@pytest.mark.parametrize("same_token", [False, True])
def test_a_jobs_logs_read_a_bounded_share_of_endless_pages_each_poll(google_standin: GoogleStandin, same_token: bool) -> None:
    """Cloud Logging paging without end (or in a circle) costs a Vertex run's follower LOG_PAGES pages a poll, not the
    run: the next poll asks again from the newest entry read."""
    from google.oauth2.credentials import Credentials

    g = google_standin
    g.endless_pages("entries:list", same_token=same_token, pages=3 * vertex_api.LOG_PAGES)  # ends after all, for a reader without a bound
    identity = Identity(Credentials(g.token), None, g.project, "a test token")
    logs = vertex_api.JobLogs(identity, g.url, g.project, f"projects/{g.project}/locations/us-central1/customJobs/1")
    assert logs.new_lines() == []
    assert g.count("POST", "entries:list") == (2 if same_token else vertex_api.LOG_PAGES)

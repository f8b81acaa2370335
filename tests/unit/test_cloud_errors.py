"""Retry decisions and one-line messages for the failures Google's APIs really return."""

from __future__ import annotations

import json

import pytest
import requests
from google.api_core import exceptions as api

from tpuctl.cloud.plumbing import retry
from tpuctl.cloud.plumbing.api_errors import Where, explain, operation_failed
from tpuctl.inputs.errors import AccessDenied, CapacityError, QuotaError, Stockout, TpuctlError

WHERE = Where("create node my-tpu", "tpuctl-test", "us-central2-b", "tpu.nodes.create")


def _reply(status: int, body: str) -> api.GoogleAPICallError:
    """The exception google-api-core builds from a real HTTP error reply."""
    response = requests.Response()
    response.status_code = status
    response._content = body.encode()
    response.request = requests.Request("POST", "http://127.0.0.1/v2/x").prepare()
    return api.from_http_response(response)


RATE_LIMIT = _reply(
    429,
    '{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded for quota metric \'Requests\' and limit \'Requests per minute\'",'
    ' "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com"}]}}',
)
QUOTA = _reply(
    429,
    '{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota limit \'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI\' has been exceeded. '
    'Limit: 0 in zone us-central2-b."}}',
)
DISABLED = _reply(
    403,
    '{"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "Cloud TPU API has not been used in project 1 before or it is disabled.",'
    ' "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED", "domain": "googleapis.com"}]}}',
)
DENIED = _reply(
    403,
    '{"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "Permission \'tpu.nodes.create\' denied on resource \'projects/p/locations/z/nodes/n\' (or it may not exist)."}}',
)


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (_reply(503, '{"error": {"code": 503, "message": "unavailable"}}'), True),
        (_reply(500, '{"error": {"code": 500, "message": "internal"}}'), True),
        (RATE_LIMIT, True),
        (QUOTA, False),
        (DENIED, False),
        (_reply(409, '{"error": {"code": 409, "message": "exists"}}'), False),
        (requests.ConnectionError("refused"), True),
        (ValueError("a bug"), False),
    ],
)
def test_what_is_retried(exc: BaseException, transient: bool) -> None:
    assert retry.is_transient(exc) is transient


def test_call_retries_transient_then_succeeds_and_stops_on_permanent() -> None:
    outcomes: list[BaseException | str] = [_reply(503, "{}"), RATE_LIMIT, "done"]
    waits: list[float] = []

    def flaky() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert retry.call(flaky, sleep=waits.append) == "done"
    assert len(waits) == 2 and all(0 <= w <= retry.CAP_S for w in waits)

    calls = []

    def denied() -> None:
        calls.append(1)
        raise DENIED

    with pytest.raises(api.Forbidden):
        retry.call(denied, sleep=waits.append)
    assert len(calls) == 1


def test_call_gives_up_after_its_attempts() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise requests.ConnectionError("refused")

    with pytest.raises(requests.ConnectionError):
        retry.call(down, attempts=3, sleep=lambda s: None)
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("exc", "words", "exit_code"),
    [
        (DISABLED, ["tpu.googleapis.com API is not enabled in project tpuctl-test, zone us-central2-b", "gcloud services enable"], 1),
        (DENIED, ["permission denied: create node my-tpu needs tpu.nodes.create in project tpuctl-test, zone us-central2-b"], 1),
        (QUOTA, ["quota exceeded in project tpuctl-test, zone us-central2-b", "request more quota"], 1),
        (_reply(400, '{"error": {"code": 400, "message": "Invalid\\nrequest"}}'), ["cannot create node my-tpu", "Invalid request"], 2),
        (_reply(401, '{"error": {"code": 401, "message": "no"}}'), ["refused the credentials"], 1),
        (requests.ConnectionError("x"), ["cannot reach the Google API"], 1),
        (_reply(503, '{"error": {"code": 503, "message": "down"}}'), ["after retries"], 1),
    ],
)
def test_explanations_are_one_line_with_the_place(exc: BaseException, words: list[str], exit_code: int) -> None:
    err = explain(exc, WHERE)
    text = str(err)
    assert "\n" not in text
    for word in words:
        assert word in text
    assert err.exit_code == exit_code


def test_operation_errors() -> None:
    capacity = operation_failed(8, 'There is no more capacity in the zone "us-central2-b"; you can try in another zone', WHERE)
    assert str(capacity).startswith("no TPU capacity in project tpuctl-test, zone us-central2-b")
    assert "--queued" in str(capacity.hint)
    assert "needs tpu.nodes.create" in str(operation_failed(7, "Permission 'tpu.nodes.create' denied", WHERE))
    assert "create node my-tpu failed" in str(operation_failed(13, "boom", WHERE))


@pytest.mark.parametrize(
    ("exc", "kind"),
    [(DENIED, AccessDenied), (QUOTA, QuotaError), (DISABLED, TpuctlError), (_reply(503, '{"error": {"code": 503, "message": "down"}}'), TpuctlError)],
)
def test_a_reply_is_classified_once_into_the_type_callers_test(exc: BaseException, kind: type[TpuctlError]) -> None:
    """Issue 35: a caller tells a permission from a quota by the error's type, never by its words; an API that is
    off is no missing permission (enabling it is the fix), so it stays a plain TpuctlError."""
    assert type(explain(exc, WHERE)) is kind


def test_an_operation_error_is_classified_by_its_code_and_words() -> None:
    """google.rpc.Code 8 (RESOURCE_EXHAUSTED) is capacity where the message says so, else quota; 7 is a permission."""
    kinds = [
        type(operation_failed(8, 'There is no more capacity in the zone "us-central2-b"; you can try in another zone', WHERE)),
        type(operation_failed(8, "Quota 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted", WHERE)),
        type(operation_failed(7, "Permission 'tpu.nodes.create' denied", WHERE)),
        type(operation_failed(13, "boom", WHERE)),
    ]
    assert kinds == [CapacityError, QuotaError, AccessDenied, TpuctlError]
    assert all(issubclass(k, TpuctlError) and k(".").exit_code == 1 for k in kinds[:3])


def test_a_quota_refusal_names_its_quota_and_its_region_when_the_region_is_short() -> None:
    """Issue 45: a hunt leaves out the zone a quota refusal names, or the whole region when the region's quota is the
    one spent; the refusal says which where the reply is read, and never suggests --spot (spot has its own quota)."""
    region = _reply(
        429,
        '{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota limit \'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI\' '
        'has been exceeded. Limit: 0 in region us-central2."}}',
    )
    refusals = [
        explain(QUOTA, WHERE),
        explain(region, WHERE),
        operation_failed(8, "Quota 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' exhausted. Limit 4 in zone us-central2-b [EID: 0x1]", WHERE),
        operation_failed(8, "Quota 'TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. Limit 20800 in region us-central2", WHERE),
        operation_failed(8, "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted.", WHERE),  # no place in the words
        operation_failed(8, "Quota exhausted.", WHERE),
    ]
    assert all(isinstance(r, QuotaError) and "--spot" not in str(r) for r in refusals)
    assert [(r.quota_id, r.region) for r in refusals if isinstance(r, QuotaError)] == [
        ("TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI", None),
        ("TPUV6EPreemptiblePerProjectPerRegionForTPUAPI", "us-central2"),
        ("TPUV5sLitepodServingPerProjectPerZoneForTPUAPI", None),
        ("TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI", "us-central2"),
        ("TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI", "us-central2"),
        (None, None),
    ]


# Operation errors as the TPU API ends a create with them (texts as SkyPilot's GCP failover handler quotes them).
CODE_8 = (
    'There is no more capacity in the zone "us-west4-a"; you can try in another zone where Cloud TPU Nodes are offered '
    "(see https://cloud.google.com/tpu/docs/regions) [EID: 0x1bc8f9d790be9142]"
)
CODE_9 = "Insufficient reserved capacity. Contact customer support to increase your reservation. [EID: 0x2f8bc266e74261a]"
CODE_3 = "Cloud TPU received a bad request. update is not supported while in state PREEMPTED [EID: 0x73013519f5b7feb2]"


@pytest.mark.parametrize(
    ("code", "message", "creating", "repeated", "kind"),
    [
        (8, CODE_8, True, False, Stockout.ZONE),
        (9, CODE_9, True, False, Stockout.RESERVED),
        (3, CODE_3, True, False, Stockout.PREEMPTED),
        (13, "an internal error has occurred", True, True, Stockout.INTERNAL),
        (3, CODE_3, False, False, None),  # not a create: a PREEMPTED node refusing an update is no stockout
        (13, "an internal error has occurred", True, False, None),  # once is a passing fault
        (9, "Node is not in a state to be started.", True, False, None),  # code 9 without capacity
        (3, "Invalid value for field 'node.accelerator_type'", True, False, None),
    ],
)
def test_a_stockout_is_told_apart_by_its_kind(code: int, message: str, creating: bool, repeated: bool, kind: Stockout | None) -> None:
    """Issue 36: each way the TPU API says "no capacity" is a CapacityError carrying its kind; the rest stay what they are."""
    err = operation_failed(code, message, WHERE, creating=creating, repeated=repeated)
    assert (err.kind if isinstance(err, CapacityError) else None) == kind
    assert type(err) is (CapacityError if kind else TpuctlError)


def test_a_create_refused_at_once_for_capacity_is_a_stockout_and_not_retried() -> None:
    body = {"error": {"code": 429, "message": CODE_8, "status": "RESOURCE_EXHAUSTED"}}
    refused = _reply(429, json.dumps(body))
    assert not retry.is_transient(refused)
    err = explain(refused, WHERE)
    assert isinstance(err, CapacityError) and err.kind is Stockout.REFUSED

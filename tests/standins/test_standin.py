"""The Google stand-in, checked with the real client libraries that tpuctl uses.

If these pass, tests built on the stand-in exercise google-cloud-tpu's REST
transport, google-api-core's error mapping and LRO polling, and google-auth's
token flows exactly as production does, only against 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.api_core import exceptions as api
from google.api_core.future import polling
from google.auth import exceptions as auth_exceptions
from google.auth.transport.requests import AuthorizedSession, Request
from google.cloud import tpu_v2
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from tests.standins import catalog
from tests.standins.fixtures import (
    service_account_email,
    standin_env,
    write_access_token_file,
    write_authorized_user,
    write_service_account_key,
)
from tests.standins.google_apis import GoogleStandin

ZONE = "us-central2-b"
FAST = polling.DEFAULT_POLLING.with_delay(initial=0.02, maximum=0.05).with_timeout(10)


@pytest.fixture
def g(google_standin: GoogleStandin) -> GoogleStandin:
    google_standin.create_delay_s = 0.05
    return google_standin


@pytest.fixture
def client(g: GoogleStandin) -> tpu_v2.TpuClient:
    creds = user_credentials.Credentials(g.token)
    return tpu_v2.TpuClient(transport="rest", client_options={"api_endpoint": g.url}, credentials=creds)


@pytest.fixture
def http(g: GoogleStandin) -> Iterator[requests.Session]:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {g.token}"
    yield session
    session.close()


def parent(g: GoogleStandin, zone: str = ZONE) -> str:
    return f"projects/{g.project}/locations/{zone}"


def v4(**extra: Any) -> tpu_v2.Node:
    return tpu_v2.Node(**{"accelerator_type": "v4-8", "runtime_version": "tpu-ubuntu2204-base", **extra})


def create(client: tpu_v2.TpuClient, g: GoogleStandin, name: str, node: tpu_v2.Node | None = None, zone: str = ZONE) -> tpu_v2.Node:
    return client.create_node(parent=parent(g, zone), node_id=name, node=node or v4()).result(polling=FAST)


# --- TPU nodes ---------------------------------------------------------------------------------


def test_node_lifecycle_with_the_real_client(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    node = create(client, g, "train", v4(accelerator_type="v4-32", labels={"team": "ml"}, metadata={"startup-script": "echo hi"}))
    assert node.state == tpu_v2.Node.State.READY and node.health == tpu_v2.Node.Health.HEALTHY
    assert node.name == f"{parent(g)}/nodes/train"
    assert [e.port for e in node.network_endpoints] == [8470] * 4  # v4-32: 16 chips, 4 hosts
    assert node.accelerator_config.type_ == tpu_v2.AcceleratorConfig.Type.V4 and node.accelerator_config.topology == "2x2x4"
    assert node.labels["team"] == "ml" and node.metadata["startup-script"] == "echo hi"
    assert node.service_account.email.endswith("-compute@developer.gserviceaccount.com")

    assert client.get_node(name=node.name).id == node.id
    client.stop_node(request={"name": node.name}).result(polling=FAST)
    stopped = g.node(ZONE, "train")
    assert stopped is not None and stopped["state"] == "STOPPED" and "health" not in stopped
    with pytest.raises(api.BadRequest, match="STOPPED"):  # FAILED_PRECONDITION travels as HTTP 400
        client.stop_node(request={"name": node.name})
    assert client.start_node(request={"name": node.name}).result(polling=FAST).state == tpu_v2.Node.State.READY

    client.delete_node(name=node.name).result(polling=FAST)
    with pytest.raises(api.NotFound):
        client.get_node(name=node.name)
    assert g.node(ZONE, "train") is None


def test_accelerator_config_and_enum_numbers(g: GoogleStandin, client: tpu_v2.TpuClient, http: requests.Session) -> None:
    """The REST transport sends enums as numbers and asks for numbers back; gcloud uses names."""
    config = tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V4, topology="2x2x2")
    node = create(client, g, "cfg", tpu_v2.Node(accelerator_config=config, runtime_version="tpu-ubuntu2204-base"))
    assert node.accelerator_type == "v4-16" and len(node.network_endpoints) == 2
    assert any("enum-encoding%3Dint" in path for _, path, _ in g.requests)
    url = f"{g.url}/v2/{parent(g)}/nodes/cfg"
    assert http.get(url).json()["state"] == "READY"
    numbered = http.get(url, params={"$alt": "json;enum-encoding=int"}).json()
    assert numbered["state"] == 2 and numbered["acceleratorConfig"]["type"] == 7 and numbered["apiVersion"] == 4


def test_list_pages(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    g.add_ready_nodes(ZONE, 25)
    names = [n.name.rsplit("/", 1)[1] for n in client.list_nodes(request={"parent": parent(g), "page_size": 10})]
    assert names == [f"bench-{i:04d}" for i in range(25)]
    assert g.count("GET", f"{parent(g)}/nodes?") == 3
    assert list(client.list_nodes(parent=parent(g, "us-east1-d"))) == []  # empty reply is {}


def test_operation_shape(g: GoogleStandin, client: tpu_v2.TpuClient, http: requests.Session) -> None:
    g.create_delay_s = 3600  # pending until hurried, however slow the machine
    op = client.create_node(parent=parent(g), node_id="shape", node=v4())
    name = op.operation.name
    assert name.startswith(f"{parent(g)}/operations/operation-")
    raw = http.get(f"{g.url}/v2/{name}").json()
    assert raw["done"] is False
    assert raw["metadata"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
    assert raw["metadata"]["verb"] == "create" and raw["metadata"]["target"] == f"{parent(g)}/nodes/shape"
    g.hurry()
    op.result(polling=FAST)
    raw = http.get(f"{g.url}/v2/{name}").json()
    assert raw["done"] is True and raw["response"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.Node"
    delete = client.delete_node(name=f"{parent(g)}/nodes/shape")
    g.hurry()
    delete.result(polling=FAST)
    raw = http.get(f"{g.url}/v2/{delete.operation.name}").json()
    assert raw["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    assert http.get(f"{g.url}/v2/{parent(g)}/operations/operation-nope").status_code == 404


def test_catalog(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    zones = [loc.location_id for loc in client.list_locations({"name": f"projects/{g.project}"}).locations]
    assert zones == g.zones and len(zones) >= 6
    types = {t.type_: t for t in client.list_accelerator_types(parent=parent(g))}
    assert set(types) == {"v4-8", "v4-16", "v4-32", "v4-64"}
    assert types["v4-8"].accelerator_configs[0].topology == "2x2x1"
    assert client.get_accelerator_type(name=f"{parent(g)}/acceleratorTypes/v4-8").type_ == "v4-8"
    with pytest.raises(api.NotFound):
        client.get_accelerator_type(name=f"{parent(g)}/acceleratorTypes/v5p-8")
    versions = {v.version for v in client.list_runtime_versions(parent=parent(g, "us-west4-a"))}
    assert {"tpu-ubuntu2204-base", "v2-alpha-tpuv5-lite"} <= versions and "v2-alpha-tpuv6e" not in versions
    assert client.get_runtime_version(name=f"{parent(g)}/runtimeVersions/tpu-vm-base").version == "tpu-vm-base"
    identity = client.generate_service_identity(request={"parent": parent(g)})
    assert identity.identity.email == f"service-{g.project_number}@cloud-tpu.iam.gserviceaccount.com"
    g.set_zones([f"us-east{i}-a" for i in range(1, 11)])
    assert len(list(client.list_locations({"name": f"projects/{g.project}"}).locations)) == 10
    assert "v4-8" in {t.type_ for t in client.list_accelerator_types(parent=parent(g, "us-east7-a"))}


@pytest.mark.parametrize(
    "accelerator,hosts",
    [("v2-8", 1), ("v3-8", 1), ("v3-32", 4), ("v4-8", 1), ("v4-16", 2), ("v4-32", 4), ("v5p-8", 1), ("v5litepod-4", 1),
     ("v5litepod-8", 1), ("v5litepod-16", 4), ("v5litepod-32", 8), ("v6e-8", 1), ("v6e-16", 4)],
)  # fmt: skip
def test_hosts_per_accelerator(accelerator: str, hosts: int) -> None:
    assert catalog.hosts(accelerator) == hosts


def test_validation(g: GoogleStandin, client: tpu_v2.TpuClient, http: requests.Session) -> None:
    cases: list[tuple[str, str, tpu_v2.Node]] = [
        (ZONE, "Bad_Name", v4()),
        ("us-central1-f", "wrong-type", v4()),
        (ZONE, "wrong-version", v4(runtime_version="tpu-vm-tf-1.0")),
        (ZONE, "bad-label", v4(labels={"Team": "x"})),
        (ZONE, "no-type", tpu_v2.Node(runtime_version="tpu-ubuntu2204-base")),
    ]
    for zone, name, node in cases:
        with pytest.raises(api.BadRequest):
            client.create_node(parent=parent(g, zone), node_id=name, node=node)
    with pytest.raises(api.NotFound):  # unknown zone: 404 on the location
        client.create_node(parent=parent(g, "mars-north1-a"), node_id="x", node=v4())
    reply = http.post(
        f"{g.url}/v2/{parent(g)}/nodes",
        params={"nodeId": "typo"},
        json={"acceleratorType": "v4-8", "runtime_version": "tpu-vm-base", "lables": {}},
    )
    assert reply.status_code == 400 and 'Unknown name "lables"' in reply.json()["error"]["message"]
    assert g.nodes(ZONE) == []


def test_error_mapping(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    """Over REST, google-api-core maps by HTTP status: Conflict/Forbidden/TooManyRequests, not the gRPC names."""
    create(client, g, "twice")
    with pytest.raises(api.Conflict) as conflict:
        client.create_node(parent=parent(g), node_id="twice", node=v4())
    assert "already exists" in conflict.value.message
    g.faults.denied_permissions.add("tpu.nodes.create")
    with pytest.raises(api.Forbidden) as denied:
        client.create_node(parent=parent(g), node_id="denied", node=v4())
    assert denied.value.reason == "IAM_PERMISSION_DENIED" and denied.value.metadata["permission"] == "tpu.nodes.create"
    assert f"'{parent(g)}/nodes/denied'" in denied.value.message
    g.faults.denied_permissions.clear()
    g.faults.disabled_apis.add("tpu.googleapis.com")
    with pytest.raises(api.Forbidden) as disabled:
        client.list_nodes(parent=parent(g))
    assert disabled.value.reason == "SERVICE_DISABLED"
    assert f"Cloud TPU API has not been used in project {g.project_number} before" in disabled.value.message
    g.faults.disabled_apis.clear()
    # A 401 makes google-auth's AuthorizedSession try to refresh; a bare token cannot, so RefreshError, not Unauthorized.
    other = tpu_v2.TpuClient(
        transport="rest", client_options={"api_endpoint": g.url}, credentials=user_credentials.Credentials("ya29.wrong")
    )
    with pytest.raises(auth_exceptions.RefreshError):
        other.list_nodes(parent=parent(g))
    assert g.requests[-1][2] == 401
    with pytest.raises(api.Forbidden, match="Permission denied on resource project someone-else"):
        client.list_nodes(parent="projects/someone-else/locations/us-central2-b")


# --- faults ------------------------------------------------------------------------------------


def test_capacity_quota_and_failed_operations(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    g.faults.capacity_zones.add(ZONE)
    with pytest.raises(api.ResourceExhausted, match=f'There is no more capacity in the zone "{ZONE}"; .*\\[EID: 0x'):
        create(client, g, "stockout")
    assert g.node(ZONE, "stockout") is None
    g.faults.capacity_zones.clear()

    g.faults.quota_zones.add(ZONE)
    with pytest.raises(api.TooManyRequests) as quota:
        client.create_node(parent=parent(g), node_id="quota", node=v4())
    assert f"Quota limit 'TPUV4sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone {ZONE}." in quota.value.message
    assert quota.value.details[0]["@type"] == "type.googleapis.com/google.rpc.QuotaFailure"
    g.faults.quota_zones = {"us-central2"}  # the region's quota spent: every zone of it refused, naming the region's quota
    with pytest.raises(api.TooManyRequests) as quota:
        client.create_node(parent=parent(g), node_id="quota", node=v4())
    assert "Quota limit 'TPUV4sPodPerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-central2." in quota.value.message
    g.faults.quota_zones.clear()

    g.faults.fail_next_operations(1, "backend exploded")
    with pytest.raises(api.InternalServerError, match="backend exploded"):
        create(client, g, "unlucky")
    assert g.node(ZONE, "unlucky") is None
    assert create(client, g, "lucky").state == tpu_v2.Node.State.READY


def test_quota_infos_are_served_per_zone_and_region_with_a_default_as_cloud_quotas_serves_them(g: GoogleStandin, http: requests.Session) -> None:
    """DimensionsInfo (docs/quotas/reference/rest/v1/DimensionsInfo): own entries carry their zone or region, the default
    none, listing where it applies; a zero leaves `value` out (proto3 JSON)."""
    g.projects.tpu_quotas = {
        "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI": {"us-east1-d": 16},
        "TPUV6EPreemptiblePerProjectPerRegionForTPUAPI": {"us-east1": 0},
    }
    g.projects.tpu_quota_defaults = {"TPUV6EPreemptiblePerProjectPerRegionForTPUAPI": 32}
    url = f"{g.url}/v1/projects/{g.project}/locations/global/services/tpu.googleapis.com/quotaInfos"
    infos = {i["quotaId"]: i for i in http.get(url).json()["quotaInfos"]}
    region = infos["TPUV6EPreemptiblePerProjectPerRegionForTPUAPI"]
    assert region["dimensions"] == ["region"]
    assert region["dimensionsInfos"][0] == {"dimensions": {"region": "us-east1"}, "details": {}, "applicableLocations": ["us-east1"]}
    default = region["dimensionsInfos"][1]
    assert "dimensions" not in default and default["details"] == {"value": "32"} and "europe-west4" in default["applicableLocations"]
    assert infos["TPUV6EPreemptiblePerProjectPerZoneForTPUAPI"]["dimensionsInfos"][0]["dimensions"] == {"zone": "us-east1-d"}


def test_transient_faults_cycle_and_can_land_after_the_effect(g: GoogleStandin, http: requests.Session) -> None:
    url = f"{g.url}/v2/{parent(g)}/nodes"
    body = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}
    first_statuses, retry_statuses = [], []
    for i in range(8):
        g.faults.transient_rate = 1.0
        reply = http.post(url, params={"nodeId": f"n{i}"}, json=body)
        first_statuses.append(reply.status_code)
        if reply.status_code == 429:
            assert reply.json()["error"]["details"][0]["reason"] == "RATE_LIMIT_EXCEEDED"
        g.faults.transient_rate = 0.0
        retry_statuses.append(http.post(url, params={"nodeId": f"n{i}"}, json=body).status_code)
    assert first_statuses[:3] == [503, 429, 500]
    assert {200, 409} == set(retry_statuses)  # 409: the lost reply had created the node
    assert len(g.nodes(ZONE)) == 8  # never twice
    g.faults.burst(2, status=503)
    assert [http.get(url).status_code for _ in range(3)] == [503, 503, 200]


def test_transient_faults_are_seeded() -> None:
    def run() -> list[int]:
        with GoogleStandin(seed=7) as g:
            g.faults.transient_rate = 0.3
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {g.token}"
            return [session.get(f"{g.url}/v2/{parent(g)}/nodes").status_code for _ in range(20)]

    first = run()
    assert first == run() and 200 in first and len(set(first)) > 1


def test_latency_preemption_and_request_log(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    create(client, g, "spot", v4(scheduling_config=tpu_v2.SchedulingConfig(spot=True)))
    g.preempt(ZONE, "spot")
    node = client.get_node(name=f"{parent(g)}/nodes/spot")
    assert node.state == tpu_v2.Node.State.PREEMPTED and node.health == tpu_v2.Node.Health.HEALTH_UNSPECIFIED
    g.vanish(ZONE, "spot")
    with pytest.raises(api.NotFound):
        client.get_node(name=f"{parent(g)}/nodes/spot")
    g.faults.latency_s = 0.05
    started = time.monotonic()
    client.list_nodes(parent=parent(g))
    assert time.monotonic() - started >= 0.05
    assert g.requests[0][0] == "POST" and g.requests[-1][2] == 200
    assert g.count("GET", "/nodes/spot") == 2


# --- queued resources --------------------------------------------------------------------------


def wait_for(check: Any, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_queued_resources(g: GoogleStandin, client: tpu_v2.TpuClient) -> None:
    qr = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[{"parent": parent(g), "node_id": "qnode", "node": v4()}]),
        spot=tpu_v2.QueuedResource.Spot(),
        queueing_policy={"valid_until_duration": {"seconds": 600}},
    )
    created = client.create_queued_resource(parent=parent(g), queued_resource_id="q1", queued_resource=qr).result(polling=FAST)
    assert created.state.state == tpu_v2.QueuedResourceState.State.WAITING_FOR_RESOURCES
    name = f"{parent(g)}/queuedResources/q1"
    states = set()

    def active() -> bool:
        state = client.get_queued_resource(name=name).state.state
        states.add(state.name)
        return state == tpu_v2.QueuedResourceState.State.ACTIVE

    wait_for(active)
    assert "PROVISIONING" in states or "WAITING_FOR_RESOURCES" in states
    node = client.get_node(name=f"{parent(g)}/nodes/qnode")
    assert node.state == tpu_v2.Node.State.READY and node.queued_resource == name and node.scheduling_config.spot
    assert [q.name for q in client.list_queued_resources(parent=parent(g))] == [name]
    with pytest.raises(api.BadRequest, match="delete them first"):
        client.delete_queued_resource(name=name)
    client.delete_queued_resource(request={"name": name, "force": True}).result(polling=FAST)
    assert g.queued_resource(ZONE, "q1") is None and g.node(ZONE, "qnode") is None

    g.faults.capacity_zones.add(ZONE)
    qr.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(valid_until_duration={"nanos": 200_000_000})
    qr.tpu.node_spec[0].node_id = "never"
    client.create_queued_resource(parent=parent(g), queued_resource_id="q2", queued_resource=qr).result(polling=FAST)
    failed = wait_for(lambda: (s := client.get_queued_resource(name=f"{parent(g)}/queuedResources/q2").state).state == s.State.FAILED and s)
    assert "no more capacity" in failed.failed_data.error.message and g.node(ZONE, "never") is None


# --- credentials -------------------------------------------------------------------------------


def test_service_account_key_and_authorized_user(g: GoogleStandin, tmp_path: Path) -> None:
    key = write_service_account_key(g, tmp_path / "sa.json")
    sa = service_account.Credentials.from_service_account_file(str(key), scopes=["https://www.googleapis.com/auth/cloud-platform"])
    sa.refresh(Request())
    assert sa.token == g.token and sa.service_account_email == service_account_email(g)
    assert g.count("POST", "/token") == 1

    # Through the TPU client the same key signs its own JWT (no /token call) and the stand-in accepts it.
    client = tpu_v2.TpuClient(transport="rest", client_options={"api_endpoint": g.url}, credentials=sa)
    assert list(client.list_nodes(parent=parent(g))) == []
    assert g.count("POST", "/token") == 1

    user = user_credentials.Credentials.from_authorized_user_file(str(write_authorized_user(g, tmp_path / "adc.json")))
    assert user.token_uri == "https://oauth2.googleapis.com/token"  # the file's token_uri would be ignored
    user = user.with_token_uri(g.url + "/token")
    user.refresh(Request())
    assert user.token == g.token

    revoked = user_credentials.Credentials(
        None, refresh_token="1//other", client_id=g.client_id, client_secret=g.client_secret, token_uri=g.url + "/token"
    )
    with pytest.raises(auth_exceptions.RefreshError, match="invalid_grant"):
        revoked.refresh(Request())

    env = standin_env(g, tmp_path)
    assert Path(env["TPUCTL_ACCESS_TOKEN_FILE"]).read_text().strip() == g.token
    assert write_access_token_file(g, tmp_path / "t").read_text().strip() == g.token


# --- Resource Manager, ml, serviceusage --------------------------------------------------------


def test_iam_policy_read_modify_write(g: GoogleStandin) -> None:
    session = AuthorizedSession(user_credentials.Credentials(g.token))
    url = f"{g.url}/v1/projects/{g.project}"
    policy = session.post(f"{url}:getIamPolicy", json={"options": {"requestedPolicyVersion": 3}}).json()
    assert {b["role"] for b in policy["bindings"]} == {"roles/editor", "roles/owner"} and policy["etag"]
    agent = f"serviceAccount:service-{g.project_number}@cloud-tpu.iam.gserviceaccount.com"
    policy["bindings"].append({"role": "roles/storage.objectViewer", "members": [agent]})

    g.set_iam_policy_externally(g.iam_policy())  # another admin wrote in between
    stale = session.post(f"{url}:setIamPolicy", json={"policy": policy})
    assert stale.status_code == 409 and stale.json()["error"]["status"] == "ABORTED"
    assert "concurrent policy changes" in stale.json()["error"]["message"]

    fresh = session.post(f"{url}:getIamPolicy", json={}).json()
    fresh["bindings"].append({"role": "roles/storage.objectViewer", "members": [agent]})
    written = session.post(f"{url}:setIamPolicy", json={"policy": fresh, "updateMask": "bindings,etag"}).json()
    assert written["etag"] != fresh["etag"] and agent in g.iam_policy()["bindings"][-1]["members"]

    conditional = {
        "role": "roles/viewer",
        "members": [agent],
        "condition": {"title": "t", "expression": "request.time < timestamp('2030-01-01T00:00:00Z')"},
    }
    no_version = {"bindings": [*written["bindings"], conditional], "etag": written["etag"]}
    assert session.post(f"{url}:setIamPolicy", json={"policy": no_version}).status_code == 400
    versioned = session.post(f"{url}:setIamPolicy", json={"policy": {**no_version, "version": 3}}).json()
    assert versioned["version"] == 3
    v1 = session.post(f"{url}:getIamPolicy", json={}).json()
    assert any("_withcond_" in b["role"] for b in v1["bindings"]) and v1["version"] == 1
    blind = session.post(
        f"{url}:setIamPolicy", json={"policy": {"bindings": [{"role": "roles/owner", "members": ["user:dev@example.com"]}]}}
    )
    assert blind.status_code == 200 and g.iam_policy()["bindings"] == [{"role": "roles/owner", "members": ["user:dev@example.com"]}]
    assert session.get(url).json()["projectNumber"] == str(g.project_number)


def test_ml_config_and_service_identity(g: GoogleStandin) -> None:
    session = AuthorizedSession(user_credentials.Credentials(g.token))
    config = session.get(f"{g.url}/v1/projects/{g.project}:getConfig").json()
    n = g.project_number
    assert config == {
        "serviceAccount": f"service-{n}@cloud-ml.google.com.iam.gserviceaccount.com",
        "serviceAccountProject": str(n),
        "config": {"tpuServiceAccount": f"service-{n}@cloud-tpu.iam.gserviceaccount.com"},
    }
    op = session.post(f"{g.url}/v1beta1/projects/{g.project}/services/tpu.googleapis.com:generateServiceIdentity", json={}).json()
    assert op["done"] is True and op["response"]["email"] == f"service-{n}@cloud-tpu.iam.gserviceaccount.com"
    assert op["response"]["@type"] == "type.googleapis.com/google.api.serviceusage.v1beta1.ServiceIdentity"
    g.faults.disabled_apis.add("ml.googleapis.com")
    denied = session.get(f"{g.url}/v1/projects/{g.project}:getConfig")
    assert denied.status_code == 403 and json.loads(denied.text)["error"]["details"][0]["reason"] == "SERVICE_DISABLED"
    assert session.get(f"{g.url}/v1/projects/{g.project}/services/ml.googleapis.com").json()["state"] == "DISABLED"
    assert session.post(f"{g.url}/v1/projects/{g.project}/services/ml.googleapis.com:enable", json={}).json()["done"] is True
    assert session.get(f"{g.url}/v1/projects/{g.project}:getConfig").status_code == 200
    assert requests.get(f"{g.url}/v1/projects/{g.project}:getConfig").status_code == 401


def test_flex_start_is_v2alpha1_only_and_bounded_to_seven_days(g: GoogleStandin, http: requests.Session) -> None:
    node = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}
    body = {"tpu": {"nodeSpec": [{"parent": parent(g), "nodeId": "flex", "node": node}]}, "provisioningModel": "FLEX_START"}
    url = f"/{parent(g)}/queuedResources"
    v2 = http.post(f"{g.url}/v2{url}", params={"queuedResourceId": "flex"}, json={**body, "runDuration": {"maxRunDuration": "3600s"}})
    assert v2.status_code == 400 and 'Unknown name "provisioningModel"' in v2.json()["error"]["message"]
    for run in ({}, {"runDuration": {"maxRunDuration": "604801s"}}):
        refused = http.post(f"{g.url}/v2alpha1{url}", params={"queuedResourceId": "flex"}, json={**body, **run})
        assert refused.status_code == 400 and "max_run_duration" in refused.json()["error"]["message"]
    week = {**body, "runDuration": {"maxRunDuration": "604800s"}}
    g.faults.quota_zones.add(ZONE)  # flex-start draws on preemptible quota
    over = http.post(f"{g.url}/v2alpha1{url}", params={"queuedResourceId": "flex"}, json=week)
    assert over.status_code == 429 and "TPUV4sPreemptiblePodPerProjectPerZone" in over.json()["error"]["message"], over.text
    g.faults.quota_zones.clear()
    made = http.post(f"{g.url}/v2alpha1{url}", params={"queuedResourceId": "flex"}, json=week)
    assert made.status_code == 200, made.text
    alpha, v2_view = (http.get(f"{g.url}/{version}{url}/flex").json() for version in ("v2alpha1", "v2"))
    assert alpha["provisioningModel"] == "FLEX_START" and "provisioningModel" not in v2_view and "runDuration" not in v2_view

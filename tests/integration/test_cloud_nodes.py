"""The TPU VM lifecycle through the real CLI, the real google-cloud-tpu client and the TPU stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl, tpuctl_cmd
from tests.standins.cloud_cli import ZONE, Cli, error_line
from tests.standins.google_apis import GoogleStandin

NODE_FIELDS = {"name", "acceleratorType", "state", "health", "runtimeVersion", "networkEndpoints", "schedulingConfig", "zone"}


@pytest.fixture
def cli(google_standin: GoogleStandin, tmp_path: Path) -> Cli:
    return Cli(google_standin, tmp_path, zone=ZONE)


def creates(g: GoogleStandin, name: str) -> int:
    """Create operations the service accepted for this node: the true count of creations."""
    return sum(1 for op in g.tpu.operations.values() if op["metadata"]["verb"] == "create" and op["metadata"]["target"].endswith(f"/nodes/{name}"))


def test_round_trip_and_every_rerun_is_a_no_op(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    first = cli("create", "my-tpu", "--accelerator-type", "v4-8", "--labels", "team=ml")
    assert first.stdout.startswith("created my-tpu (v4-8, tpu-vm-tf-2.16.1-pjrt) in us-central2-b: READY, 1 host: 10.")
    assert "CREATING" in first.stderr  # the progress line, on stderr
    again = cli("create", "my-tpu", "--accelerator-type", "v4-8", "--labels", "team=ml")
    assert again.stdout.startswith("reused existing my-tpu")
    assert creates(g, "my-tpu") == 1

    different = cli("create", "my-tpu", "--accelerator-type", "v4-16", code=1)
    assert different.stderr.count("\n") == 1
    assert "accelerator type: 'v4-8' != 'v4-16'" in different.stderr

    listed = json.loads(cli("list", "--json").stdout)
    assert [n["name"] for n in listed] == [f"projects/{g.project}/locations/{ZONE}/nodes/my-tpu"]
    assert set(listed[0]) >= NODE_FIELDS and listed[0]["state"] == "READY" and listed[0]["health"] == "HEALTHY"
    assert listed[0]["zone"] == ZONE and listed[0]["labels"] == {"team": "ml"}
    plain = cli("list").stdout.splitlines()
    assert plain[0].split() == ["NAME", "ZONE", "ACCELERATOR", "STATE", "HEALTH", "RUNTIME", "CAPACITY", "AGE", "PRICE/H"]
    assert plain[1].split()[:5] == ["my-tpu", ZONE, "v4-8", "READY", "HEALTHY"]

    described = cli("describe", "my-tpu").stdout
    ip = listed[0]["networkEndpoints"][0]["ipAddress"]
    for line in ("state            READY", "health           HEALTHY", "topology         V4 2x2x1", f"  worker 0       {ip}"):
        assert line in described

    assert cli("stop-vm", "my-tpu").stdout == "my-tpu is STOPPED\n"
    assert "already STOPPED" in cli("stop-vm", "my-tpu").stdout
    assert cli("start", "my-tpu").stdout == "my-tpu is READY\n"
    assert "already READY" in cli("start", "my-tpu").stdout

    assert cli("delete", "my-tpu", "--yes").stdout == f"deleted node my-tpu (READY) in {ZONE}\n"
    assert "nothing to delete" in cli("delete", "my-tpu", "--yes").stdout
    assert g.nodes(ZONE) == []
    no_confirm = cli("delete", "other", code=0)  # nothing to delete needs no confirmation
    assert "nothing to delete" in no_confirm.stdout
    assert all(g.token not in text for text in cli.outputs)


def test_stop_is_for_runs_and_stops_a_tpu_vm_the_old_way_with_a_notice(google_standin: GoogleStandin, cli: Cli) -> None:
    """Issue 35: `tpuctl stop NAME` asks the run records first; a NAME that is no run but a TPU VM is still stopped,
    with one line on stderr naming `stop-vm`; a NAME that is neither is no such run, exit 2."""
    g = google_standin
    cli("create", "my-tpu", "--accelerator-type", "v4-8")
    old = cli("stop", "my-tpu")
    assert old.stdout == "my-tpu is STOPPED\n"
    notice = "tpuctl: `tpuctl stop NAME` for a TPU VM is deprecated; use `tpuctl stop-vm my-tpu`"
    assert [line for line in old.stderr.splitlines() if "stop-vm" in line] == [notice]
    assert [n["state"] for n in g.nodes(ZONE)] == ["STOPPED"]
    assert "already STOPPED" in cli("stop", "my-tpu").stdout
    cli("start", "my-tpu")
    new = cli("stop-vm", "my-tpu")
    assert new.stdout == "my-tpu is STOPPED\n" and "deprecated" not in new.stderr
    for unknown in ("no-such-tpu", "20260101-000000-train-zz"):
        neither = cli("stop", unknown, code=2)
        assert error_line(neither).startswith(f"Error: no such run: '{unknown}'"), neither.stderr
    assert [n["state"] for n in g.nodes(ZONE)] == ["STOPPED"]
    assert all(g.token not in text for text in cli.outputs)


def test_thirty_percent_transient_failures(google_standin: GoogleStandin, cli: Cli) -> None:
    """Every step still succeeds; lost create replies never make a second node."""
    g = google_standin
    g.faults.transient_rate = 0.3
    for name in ("flaky-a", "flaky-b", "flaky-c"):
        cli("create", name, "--accelerator-type", "v4-8", "--spot")
        cli("create", name, "--accelerator-type", "v4-8", "--spot")
    assert sorted(n["name"].rsplit("/", 1)[1] for n in json.loads(cli("list", "--json").stdout)) == ["flaky-a", "flaky-b", "flaky-c"]
    cli("stop-vm", "flaky-a")
    cli("start", "flaky-a")
    cli("describe", "flaky-b")
    cli("delete", "flaky-c", "--yes")
    assert {name: creates(g, name) for name in ("flaky-a", "flaky-b", "flaky-c")} == {"flaky-a": 1, "flaky-b": 1, "flaky-c": 1}
    failed = [status for _, _, status in g.requests if status >= 500 or status == 429]
    assert len(failed) >= 5, "the fault rate did not apply"
    assert all(g.token not in text for text in cli.outputs)


def test_queued_spot_request(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    done = cli(
        "create", "queued", "--zone", "us-west4-a", "--type", "v5litepod", "--topology", "2x4",
        "--runtime-version", "v2-alpha-tpuv5-lite", "--queued", "--spot", "--valid-until", "6h",
    )
    assert "queued: WAITING_FOR_RESOURCES" in done.stderr and done.stdout.startswith("created queued (V5LITE_POD 2x4")
    resource = g.queued_resource("us-west4-a", "queued")
    assert resource is not None and "spot" in resource and resource["queueingPolicy"]["validUntilDuration"] == "21600s"
    assert json.loads(cli("describe", "queued", "--zone", "us-west4-a", "--json").stdout)["queuedResource"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("create", "x", "--zone", "nowhere-zone1-a"), "zone nowhere-zone1-a has no Cloud TPUs"),
        (("create", "x", "--accelerator-type", "v4"), "accelerator-type 'v4' from --accelerator-type is not valid"),
        (("create", "x", "--accelerator-type", "v9-8", "--runtime-version", "tpu-vm-base"), 'Accelerator type "v9-8" is not available'),
        (("create", "x", "--accelerator-type", "v9-8"), "tpuctl knows no TensorFlow runtime image for v9-8 (name one with --runtime-version"),
        (("create", "x", "--type", "v4", "--topology", "2x4"), "'2x4' is not a V4 topology"),
        (("create", "x", "--labels", "Team=ML"), "label 'Team=ML'"),
        (("create", "X_bad"), "not a valid TPU node name"),
        (("create", "x", "--type", "v5litepod"), "go together"),
        (("create", "x", "--spot", "--preemptible"), "exclude each other"),
        (("create", "x", "--valid-until", "6h"), "needs --queued"),
        (("list", "--zone", "us-central1"), "zone 'us-central1' from --zone is not valid"),
        (("list", "--zone", ZONE, "--all-zones"), "give one of --zone, --zones and --all-zones"),
        (("describe", "x", "--project", "Not_A_Project"), "project 'Not_A_Project'"),
        (("delete", "x", "--zone", "nowhere-zone1-a", "--yes"), "zone nowhere-zone1-a has no Cloud TPUs"),
        (("list", "--zone", "nowhere-zone1-a"), "zone nowhere-zone1-a has no Cloud TPUs"),
        (("describe", "x", "--zone", "nowhere-zone1-a"), "zone nowhere-zone1-a has no Cloud TPUs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, args: tuple[str, ...], words: str) -> None:
    result = cli(*args, code=2)
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert words in result.stderr


def test_permanent_failures_name_what_to_do(google_standin: GoogleStandin, cli: Cli) -> None:
    g = google_standin
    g.faults.capacity_zones.add(ZONE)
    capacity = cli("create", "big", "--accelerator-type", "v4-32", code=1)
    assert "us-central2-b: no capacity for v4-32 (code 8); nothing was left behind" in capacity.stderr and "--spot" in capacity.stderr
    assert g.node(ZONE, "big") is None
    g.faults.capacity_zones.clear()
    g.faults.quota_zones.add(ZONE)
    quota = cli("create", "big", "--accelerator-type", "v4-32", code=1)
    assert "quota exceeded in project tpuctl-test, zone us-central2-b" in quota.stderr
    assert g.count("POST", "nodeId=big") == 2, "a quota error must not be retried"
    g.faults.quota_zones.clear()
    g.faults.denied_permissions.add("tpu.nodes.list")
    denied = cli("list", code=1)
    assert "permission denied: list nodes needs tpu.nodes.list in project tpuctl-test, zone us-central2-b" in denied.stderr
    g.faults.disabled_apis.add("tpu.googleapis.com")
    disabled = cli("list", code=1)
    assert "tpu.googleapis.com API is not enabled" in disabled.stderr and "gcloud services enable" in disabled.stderr
    for result in (capacity, quota, denied, disabled):
        error_line(result)
    assert all(g.token not in text for text in cli.outputs)


def test_missing_credentials_say_how_to_log_in(cli: Cli) -> None:
    env = {k: v for k, v in cli.env.items() if k != "TPUCTL_ACCESS_TOKEN_FILE"}
    result = run_tpuctl("list", env=env, cwd=cli.cwd)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "gcloud auth application-default login" in result.stderr


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for(check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_babysit_recreates_a_preempted_then_deleted_node_and_reruns_the_command(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    g = google_standin
    cli("create", "spot-tpu", "--accelerator-type", "v4-8", "--spot")
    runs = tmp_path / "runs.txt"
    # The command records each run; the third run finishes, as a resumed training would.
    job = f"echo run >> {runs}; test $(wc -l < {runs}) -ge 3 || sleep 60"
    sitter = subprocess.Popen(
        [*tpuctl_cmd("babysit", "spot-tpu", "--interval", "0.2", "--", "sh", "-c", job)],
        env=cli.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(lambda: _lines(runs) == 1)
        g.preempt(ZONE, "spot-tpu")
        _wait_for(lambda: _lines(runs) == 2)
        node = g.node(ZONE, "spot-tpu")
        assert node is not None and node["state"] == "READY" and node["schedulingConfig"]["spot"]
        g.vanish(ZONE, "spot-tpu")
        out, err = sitter.communicate(timeout=60)
    finally:
        sitter.kill()
    assert sitter.returncode == 0, err
    assert _lines(runs) == 3
    assert "spot-tpu is PREEMPTED; stopping the command" in err and "spot-tpu is gone; recreating it (2/10)" in err
    assert creates(g, "spot-tpu") == 3
    assert g.token not in out + err


def test_babysit_s_max_recreates_is_its_budget_and_the_end_names_it(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """--max-recreates 1: the first loss is recreated, the second ends babysitting in one line naming the flag."""
    g = google_standin
    cli("create", "spot-tpu", "--accelerator-type", "v4-8", "--spot")
    g.preempt(ZONE, "spot-tpu")
    runs = tmp_path / "runs.txt"
    sitter = subprocess.Popen([*tpuctl_cmd("babysit", "spot-tpu", "--interval", "0.2", "--max-recreates", "1", "--", "sh", "-c", f"echo run >> {runs}; sleep 60")],
                              env=cli.env, cwd=cli.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for(lambda: _lines(runs) == 1)  # the command runs: the node is READY again after its first recreation
        g.preempt(ZONE, "spot-tpu")
        _, err = sitter.communicate(timeout=60)
    finally:
        sitter.kill()
    assert sitter.returncode == 1, err
    assert "babysit: spot-tpu is PREEMPTED; recreating it (1/1)" in err
    assert err.splitlines()[-1] == "Error: spot-tpu is PREEMPTED after 1 recreations: --max-recreates 1 is spent; giving up", err
    assert creates(g, "spot-tpu") == 2 and "Traceback" not in err


def test_recreate_and_babysit_need_a_saved_spec(google_standin: GoogleStandin, cli: Cli) -> None:
    google_standin.add_ready_nodes(ZONE, 1, prefix="foreign")
    for command in ("recreate", "babysit"):
        result = cli(command, "foreign-0", code=1)
        assert "no saved spec for foreign-0" in result.stderr and result.stderr.count("\n") == 1


def test_read_only_views_import_no_google_client(cli: Cli) -> None:
    """`list` must stay a fraction of gcloud's time (benchmarks/list_nodes.py): google-cloud-tpu alone costs 0.3 s."""
    for args in (("list",), ("create", "--help")):
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "tpuctl", *args], capture_output=True, text=True, env=cli.env, cwd=cli.cwd)
        assert result.returncode == 0, result.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
        assert not {name for name in imported if name.startswith(("google.cloud", "google.auth", "google.oauth2", "requests"))}


def test_key_file_and_adc_user_credentials(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """A service-account key (--credentials) and a user's ADC file (GOOGLE_APPLICATION_CREDENTIALS, token via TPUCTL_TOKEN_URI)."""
    from tests.standins.fixtures import write_authorized_user, write_service_account_key

    g = google_standin
    g.add_ready_nodes(ZONE, 2)
    env = {k: v for k, v in cli.env.items() if k != "TPUCTL_ACCESS_TOKEN_FILE"}
    key = write_service_account_key(g, tmp_path / "key.json")
    with_key = run_tpuctl("list", "--credentials", str(key), "--json", env=env, cwd=tmp_path)
    assert with_key.returncode == 0, with_key.stderr
    assert len(json.loads(with_key.stdout)) == 2
    user = write_authorized_user(g, tmp_path / "adc.json")
    with_adc = run_tpuctl("describe", "bench-0000", env={**env, "GOOGLE_APPLICATION_CREDENTIALS": str(user)}, cwd=tmp_path)
    assert with_adc.returncode == 0, with_adc.stderr
    assert g.count("POST", "/token") >= 1, "the user's refresh token must be exchanged at the overridden token URI"
    secrets = [g.token, g.refresh_token, g.client_secret, *key.read_text().split("\\n")[1:4]]
    for text in (with_key.stdout, with_key.stderr, with_adc.stdout, with_adc.stderr):
        assert not any(secret in text for secret in secrets)
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nSECRETSTUFF')
    refused = run_tpuctl("list", "--credentials", str(broken), env=env, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "SECRETSTUFF" not in refused.stderr


def test_full_spec_is_sent_saved_and_recreated(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    g = google_standin
    script = tmp_path / "boot.sh"
    script.write_text("#!/bin/sh\necho booted > /tmp/booted\n")
    spec = ("--network", "my-net", "--subnetwork", "my-subnet", "--service-account", f"runner@{g.project}.iam.gserviceaccount.com",
            "--startup-script", str(script), "--preemptible", "--labels", "team=ml")
    cli("create", "full", *spec)
    node = g.node(ZONE, "full")
    assert node is not None
    assert node["networkConfig"]["network"].endswith("my-net") and node["networkConfig"]["subnetwork"].endswith("my-subnet")
    assert node["serviceAccount"]["email"] == f"runner@{g.project}.iam.gserviceaccount.com"
    assert node["metadata"]["startup-script"] == script.read_text()
    assert node["schedulingConfig"]["preemptible"] is True
    saved = json.loads((Path(cli.env["XDG_DATA_HOME"]) / "tpuctl" / "nodes" / g.project / ZONE / "full.json").read_text())
    assert saved["startup_script"] == script.read_text() and saved["preemptible"] is True

    script.write_text("#!/bin/sh\necho changed\n")
    changed = cli("create", "full", *spec, code=1)
    assert "startup script: '(differs)' != '(same)'" in changed.stderr

    kept = cli("recreate", "full")
    assert kept.stdout.startswith("reused existing full") and creates(g, "full") == 1
    g.vanish(ZONE, "full")
    script.unlink()  # the saved spec carries the script's text
    again = cli("recreate", "full")
    assert again.stdout.startswith("created full") and creates(g, "full") == 2
    node = g.node(ZONE, "full")
    assert node is not None and node["metadata"]["startup-script"] == "#!/bin/sh\necho booted > /tmp/booted\n"


# The zone offering each generation in the stand-in's catalogue, as in Google's.
GENERATION_ZONES = {"v2": "us-central1-b", "v3": "us-central1-a", "v4": ZONE, "v5litepod": "us-west4-a", "v5p": "us-east5-a", "v6e": "us-east1-d"}


@pytest.mark.parametrize(
    ("accelerator_type", "image"),
    [
        ("v2-8", "tpu-vm-tf-2.16.1-pjrt"), ("v2-32", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v3-8", "tpu-vm-tf-2.16.1-pjrt"), ("v3-32", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v4-8", "tpu-vm-tf-2.16.1-pjrt"), ("v4-32", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v5litepod-8", "tpu-vm-tf-2.16.1-pjrt"), ("v5litepod-16", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v5p-8", "tpu-vm-tf-2.16.1-pjrt"), ("v5p-16", "tpu-vm-tf-2.16.1-pod-pjrt"),
        ("v6e-8", "v2-alpha-tpuv6e"), ("v6e-16", "v2-alpha-tpuv6e"),
    ],
)  # fmt: skip
def test_a_new_node_gets_tensorflows_image_for_its_type(google_standin: GoogleStandin, cli: Cli, accelerator_type: str, image: str) -> None:
    """The base image has no TensorFlow: a default create must be one a TensorFlow script can launch on."""
    zone = GENERATION_ZONES[accelerator_type.rsplit("-", 1)[0]]
    done = cli("create", "tf", "--zone", zone, "--accelerator-type", accelerator_type, "--async")
    assert done.stdout.startswith(f"creating tf ({accelerator_type}, {image}) in {zone}")
    node = google_standin.node(zone, "tf")
    assert node is not None and node["runtimeVersion"] == image


def test_a_queued_slice_gets_the_image_of_its_topology(google_standin: GoogleStandin, cli: Cli) -> None:
    """--type/--topology name the slice, not the accelerator-type setting (v4-8 here) the default was resolved for."""
    cli("create", "one", "--zone", "us-west4-a", "--type", "v5litepod", "--topology", "2x4", "--queued", "--async")
    cli("create", "pod", "--zone", "us-west4-a", "--type", "v5e", "--topology", "4x4", "--queued", "--async")
    sent = {name: google_standin.queued_resource("us-west4-a", name) for name in ("one", "pod")}
    assert {name: r["tpu"]["nodeSpec"][0]["node"]["runtimeVersion"] for name, r in sent.items() if r} == {
        "one": "tpu-vm-tf-2.16.1-pjrt",
        "pod": "tpu-vm-tf-2.16.1-pod-pjrt",
    }


def test_a_runtime_the_user_names_wins(google_standin: GoogleStandin, cli: Cli, tmp_path: Path) -> None:
    """Over the default, from a flag, TPUCTL_RUNTIME_VERSION, ./tpuctl.toml or the user's config file."""
    user_file = Path(cli.env["XDG_CONFIG_HOME"]) / "tpuctl" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('[cloud]\nruntime-version = "tpu-vm-base"\n')
    cli("create", "from-user", "--accelerator-type", "v4-32", "--async")
    (tmp_path / "tpuctl.toml").write_text('[cloud]\nruntime-version = "tpu-vm-tf-2.18.0-pod-pjrt"\n')
    cli("create", "from-here", "--accelerator-type", "v4-32", "--async")
    cli.env["TPUCTL_RUNTIME_VERSION"] = "tpu-vm-tf-2.18.0-pjrt"
    cli("create", "from-env", "--accelerator-type", "v4-8", "--async")
    cli("create", "from-flag", "--accelerator-type", "v4-8", "--runtime-version", "tpu-ubuntu2204-base", "--async")
    runtimes = {name: (google_standin.node(ZONE, name) or {}).get("runtimeVersion") for name in ("from-user", "from-here", "from-env", "from-flag")}
    assert runtimes == {
        "from-user": "tpu-vm-base",
        "from-here": "tpu-vm-tf-2.18.0-pod-pjrt",
        "from-env": "tpu-vm-tf-2.18.0-pjrt",
        "from-flag": "tpu-ubuntu2204-base",
    }


def test_an_existing_node_on_another_image_is_reused_unless_the_user_names_one(google_standin: GoogleStandin, cli: Cli) -> None:
    """A node made before the default changed (or by hand) is still the node asked for when no runtime is named."""
    g = google_standin
    g.add_ready_nodes(ZONE, 1, prefix="older", accelerator_type="v4-8")  # on the base image, the zone's first
    reused = cli("create", "older-0000", "--accelerator-type", "v4-8")
    assert reused.stdout.startswith("reused existing older-0000 (v4-8, tpu-ubuntu2204-base) in us-central2-b: READY")
    assert creates(g, "older-0000") == 0
    saved = json.loads((Path(cli.env["XDG_DATA_HOME"]) / "tpuctl" / "nodes" / g.project / ZONE / "older-0000.json").read_text())
    assert saved["runtime_version"] == "tpu-ubuntu2204-base"  # what a recreate makes again
    named = cli("create", "older-0000", "--accelerator-type", "v4-8", "--runtime-version", "tpu-vm-tf-2.16.1-pjrt", code=1)
    assert "runtime version: 'tpu-ubuntu2204-base' != 'tpu-vm-tf-2.16.1-pjrt'" in error_line(named)
    other = cli("create", "older-0000", "--accelerator-type", "v4-16", code=1)
    assert "accelerator type: 'v4-8' != 'v4-16'" in error_line(other) and "runtime version" not in other.stderr


def test_create_for_jax_takes_each_types_jax_image_reuses_its_node_and_yields_to_a_named_runtime(google_standin: GoogleStandin, cli: Cli) -> None:
    """--framework jax: the runtimes page's JAX image of each type (tpuctl/tpu/software.py), re-runnable as ever; a
    runtime version a layer names still wins, and a hunt gives each type its own."""
    g = google_standin
    made = cli("create", "jax-v4", "--accelerator-type", "v4-8", "--framework", "jax")
    assert made.stdout.startswith("created jax-v4 (v4-8, tpu-ubuntu2204-base) in us-central2-b: READY")
    assert cli("create", "jax-v4", "--accelerator-type", "v4-8", "--framework", "jax").stdout.startswith("reused existing jax-v4")
    assert creates(g, "jax-v4") == 1
    cli("create", "jax-named", "--accelerator-type", "v4-8", "--framework", "jax", "--async", TPUCTL_RUNTIME_VERSION="tpu-vm-tf-2.16.1-pjrt")
    assert (g.node(ZONE, "jax-named") or {}).get("runtimeVersion") == "tpu-vm-tf-2.16.1-pjrt"
    hunted = cli("create", "jax-hunt", "--zones", "europe-west4-a", "--accelerator-type", "v6e-8,v5litepod-8", "--framework", "jax", "--async")
    assert (g.node("europe-west4-a", "jax-hunt") or {}).get("runtimeVersion") == "v2-alpha-tpuv6e", hunted.stderr
    refused = cli("create", "jax-7x", "--accelerator-type", "tpu7x-8", "--framework", "jax", code=2)
    assert "TPU7x (Ironwood) is not in the Cloud TPU API" in error_line(refused)

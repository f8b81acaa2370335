"""The run's view published into a gs:// model dir (issue 37), through google-cloud-storage against the GCS emulator:
one whole object, rewritten in place, read back as the TensorBoard plugin reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.standins.timelines import write_run
from tpuctl.launch import publish
from tpuctl.runs import goodput
from tpuctl.runs.folder import RunFolder


def test_the_view_is_one_object_in_a_gs_model_dir(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials()).create_bucket("models")
    write_run(tmp_path, workers=2, samples=30, restarts=[15])
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(tmp_path), "run-7", "gs://models/exp/1/", warn=said.append)
    assert publisher.publish(live=True) and publisher.publish(live=False), said
    [blob] = list(bucket.list_blobs(prefix="exp/1/tpuctl/"))
    assert blob.name == "exp/1/tpuctl/run-7/view.json" and blob.content_type == "application/json"
    view = json.loads(blob.download_as_bytes())
    assert view["run"]["model_dir"] == "gs://models/exp/1/" and view["run"]["state"] == "succeeded"
    assert view["goodput"] == goodput.of_folder(RunFolder(tmp_path), live=False).to_json()
    assert [(r["attempt"], r["cause"]) for r in view["restarts"]] == [(2, "preempted")]


def test_a_missing_bucket_is_one_warning(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    write_run(tmp_path, workers=1, samples=3)
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(tmp_path), "run-7", "gs://no-such-bucket/m", warn=said.append)
    assert not publisher.publish(live=True) and not publisher.publish(live=True)
    assert len(said) == 1 and said[0].startswith("warning: cannot publish the run's view to gs://no-such-bucket/m/tpuctl/run-7/view.json: ")


def test_the_view_goes_to_the_storage_endpoint_setting(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No STORAGE_EMULATOR_HOST: tpuctl's own credentials (an access-token file) at TPUCTL_STORAGE_ENDPOINT, as the hunt's
    read of the bucket's region goes there; before issue 45 the upload went to storage.googleapis.com whatever it said."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    token = tmp_path / "token"
    token.write_text("test-token\n")
    for name, value in {"TPUCTL_STORAGE_ENDPOINT": gcs_emulator, "TPUCTL_ACCESS_TOKEN_FILE": str(token), "TPUCTL_PROJECT": "tpuctl-test",
                        "NO_GCE_CHECK": "true", "XDG_CONFIG_HOME": str(tmp_path / "config"), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    bucket = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": gcs_emulator}).create_bucket("models")
    write_run(tmp_path, workers=1, samples=3)
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(tmp_path), "run-8", "gs://models/m", warn=said.append)
    assert publisher.publish(live=False, final=True), said
    [blob] = list(bucket.list_blobs(prefix="m/tpuctl/"))
    assert blob.name == "m/tpuctl/run-8/view.json" and json.loads(blob.download_as_bytes())["run"]["model_dir"] == "gs://models/m"

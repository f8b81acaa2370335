"""Review of issue 37's TensorBoard plugin (tpuctl/tensorboard_plugin/) against a bucket: what one listing costs.

Each test is a defect found by the review, marked xfail(strict=True) until it is fixed. The GCS emulator in this
process (tests/integration/conftest.py), reached through STORAGE_EMULATOR_HOST as tpuctl.cloud.storage.client() does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gcp_storage_emulator import storage as emulator_storage

from tpuctl.tensorboard_plugin import finding

RUN = "20261128-101010-train-ab12"
OTHER_OBJECTS = 300  # a model dir's checkpoints, event files and profile traces: a real one holds thousands


@pytest.mark.xfail(
    strict=True,
    reason="finding.py:97: a bucket listing goes through every object under the logdir (up to MAX_OBJECTS, 200 pages "
    "of 1,000) to find the few view.json, and TensorBoard runs it in is_active on the plugins listing every page load "
    "after the 10 s cache, so a logdir on a bucket with checkpoints and traces holds the whole UI for seconds to "
    "minutes; fix: let the server filter, list_blobs(prefix=..., match_glob=prefix + '**/tpuctl/*/view.json') (GCS matchGlob; the emulator honours it)",
)
def test_a_bucket_listing_asks_the_server_for_views_only(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": gcs_emulator}).create_bucket("models")
    bucket.blob(f"logs/exp1/model/tpuctl/{RUN}/view.json").upload_from_string(json.dumps({"schema": "tpuctl.run-view/1"}))
    for i in range(OTHER_OBJECTS):
        bucket.blob(f"logs/exp1/model/ckpt-{i}.data-00000-of-00001").upload_from_string("x")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    listed: list[int] = []
    real_list = emulator_storage.Storage.get_file_list

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:  # counts what the server sends back; changes nothing
        files, prefixes = real_list(self, *args, **kwargs)
        listed.append(len(files))
        return files, prefixes

    monkeypatch.setattr(emulator_storage.Storage, "get_file_list", counted)

    found = finding.find("gs://models/logs")

    assert [run.run_id for run in found] == [RUN]
    assert sum(listed) <= 10, f"the listing went through {sum(listed)} objects to find one view"

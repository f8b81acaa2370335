"""The tpuctl tab on a gs:// logdir: TensorBoard's real server lists and serves views from a bucket (the GCS
emulator in this process, reached through STORAGE_EMULATOR_HOST as tpuctl.cloud.plumbing.storage.client() does), and what a
listing costs: the objects the server sends back (counted in the emulator) and how long is_active waits."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from gcp_storage_emulator import storage as emulator_storage

from tests.integration import run_views
from tests.integration.tensorboard_server import Server, tensorboard
from tpuctl.tensorboard_plugin import finding

RUN = "20251128-142640-train-ab12"
OTHER_OBJECTS = 100  # a model dir's checkpoints, event files and profile traces (a real one holds thousands): 10 times what a listing may go through
SLOW_S = 6.0  # a bucket listing that slow (a big bucket, a far region)
BUSY = "busy"


def _client(emulator: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="tpuctl-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": emulator})


@pytest.fixture(scope="module")
def server(module_gcs_emulator: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    bucket = _client(module_gcs_emulator).create_bucket("models")
    shown = run_views.built(tmp_path_factory.mktemp("run"), model_dir="gs://models/logs/exp1/model", run_id=RUN)
    objects = {
        f"logs/exp1/model/tpuctl/{RUN}/view.json": json.dumps(shown),
        "logs/exp2/tpuctl/cut/view.json": json.dumps(shown)[:500],
        "logs/exp3/tpuctl/big/view.json": " " * (finding.VIEW_LIMIT + 1),
        f"logs/exp1/model/tpuctl/{RUN}/view.json.tmp": "{}",  # a name that is not a view
        "logs/exp1/model/checkpoint": "model_checkpoint_path: 'ckpt-1'",
        "other/tpuctl/outside/view.json": json.dumps(shown),  # outside the logdir's prefix
    }
    for name, text in objects.items():
        bucket.blob(name).upload_from_string(text)
    env = {"STORAGE_EMULATOR_HOST": module_gcs_emulator}
    with tensorboard("gs://models/logs", tmp_path_factory.mktemp("tblog") / "tensorboard.log", env=env) as running:
        yield running


def test_views_in_a_bucket_are_listed_and_served(server: Server) -> None:
    assert server.json("/data/plugins_listing")["tpuctl"]["enabled"] is True
    listed = server.json("/data/plugin/tpuctl/runs")
    assert [run["key"] for run in listed["runs"]] == ["exp1/model/tpuctl/" + RUN, "exp2/tpuctl/cut", "exp3/tpuctl/big"]
    assert listed["message"] is None
    view = server.json(f"/data/plugin/tpuctl/view?run={quote('exp1/model/tpuctl/' + RUN)}")["view"]
    assert view["run"]["id"] == RUN and view["run"]["model_dir"] == "gs://models/logs/exp1/model" and view["left_out"] == 0
    assert len(view["rows"]) == 4 and [r["cause"] for r in view["restarts"]] == ["preempted"]
    assert view["profiles"][0]["profile_run"] == "exp1/model/" + run_views.SESSION


def test_a_cut_or_oversized_object_is_one_line(server: Server) -> None:
    cut = server.json("/data/plugin/tpuctl/view?run=exp2/tpuctl/cut")
    assert set(cut) == {"message"} and "view.json is not JSON" in cut["message"]
    big = server.json("/data/plugin/tpuctl/view?run=exp3/tpuctl/big")
    assert big == {"message": "exp3/tpuctl/big: view.json is 8,388,609 bytes, over the 8 MiB a view can be: not a view tpuctl wrote"}


def test_a_missing_bucket_is_a_line_in_the_listing(module_gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", module_gcs_emulator)
    listing = finding.Listing("gs://no-such-bucket/logs")
    assert listing.runs() == []
    assert listing.error is not None and listing.error.startswith("cannot list gs://no-such-bucket/logs: ") and "\n" not in listing.error


@pytest.fixture(scope="module")
def busy(module_gcs_emulator: str) -> str:
    """A bucket with one view among OTHER_OBJECTS objects of a model dir, made once: the tests below only list it. The
    server above lists another bucket, only when asked (is_active, a request), and the tests count and slow this one's."""
    bucket = _client(module_gcs_emulator).create_bucket(BUSY)
    bucket.blob(f"logs/exp1/model/tpuctl/{RUN}/view.json").upload_from_string(json.dumps({"schema": "tpuctl.run-view/1"}))
    for i in range(OTHER_OBJECTS):
        bucket.blob(f"logs/exp1/model/ckpt-{i}.data-00000-of-00001").upload_from_string("x")
    return module_gcs_emulator


def test_a_bucket_listing_asks_the_server_for_views_only(busy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", busy)
    listed: list[int] = []
    real_list = emulator_storage.Storage.get_file_list

    def counted(self: Any, bucket_name: str, *args: Any, **kwargs: Any) -> Any:  # counts what the server sends back; changes nothing
        files, prefixes = real_list(self, bucket_name, *args, **kwargs)
        if bucket_name == BUSY:
            listed.append(len(files))
        return files, prefixes

    monkeypatch.setattr(emulator_storage.Storage, "get_file_list", counted)

    found = finding.find(f"gs://{BUSY}/logs")

    assert [run.run_id for run in found] == [RUN]
    assert listed and sum(listed) <= 10, f"the listing went through {sum(listed)} objects to find one view"


def test_is_active_answers_from_the_last_listing_while_a_slow_bucket_lists(busy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorBoard asks is_active on its request thread at every page load: a slow listing must not hold the UI."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", busy)
    listing = finding.Listing(f"gs://{BUSY}/logs", ttl_s=0.0)  # every question finds the last listing stale
    assert [run.run_id for run in listing.runs()] == [RUN]
    real_list = emulator_storage.Storage.get_file_list

    def slow(self: Any, bucket_name: str, *args: Any, **kwargs: Any) -> Any:
        if bucket_name == BUSY:
            time.sleep(SLOW_S)
        return real_list(self, bucket_name, *args, **kwargs)

    monkeypatch.setattr(emulator_storage.Storage, "get_file_list", slow)
    started = time.monotonic()
    active = listing.active()
    waited = time.monotonic() - started

    assert active is True and waited < finding.ACTIVE_WAIT_S + 1.0 < SLOW_S

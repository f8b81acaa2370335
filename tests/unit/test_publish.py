"""launch/publish.py: the run's view written into a local model dir whole, at the start, at an attempt's end and at the
end; a failure to publish is one warning line, never an exception into the run, and is retried."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.timelines import write_run
from tpuctl.launch import publish
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder


def wait_for(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def test_the_view_is_published_at_start_at_each_attempt_end_and_at_the_end(tmp_path: Path) -> None:
    logs, model = tmp_path / "logs", tmp_path / "model"
    logs.mkdir()
    write_run(logs, workers=2, samples=10)
    folder = RunFolder(logs)
    timeline = tl.Timeline(folder.timeline)
    publisher = publish.Publisher(folder, "run-1", str(model), warn=lambda line: None, every_s=3600)
    publisher.start(timeline)
    target = model / "tpuctl" / "run-1" / "view.json"
    wait_for(lambda: publisher.published == 1)
    assert json.loads(target.read_text())["schema"] == "tpuctl.run-view/1"
    timeline.event(tl.ATTEMPT_END, attempt=2)  # wakes the publisher an hour early
    wait_for(lambda: publisher.published == 2)
    assert publisher.published == 2
    timeline.close()
    publisher.stop()
    assert publisher.published == 3 and [p.name for p in target.parent.iterdir()] == ["view.json"]  # no temporary left
    assert json.loads(target.read_text())["run"]["state"] == "succeeded"


def test_a_model_dir_that_cannot_be_written_is_one_warning_then_retried(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_run(logs, workers=1, samples=3)
    blocked = tmp_path / "model"
    blocked.write_text("a file where the model dir's folder would go")
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(logs), "run-1", str(blocked), warn=said.append, every_s=0.05)
    publisher.start(None)
    wait_for(lambda: publisher.cost_s > 0 and len(said) == 1)
    time.sleep(0.3)  # several more turns fail, unsaid
    blocked.unlink()
    wait_for(lambda: publisher.published >= 1)
    publisher.stop()
    assert len(said) == 1 and said[0].startswith(f"warning: cannot publish the run's view to {blocked}/tpuctl/run-1/view.json: ")
    assert "\n" not in said[0] and publisher.published >= 2
    assert json.loads((blocked / "tpuctl" / "run-1" / "view.json").read_text())["run"]["id"] == "run-standin"


def test_a_run_folder_with_no_timeline_yet_is_a_warning_not_an_exception(tmp_path: Path) -> None:
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(tmp_path), "run-1", str(tmp_path / "model"), warn=said.append)
    assert publisher.publish(live=True) is False
    assert len(said) == 1 and "no timeline in" in said[0]


@pytest.fixture
def blackhole() -> Iterator[str]:
    """An endpoint that accepts connections and never answers: a gs:// upload through a network that went silent."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.1)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    accepting = threading.Thread(target=accept, daemon=True)
    accepting.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    done.set()
    accepting.join()
    server.close()
    for connection in held:
        connection.close()


def test_a_silent_gs_endpoint_does_not_hold_the_launchers_end(tmp_path: Path, blackhole: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", blackhole)
    write_run(tmp_path, workers=1, samples=3)
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(tmp_path), "run-1", "gs://bucket/model", warn=said.append)
    publisher.start(None)
    time.sleep(1.0)  # the start's upload is in flight
    stopping = threading.Thread(target=publisher.stop, daemon=True)
    began = time.monotonic()
    stopping.start()
    stopping.join(timeout=20)
    assert not stopping.is_alive(), f"stop() still waiting after {time.monotonic() - began:.0f} s"
    assert len(said) == 1 and said[0].startswith("warning: the run's final view is not published to gs://bucket/model/tpuctl/run-1/view.json")


def test_the_final_view_to_a_silent_gs_endpoint_is_one_short_try(tmp_path: Path, blackhole: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", blackhole)
    monkeypatch.setattr(publish, "UPLOAD_TIMEOUT_S", 0.5)  # the turns' uploads give up at once: the thread is done by stop()
    write_run(tmp_path, workers=1, samples=3)
    said: list[str] = []
    publisher = publish.Publisher(RunFolder(tmp_path), "run-1", "gs://bucket/model", warn=said.append)
    publisher.start(None)
    time.sleep(1.5)
    began = time.monotonic()
    publisher.stop()
    waited = time.monotonic() - began
    assert waited < publish.FINAL_TIMEOUT_S + 3, waited  # one try: no retries of the storage client's on top
    assert publisher.published == 0 and len(said) == 2, said  # the start's failure, then the final one's
    assert said[1].startswith("warning: cannot publish the run's view to gs://bucket/model/tpuctl/run-1/view.json") and "later" not in said[1]

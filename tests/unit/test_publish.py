"""launch/publish.py: the run's view written into a local model dir whole, at the start, at an attempt's end and at the
end; a failure to publish is one warning line, never an exception into the run, and is retried."""

from __future__ import annotations

import json
import time
from pathlib import Path

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

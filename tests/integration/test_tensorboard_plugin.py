"""The tpuctl tab's routes through TensorBoard's real server (its own process, a loopback port), on real run folders.

One TensorBoard for the module, on a logdir holding a good run (with a profile session that xprof's Profile tab
lists too) and hostile ones: truncated, 100 MB, wrong types everywhere, nested past the parser's depth, another
schema, markup in names, and links out of the logdir. Each route answers 200 with JSON, a view or one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import tomllib

from tests.conftest import ROOT
from tests.integration import run_views
from tests.integration.tensorboard_server import Server, tensorboard

SESSION = run_views.SESSION
HOSTILE = '<img src=x onerror="window.top.__pwned=1">'
RUN = "20251128-142640-train-ab12"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, runs: Path) -> Path:
    top = tmp_path_factory.mktemp("tb") / "logs"
    good = top / "exp1" / "model"
    run_views.publish(good, run_views.built(runs / "good", model_dir=str(good)))
    session = good / "plugins" / "profile" / SESSION
    session.mkdir(parents=True)
    (session / "host_1234.xplane.pb").write_bytes(b"")
    elsewhere = run_views.built(runs / "elsewhere", model_dir=str(top / "elsewhere"), run_id="20251128-run-outside", profile_dir="/somewhere/else")
    run_views.publish(top / "elsewhere", elsewhere)
    hostile = run_views.built(runs / "hostile", model_dir="m", names=[HOSTILE, "worker:1"], run_id="20251128-hostile", cause=HOSTILE, stacks=HOSTILE)
    run_views.publish(top / "hostile", hostile)
    text = json.dumps(elsewhere)
    run_views.publish(top / "truncated", text[: len(text) // 2], run_id="truncated")
    huge = run_views.publish(top / "huge", "", run_id="huge")
    os.truncate(huge, 100 << 20)  # 100 MB (sparse): refused from its size, never read
    run_views.publish(top / "types", _wrong_types(elsewhere), run_id="types")
    run_views.publish(top / "nested", "[" * 200_000 + "]" * 200_000, run_id="nested")
    run_views.publish(top / "schema", {"schema": "someone-else/2", "run": {"id": "x"}}, run_id="schema")
    run_views.publish(top / "array", "[1, 2, 3]", run_id="array")
    outside = tmp_path_factory.mktemp("outside")
    run_views.publish(outside / "model", elsewhere, run_id="20251128-linked-out")
    (top / "linked").symlink_to(outside)
    (top / "exp1" / "model" / "tpuctl" / "linked-run").symlink_to(outside / "model" / "tpuctl" / "20251128-linked-out")
    (top / "linkfile" / "tpuctl" / "r").mkdir(parents=True)
    (top / "linkfile" / "tpuctl" / "r" / "view.json").symlink_to(outside / "model" / "tpuctl" / "20251128-linked-out" / "view.json")
    return top


def _wrong_types(real: dict[str, Any]) -> dict[str, Any]:
    """Every field of a real view with a value of another type, and some items kept right."""
    shown = json.loads(json.dumps(real))
    shown["run"] = {"id": 7, "script": ["a"], "state": {"x": 1}, "start": "soon", "end": True, "workers": 1e400}
    shown["attempts"] = "all of them"
    shown["rows"][0]["segments"] = [{"kind": "steps", "start": "1", "end": 2}, {"kind": "<b>", "start": 1.0, "end": 2.0}, 5, None]
    shown["rows"][1]["worker"] = {"name": "worker:1"}
    shown["rows"][2]["rate"] = {"start": 1.0, "bin_s": -1, "steps_per_s": [1, 2]}
    shown["rows"][3]["rate"]["steps_per_s"] = ["fast", -3, 1e308 * 10, 2.5] + [1.0] * 1000
    shown["restarts"] = [{"at": None}, "restart"]
    shown["goodput"]["categories"] = {"training steps": "lots", "start-up": -5, "other": 3.0}
    shown["goodput"]["attempts"] = [None, {"attempt": "one"}]
    shown["goodput_over_time"] = [{"start": 2.0, "end": 1.0, "goodput": 0.5}, {"start": 1.0, "end": 2.0, "goodput": 7}]
    shown["profiles"] = [{"session": "../../etc", "at": 1.0}, {"session": SESSION, "dir": 5, "verdict": {"workers": "w", "notes": [1, "ok"]}}]
    shown["hangs"] = [{"at": 1.0, "stacks": ["not", "text"], "summary": 3}]
    return shown


@pytest.fixture(scope="module")
def server(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with tensorboard(str(logdir), tmp_path_factory.mktemp("tblog") / "tensorboard.log") as running:
        yield running


def _view(server: Server, key: str) -> dict[str, Any]:
    body: dict[str, Any] = server.json(f"/data/plugin/tpuctl/view?run={quote(key)}")
    return body


def test_the_tab_is_listed_as_a_dynamic_plugin_with_the_runs_under_the_logdir(server: Server) -> None:
    tab = server.json("/data/plugins_listing")["tpuctl"]
    assert tab["enabled"] is True and tab["tab_name"] == "tpuctl"
    assert tab["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/tpuctl/index.js"}
    keys = [run["key"] for run in server.json("/data/plugin/tpuctl/runs")["runs"]]
    assert keys == sorted(keys)
    assert set(keys) == {
        "array/tpuctl/array", "elsewhere/tpuctl/20251128-run-outside", f"exp1/model/tpuctl/{RUN}",
        "hostile/tpuctl/20251128-hostile", "huge/tpuctl/huge", "nested/tpuctl/nested", "schema/tpuctl/schema",
        "truncated/tpuctl/truncated", "types/tpuctl/types",
    }, "symbolic links (a linked folder, a linked run folder, a linked view.json) are never followed"


def test_a_run_is_served_as_its_view_and_its_profile_links_to_a_run_the_profile_tab_lists(server: Server, logdir: Path) -> None:
    """The view tpuctl.runs.view.build made comes through whole (nothing left out) and as it was written."""
    key = f"exp1/model/tpuctl/{RUN}"
    reply = _view(server, key)
    view = reply["view"]
    written = json.loads((logdir / key / "view.json").read_text())
    assert reply["key"] == key and view["left_out"] == 0
    for field in ("run", "attempts", "rows", "restarts", "goodput", "goodput_over_time", "hangs", "written"):
        assert view[field] == written[field], field
    assert len(view["rows"]) == 4 and view["restarts"][0]["cause"] == "preempted" and view["hangs"][0]["stacks"] == run_views.STACKS
    profile = view["profiles"][0]
    assert (profile["session"], profile["at"], profile["dir"]) == (SESSION, written["profiles"][0]["at"], str(logdir / "exp1" / "model"))
    assert profile["profile_run"] == f"exp1/model/{SESSION}"
    assert [w["worker"] for w in profile["verdict"]["workers"]] == ["worker:0", "worker:1"] and profile["verdict"]["straggler"] == "worker:1"
    assert profile["verdict"]["workers"][1]["step_ms"]["mean"] == 340.0 and profile["verdict"]["workers"][1]["input_pct"] == 35.0
    assert profile["profile_run"] in server.json("/data/plugin/profile/runs"), "the link names a run of xprof's own listing"
    outside = _view(server, "elsewhere/tpuctl/20251128-run-outside")["view"]["profiles"][0]
    assert outside["profile_run"] is None, "a session outside the logdir is not in the Profile tab: no link"


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("truncated/tpuctl/truncated", "view.json is not JSON"),
        ("huge/tpuctl/huge", "view.json is 104,857,600 bytes, over the 8 MiB a view can be"),
        ("nested/tpuctl/nested", "view.json is not JSON"),
        ("schema/tpuctl/schema", "view.json's schema is 'someone-else/2', not tpuctl.run-view/1"),
        ("array/tpuctl/array", "view.json holds no run view"),
        ("linked/model/tpuctl/20251128-linked-out", "no run 'linked/model/tpuctl/20251128-linked-out' under this logdir"),
        ("../../../../etc/passwd", "no run '../../../../etc/passwd' under this logdir"),
    ],
)
def test_an_unreadable_run_is_one_line_never_a_traceback(server: Server, key: str, said: str) -> None:
    reply = _view(server, key)
    assert set(reply) == {"message"}
    assert said in reply["message"] and "\n" not in reply["message"] and "Traceback" not in reply["message"]


def test_wrong_types_are_left_out_and_counted(server: Server) -> None:
    view = _view(server, "types/tpuctl/types")["view"]
    assert set(view["run"]) == {"id", "script", "backend", "state", "start", "end", "workers", "model_dir"} and set(view["run"].values()) == {None}
    assert view["attempts"] == [] and view["restarts"] == []
    assert [s["kind"] for s in view["rows"][0]["segments"]] == [], "a time as text, an unknown kind, a number, a null: all left out"
    assert [row["worker"] for row in view["rows"]] == ["worker:0", "worker:0", "worker:1"], "the row with an object for a worker is left out"
    assert view["rows"][1]["rate"] is None
    assert view["rows"][2]["rate"]["steps_per_s"][:4] == [None, None, None, 2.5] and len(view["rows"][2]["rate"]["steps_per_s"]) == 600
    assert view["goodput"]["categories"] == {"other": 3.0} and view["goodput"]["attempts"] == []
    assert view["goodput_over_time"] == [{"start": 1.0, "end": 2.0, "goodput": None}]
    assert [p["session"] for p in view["profiles"]] == [SESSION] and view["profiles"][0]["dir"] is None
    assert view["profiles"][0]["verdict"] == {"session": None, "workers": [], "straggler": None, "notes": ["ok"], "unreadable": []}
    assert view["hangs"] == [{"at": 1.0, "attempt": None, "summary": None, "stacks": None}]
    assert view["left_out"] >= 10


def test_markup_in_names_and_words_is_served_as_the_text_it_is(server: Server) -> None:
    view = _view(server, "hostile/tpuctl/20251128-hostile")["view"]
    assert view["rows"][0]["worker"] == HOSTILE and view["restarts"][0]["words"] == HOSTILE and view["attempts"][0]["ending"]["words"] == HOSTILE
    assert view["profiles"][0]["verdict"]["workers"][0]["worker"] == HOSTILE and view["hangs"][0]["stacks"] == HOSTILE


def test_static_files_are_served_with_tensorboards_headers(server: Server) -> None:
    status, body, kind = server.get("/data/plugin/tpuctl/index.js")
    assert status == 200 and kind.startswith("application/javascript") and b"export async function render()" in body
    assert server.get("/data/plugin/tpuctl/style.css")[2].startswith("text/css")
    assert server.get("/data/plugin/tpuctl/nothing.js")[0] == 404


def test_pyproject_declares_the_entry_point_tensorboard_loads() -> None:
    """TensorBoard loads `tensorboard_plugins` entry points (default.get_dynamic_plugins): the declared object must be
    the loader these tests start TensorBoard with, and the static files must ship in the wheel."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = project["project"]["entry-points"]["tensorboard_plugins"]
    assert declared == {"tpuctl": "tpuctl.tensorboard_plugin.plugin:Loader"}
    module, _, name = declared["tpuctl"].partition(":")
    from tensorboard.plugins import base_plugin

    loader = getattr(__import__(module, fromlist=[name]), name)
    assert issubclass(loader, base_plugin.TBLoader)
    assert "tensorboard_plugin/static/*" in project["tool"]["setuptools"]["package-data"]["tpuctl"]


def test_runs_under_a_logdir_spec_are_listed_under_their_names(tmp_path: Path) -> None:
    """`tensorboard --logdir_spec exp1:DIR1,DIR2`, how users put experiments side by side: TensorBoard leaves the
    plugin's logdir empty, and names DIR1's runs exp1/RELATIVE_PATH and DIR2's RELATIVE_PATH."""
    first, second = tmp_path / "exp1", tmp_path / "exp2"
    run_views.publish(first / "model", run_views.built(tmp_path / "run1", model_dir=str(first / "model"), run_id=RUN))
    other = "20251128-150000-train-cd34"
    run_views.publish(second / "model", run_views.built(tmp_path / "run2", model_dir=str(second / "model"), run_id=other))

    with tensorboard(f"exp1:{first},{second}", tmp_path / "tensorboard.log", flag="--logdir_spec") as server:
        assert server.json("/data/plugins_listing")["tpuctl"]["enabled"] is True
        listed = server.json("/data/plugin/tpuctl/runs")
        view = server.json(f"/data/plugin/tpuctl/view?run={quote('exp1/model/tpuctl/' + RUN)}")

    assert [(run["key"], run["run_id"]) for run in listed["runs"]] == [(f"exp1/model/tpuctl/{RUN}", RUN), (f"model/tpuctl/{other}", other)]
    assert listed["message"] is None and listed["logdir"] == f"exp1:{first},{second}"
    assert view["view"]["run"]["id"] == RUN
    assert [profile["profile_run"] for profile in view["view"]["profiles"]] == [None]  # xprof lists sessions under --logdir only

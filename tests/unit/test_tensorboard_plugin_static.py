"""The tpuctl tab without a server: the page's script never turns data into markup, a view of any shape is checked
into the contract's types or refused in one line, TensorBoard's start pays for no TensorFlow import, and a local
logdir's walk finds the runs in real folders."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tpuctl.runs import view_schema
from tpuctl.tensorboard_plugin import checking, finding
from tpuctl.tensorboard_plugin.finding import Unreadable

STATIC = ROOT / "tpuctl" / "tensorboard_plugin" / "static"


def test_the_page_never_parses_data_as_markup_or_code() -> None:
    script = (STATIC / "index.js").read_text(encoding="utf-8")
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("//"))
    sinks = re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*[\"']on", code)
    assert not sinks, sinks
    assert "textContent" in code and "createElementNS" in code


def test_tensorboards_import_of_the_plugin_loads_no_tensorflow_and_no_storage_client() -> None:
    probe = "import sys, tpuctl.tensorboard_plugin.plugin; print(sorted(m for m in ('tensorflow', 'google.cloud.storage') if m in sys.modules))"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    assert shown.stdout.strip() == "[]", shown.stderr


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
_FIELDS = ["written", "run", "attempts", "rows", "restarts", "goodput", "goodput_over_time", "profiles", "hangs"]
_views = st.fixed_dictionaries({"schema": st.just(view_schema.SCHEMA)}, optional={name: _json for name in _FIELDS})


@settings(max_examples=300, deadline=None)
@given(_views)
def test_any_view_is_checked_into_json_the_page_can_take(found: dict[str, Any]) -> None:
    shown = checking.view(json.dumps(found).encode(), logdir="/logs")
    json.dumps(shown, allow_nan=False)  # no NaN or infinity reaches the page
    assert set(shown) == {"schema", *_FIELDS, "left_out"}
    for row in shown["rows"]:
        assert isinstance(row["worker"], str) and all(s["kind"] in view_schema.KINDS for s in row["segments"])


def test_an_attempt_keeps_the_vm_it_ran_on_and_loses_a_vm_that_is_not_one() -> None:
    """goodput's attempts name the run's own TPU VM (launch --new-tpu): served as written; anything else is null."""
    vm = {"node": "r20261128-1", "zone": "us-central2-b", "capacity": "spot", "price_per_hour": 8.16}
    odd = [{"node": "x"}, {"node": 3, "zone": "z"}, "vm", {"node": "x", "zone": "z", "price_per_hour": -1}]
    attempts = [{"attempt": 1, "vm": vm}, *({"attempt": n + 2, "vm": bad} for n, bad in enumerate(odd))]
    shown = checking.view(json.dumps({"schema": view_schema.SCHEMA, "goodput": {"attempts": attempts}}).encode(), logdir="/logs")
    got = [a["vm"] for a in shown["goodput"]["attempts"]]
    assert got == [vm, None, None, None, {"node": "x", "zone": "z", "capacity": None, "price_per_hour": None}]


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"{", b"null", b"[]", b'"view"', b"[" * 100_000, b'{"schema": 1}'])
def test_what_is_no_view_is_one_line(data: bytes) -> None:
    with pytest.raises(Unreadable) as refused:
        checking.view(data, logdir="/logs")
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


@pytest.mark.parametrize(
    ("logdir", "where", "run"),
    [
        ("/logs", "/logs", "S"),
        ("/logs/", "/logs/exp1/model", "exp1/model/S"),
        ("/logs", "/logs/exp1/../exp2", "exp2/S"),
        ("/logs", "/logsx/m", None),
        ("/logs", "/other", None),
        ("/logs", "exp1/model", None),
        ("gs://b/logs", "gs://b/logs/m", "m/S"),
        ("gs://b/logs", "gs://b/logs", "S"),
        ("gs://b/logs", "gs://b/logs2/m", None),
        ("gs://b/logs", "gs://b/logs/../x", None),
        ("gs://b/logs", "/logs/m", None),
    ],
)
def test_a_session_links_to_the_profile_tabs_name_for_it_only_inside_the_logdir(logdir: str, where: str, run: str | None) -> None:
    """xprof names a session by its run folder relative to the logdir, joined to the session (profile_plugin.generate_runs)."""
    assert checking.profile_run(logdir, where, "S") == run


def test_the_tensorboard_extra_admits_the_tensorboard_of_tf_2_15() -> None:
    """TensorFlow 2.15 requires tensorboard<2.16 (Cloud TPU's 2.15 images ship 2.15.2), and the plugin loads under it:
    the extra must not replace the TensorBoard that TensorFlow pins."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (wanted,) = [Requirement(spec) for spec in project["optional-dependencies"]["tensorboard"] if Requirement(spec).name == "tensorboard"]

    assert wanted.specifier.contains("2.15.2")


def _publish(model_dir: Path, run_id: str) -> None:
    folder = model_dir / finding.FOLDER / run_id
    folder.mkdir(parents=True)
    (folder / finding.VIEW_NAME).write_text(json.dumps({"schema": view_schema.SCHEMA, "run": {"id": run_id}}))


def test_runs_under_a_folder_named_tpuctl_are_listed(tmp_path: Path) -> None:
    """A project folder named tpuctl (~/code/tpuctl/exp/model/tpuctl/RUN) holds no view itself: the walk goes on below
    it, as a bucket's listing matches the last tpuctl/RUN/view.json of a name."""
    _publish(tmp_path / "tpuctl" / "exp1" / "model", "20261128-101010-train-ab12")
    _publish(tmp_path / "exp2" / "model", "20261128-111111-train-cd34")

    assert [run.key for run in finding.find(str(tmp_path))] == [
        "exp2/model/tpuctl/20261128-111111-train-cd34",
        "tpuctl/exp1/model/tpuctl/20261128-101010-train-ab12",
    ]


def test_a_logdir_cut_short_by_the_folder_bound_says_so(tmp_path: Path) -> None:
    """~/experiments with a big folder walked first: the runs after the bound are not listed, and the listing says so
    (the page shows Listing.error) rather than 'No tpuctl runs under ...'."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = (Path(entry.path) for entry in os.scandir(tmp_path))  # os.walk goes depth first, in scandir's order
    for i in range(finding.MAX_FOLDERS):
        (first / f"ckpt-{i}").mkdir()
    _publish(second / "model", "20261128-101010-train-ab12")

    listing = finding.Listing(str(tmp_path))

    assert listing.runs() == []
    assert listing.error is not None and f"{finding.MAX_FOLDERS:,} folders" in listing.error and "--logdir" in listing.error


def test_a_walk_within_the_bound_says_nothing(tmp_path: Path) -> None:
    _publish(tmp_path / "exp1" / "model", "20261128-101010-train-ab12")

    listing = finding.Listing(str(tmp_path))

    assert [run.run_id for run in listing.runs()] == ["20261128-101010-train-ab12"] and listing.error is None


# --- the routes, in this process through TensorBoard's own router (issue 46) ---------------------------------


ROUTES = ("/index.js", "/style.css", "/schema", "/runs", "/view")
VARIANTS = ("{}", "{}/", "{}//", "{}/.", "{}/..", "{}/x", "{}%00", "{}%2f", "{}.map", "{}/?run=", "/./{}", "/{}", "{}?run=%00", "{}?run=../../x&run=y")


def _app(logdir: Path) -> Any:
    """TensorBoard's WSGI app with only this plugin: its router strips one trailing slash before it picks a route
    (application.py, _clean_path); what a route raises reaches TensorBoard's server, which answers 500 and logs it."""
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin

    from tpuctl.tensorboard_plugin.plugin import Plugin

    return application.TensorBoardWSGI([Plugin(base_plugin.TBContext(logdir=str(logdir)))])


def test_every_route_with_any_path_variant_answers_the_file_its_data_or_404_never_500(tmp_path: Path) -> None:
    from werkzeug.test import Client

    from tests.integration import run_views

    run_views.publish(tmp_path / "model", run_views.built(tmp_path / "run", model_dir=str(tmp_path / "model")))
    client = Client(_app(tmp_path))
    for route in ROUTES:
        for variant in VARIANTS:
            path = "/data/plugin/tpuctl" + variant.format(route)
            try:
                reply = client.get(path)
            except Exception as raised:  # noqa: BLE001 - what TensorBoard's server answers with a 500 and a traceback
                pytest.fail(f"{path}: 500, {type(raised).__name__}: {raised}")
            assert reply.status_code in (200, 404), (path, reply.status_code, reply.get_data()[:300])
            if reply.status_code == 200 and route in ("/schema", "/runs", "/view"):
                assert isinstance(json.loads(reply.get_data()), dict), path
    assert client.get("/data/plugin/tpuctl/index.js/").get_data() == (STATIC / "index.js").read_bytes()


def test_the_page_draws_by_the_kinds_the_plugin_serves_each_with_its_colour(tmp_path: Path) -> None:
    """The segment kinds and the good end are the schema's (runs/view_schema.py), served to the page: it spells none."""
    from werkzeug.test import Client

    served = json.loads(Client(_app(tmp_path)).get("/data/plugin/tpuctl/schema").get_data())
    assert served == view_schema.page_words() and served["kinds"] == list(view_schema.KINDS)
    script = (STATIC / "index.js").read_text(encoding="utf-8")
    spelled = re.findall(r'"(first-step|checkpoint-save|checkpoint-restore|stall|succeeded)"', script)  # not goodput's categories' words
    assert not spelled, spelled
    style = (STATIC / "style.css").read_text(encoding="utf-8")
    assert all(f".seg-{kind} {{" in style for kind in view_schema.KINDS), "a kind without its colour"

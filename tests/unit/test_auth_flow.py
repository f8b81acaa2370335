"""The `tpuctl auth` flow in-process, against the Google stand-in: what it says, in which order, and when it writes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.cloud.auth.auth_flow import authorize
from tpuctl.cloud.auth.auth_request import AuthRequest
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError

MODEL_DIR = "gs://tpuctl-test-models/runs"


@dataclass
class Recorder:
    """A person at a terminal who answers `answer`, or nobody (can_ask False); everything said is kept."""

    can_ask: bool = False
    answer: bool = False
    said: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    progressed: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.said.append(line)

    def note(self, line: str) -> None:
        self.notes.append(line)

    def progress(self, line: str) -> None:
        self.progressed.append(line)

    def confirm(self, question: str) -> bool:
        self.questions.append(question)
        return self.answer


@pytest.fixture
def standin(google_standin: GoogleStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GoogleStandin:
    """The settings layers sealed from the user's own files, and every endpoint pointed at the stand-in."""
    for name in [name for name in os.environ if name.startswith("TPUCTL_")]:
        monkeypatch.delenv(name)
    for name, value in standin_env(google_standin, tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return google_standin


def writes(g: GoogleStandin) -> int:
    return g.count("POST", ":setIamPolicy")


def request(g: GoogleStandin, *, dry_run: bool = False, yes: bool = False) -> AuthRequest:
    return AuthRequest(zone=g.zones[0], model_dir=MODEL_DIR, dry_run=dry_run, yes=yes)


def test_asks_before_the_only_write_and_a_rerun_changes_nothing(standin: GoogleStandin) -> None:
    g = standin
    no = Recorder(can_ask=True, answer=False)
    with pytest.raises(TpuctlError) as refused:
        authorize(request(g), no)
    assert refused.value.exit_code == FAILED and writes(g) == 0
    assert no.questions == ["Add 2 binding(s) to the IAM policy of project tpuctl-test?"]
    # What each step found is said before the next step starts.
    assert [line.split(":")[0] for line in no.said[:4]] == ["credentials", "account", "project", "TPU service identity"]
    assert no.progressed == [
        "asking the TPU API for the service identity of project tpuctl-test",
        "reading the IAM policy of project tpuctl-test",
    ]

    yes = Recorder(can_ask=True, answer=True)
    authorize(request(g), yes)
    assert writes(g) == 1
    assert yes.said[-1] == "updated the IAM policy of project tpuctl-test: all 2 binding(s) above are in place"

    again = Recorder(can_ask=True, answer=True)
    authorize(request(g), again)
    assert writes(g) == 1 and again.questions == []
    assert again.said[-1] == "nothing to change: the IAM policy of project tpuctl-test already has all 2 binding(s)"


def test_without_a_person_to_ask_a_change_needs_yes(standin: GoogleStandin) -> None:
    g = standin
    with pytest.raises(TpuctlError, match="would change the IAM policy of project tpuctl-test") as refused:
        authorize(request(g), Recorder())
    assert refused.value.exit_code == USAGE and writes(g) == 0
    nobody = Recorder()
    authorize(request(g, yes=True), nobody)
    assert writes(g) == 1 and nobody.questions == []


def test_dry_run_shows_the_gcloud_commands_and_writes_nothing(standin: GoogleStandin) -> None:
    g = standin
    ui = Recorder()
    authorize(request(g, dry_run=True), ui)
    assert writes(g) == 0 and g.count("POST", ":getIamPolicy") == 1
    start = ui.said.index("equivalent gcloud commands:")
    assert ui.said[start + 1] == "  gcloud beta services identity create --service=tpu.googleapis.com --project=tpuctl-test"
    assert ui.said[-1] == "dry run: nothing changed"


def test_bad_input_fails_before_any_request(standin: GoogleStandin) -> None:
    g = standin
    for bad, expected in (
        (AuthRequest(zone=g.zones[0], roles=("storage.objectAdmin",)), "is not a role name"),
        (AuthRequest(zone=g.zones[0], service_account="nobody"), "is not a service account email"),
        (AuthRequest(zone=g.zones[0], model_dir=MODEL_DIR, legacy_ai_platform=True), "--model-dir has no effect with --legacy-ai-platform"),
    ):
        ui = Recorder()
        with pytest.raises(TpuctlError, match=expected) as failed:
            authorize(bad, ui)
        assert failed.value.exit_code == USAGE
        assert ui.said == [] and ui.notes == []
    assert g.requests == []


def test_legacy_flow_warns_first(standin: GoogleStandin) -> None:
    ui = Recorder()
    authorize(AuthRequest(zone=standin.zones[0], legacy_ai_platform=True, dry_run=True), ui)
    assert len(ui.notes) == 1 and ui.notes[0].startswith("warning: ")
    assert any(line.startswith("TPU service account (ml getConfig): ") for line in ui.said)


def test_vertex_needs_no_zone_and_says_each_finding_before_the_question(standin: GoogleStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    g = standin
    monkeypatch.setenv("TPUCTL_STORAGE_ENDPOINT", g.url)
    monkeypatch.setenv("TPUCTL_IAM_ENDPOINT", g.url)
    g.projects.add_bucket("tpuctl-test-models")
    no = Recorder(can_ask=True, answer=False)
    with pytest.raises(TpuctlError) as refused:
        authorize(AuthRequest(vertex=True, model_dir=MODEL_DIR), no)
    assert refused.value.exit_code == FAILED and writes(g) == 0 and g.count("PUT", "/iam") == 0
    assert no.questions == ["Add 3 binding(s) to the IAM policy of project tpuctl-test, bucket gs://tpuctl-test-models?"]
    assert [line.split(":")[0] for line in no.said[:7]] == [
        "credentials", "account", "project", "APIs enabled", "Vertex AI service agent", "Vertex AI custom code service agent", "jobs run as",
    ]
    assert g.count("POST", ":generateServiceIdentity") == 0, "nothing is created before the person says yes"
    yes = Recorder(can_ask=True, answer=True)
    authorize(AuthRequest(vertex=True, model_dir=MODEL_DIR), yes)
    assert writes(g) == 1 and g.count("PUT", "/iam") == 1
    assert g.count("POST", "/services/aiplatform.googleapis.com:generateServiceIdentity") == 1


def test_vertex_bad_input_fails_before_any_request(standin: GoogleStandin) -> None:
    for bad, expected in (
        (AuthRequest(vertex=True, legacy_ai_platform=True), "two different flows"),
        (AuthRequest(staging_bucket="gs://b/x"), "--staging-bucket only applies with --vertex"),
        (AuthRequest(vertex=True, staging_bucket="b/x"), "is not a gs:// path"),
    ):
        with pytest.raises(TpuctlError, match=expected) as failed:
            authorize(bad, Recorder())
        assert failed.value.exit_code == USAGE
    assert standin.requests == []

"""The CLI reference in docs/ is exactly what `--help` says today."""

from __future__ import annotations

from tests.conftest import ROOT
from tpuctl.cli.reference import render


def test_cli_reference_is_current() -> None:
    written = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    assert written == render(), "docs/cli-reference.md is stale: run `make docs`"


def test_readme_test_command_is_what_ci_runs() -> None:
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()

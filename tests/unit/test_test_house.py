"""The test suite's own house rules (issue 47), checked so they cannot drift.

Test helpers live in tests/standins/ or a conftest.py: a test module (test_*.py) is never imported, however the
import is spelled (`from tests.unit.test_x import y`, `from tests.unit import test_x`, `import tests.unit.test_x`,
`from .test_x import y`), at the top of a module or inside a function, by a test module or a helper.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

TESTS = ROOT / "tests"


def _package(path: Path) -> list[str]:
    return list(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imported_modules(path: Path, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each module an import in `tree` may load, relative imports made absolute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _package(path)[: len(_package(path)) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)  # `from package import module`


def imported_tests(source: str, path: Path = TESTS / "unit" / "test_here.py") -> list[str]:
    """The test modules `source` (at `path`) imports."""
    return sorted({name for _, name in imported_modules(path, ast.parse(source)) if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")})


def test_no_module_imports_a_test_module() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, name in imported_modules(path, ast.parse(path.read_text(encoding="utf-8"))):
            if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_"):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not found, "move what these take to tests/standins/ or a conftest.py:\n" + "\n".join(sorted(set(found)))


def test_every_spelling_of_a_test_module_import_is_seen() -> None:
    """The check above finds each way an import can name a test module, and nothing else."""
    assert imported_tests("from tests.unit.test_lifecycle import FakeApi") == ["tests.unit.test_lifecycle"]
    assert imported_tests("from tests.integration import test_new_tpu as new_tpu") == ["tests.integration.test_new_tpu"]
    assert imported_tests("import tests.unit.test_hunt") == ["tests.unit.test_hunt"]
    assert imported_tests("from .test_hunt import zones") == ["tests.unit.test_hunt"]
    assert imported_tests("from . import test_hunt") == ["tests.unit.test_hunt"]
    assert imported_tests("from ..integration.test_new_tpu import Cloud") == ["tests.integration.test_new_tpu"]
    assert imported_tests("def f():\n    from tests.unit.test_hostile_cli import in_process\n") == ["tests.unit.test_hostile_cli"]
    assert imported_tests("from tests.standins.cli_calls import in_process\nfrom tests.conftest import ROOT\nimport tests.integration.sshd") == []
    assert imported_tests("from tests.standins import test_standin") == ["tests.standins.test_standin"]

"""The shape of the code, as docs/architecture.md states it, checked so it cannot drift.

Each rule here is one the architecture issue set: small modules, a CLI that only
parses and renders, TensorFlow only in the runtime, one accelerator table, one
environment contract, and docs that name only files that exist.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "tpuctl"
MAX_MODULE_LINES = 500
MAX_CLI_FUNCTION_LINES = 60
# What the CLI layer may not do itself: start processes, speak HTTP, sleep in a loop.
CLI_FORBIDDEN_IMPORTS = {"subprocess", "http", "requests", "urllib", "socket", "threading", "google"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _imported(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_module_is_over_the_size_limit() -> None:
    long = {_rel(p): n for p in _modules() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these by job (at most {MAX_MODULE_LINES} lines): {long}"


def test_cli_functions_are_short_and_do_no_machinery() -> None:
    long: dict[str, int] = {}
    machinery: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in _functions(tree):
            size = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if size > MAX_CLI_FUNCTION_LINES:
                long[f"{_rel(path)}:{fn.name}"] = size
        bad = sorted({name for name in _imported(tree) if name.split(".")[0] in CLI_FORBIDDEN_IMPORTS})
        if bad:
            machinery[_rel(path)] = bad
    assert not long, f"cli functions over {MAX_CLI_FUNCTION_LINES} lines: {long}"
    assert not machinery, f"process, HTTP or client machinery belongs in the core, not cli/: {machinery}"


def test_only_the_runtime_imports_tensorflow() -> None:
    offenders = []
    for path in _modules():
        if (PACKAGE / "runtime") in path.parents:
            continue
        names = set(_imported(ast.parse(path.read_text(encoding="utf-8"))))
        if names & {"tensorflow", "tf_keras", "keras"} or any(n.startswith("tensorflow.") for n in names):
            offenders.append(_rel(path))
    assert not offenders


def test_the_worker_contract_is_spelt_in_one_place() -> None:
    """Every TPUCTL_* variable between a launch and its workers is written out in tpuctl/worker_contract.py only."""
    from tpuctl import worker_contract

    names = {v for k, v in vars(worker_contract).items() if k.isupper() and isinstance(v, str) and v.startswith("TPUCTL_")}
    assert len(names) >= 10, names
    pattern = re.compile(r"""["'](TPUCTL_[A-Z_]+)["']""")
    offenders = {
        _rel(p): found
        for p in _modules()
        if p.name != "worker_contract.py" and (found := sorted(set(pattern.findall(p.read_text(encoding="utf-8"))) & names))
    }
    assert not offenders, f"use the names of tpuctl/worker_contract.py: {offenders}"


def test_tpu_generation_facts_live_in_the_accelerator_table() -> None:
    """GKE accelerator labels and TPU API config types are spelt in tpuctl/accelerators.py alone."""
    facts = re.compile(r"""["'](tpu-v\d[a-z0-9-]*|V5LITE_POD|V5P|V6E|TPU_V\d\w*|ct\d\w*-\w+)["']""")
    offenders = {
        _rel(p): sorted(set(facts.findall(text)))
        for p in _modules()
        if _rel(p) != "tpuctl/accelerators.py" and facts.search(text := p.read_text(encoding="utf-8"))
    }
    assert not offenders, f"move these into tpuctl/accelerators.py: {offenders}"


@pytest.mark.parametrize("doc", [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"], ids=lambda p: p.name)
def test_docs_name_only_files_that_exist(doc: Path) -> None:
    named = set(re.findall(r"`((?:tpuctl|tests|benchmarks|examples|docs)/[\w./-]+?)`", doc.read_text(encoding="utf-8")))
    placeholders = ("*", "NAME")
    missing = sorted(path for path in named if not any(p in path for p in placeholders) and not (ROOT / path.rstrip("/")).exists())
    assert not missing, f"{doc.name} names files that are not in the repository: {missing}"


# Where tpuctl starts a process without reaper.run, and why that one is bounded and dies with tpuctl anyway.
_OWN_START = {
    "tpuctl/reaper.py": "the reaper itself: run() and spawn()",
    "tpuctl/backends/local/processes.py": "workers: their runtime puts each under a reaper whose lifeline tpuctl holds",
    "tpuctl/backends/ssh/session.py": "ssh clients: SIGCONT as parent-death signal, so a stopped one wakes and ends when tpuctl dies",
    "tpuctl/backends/ssh/agent.py": "the remote agent: a subreaper that kills what it adopted when its worker ends or its ssh session does",
}
_STARTS = {
    *(f"subprocess.{f}" for f in ("run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput")),
    *(f"os.{f}" for f in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp")),
    "pty.spawn",
    "pty.fork",
}
_STARTS_BY_PREFIX = ("os.exec", "os.spawn", "asyncio.create_subprocess")
# Other ways to start a process, which would hide a start from the walk below (`from subprocess import Popen`, an alias).
_START_MODULES = {"subprocess", "multiprocessing", "pty", "concurrent.futures.process"}
_START_NAMES = {"ProcessPoolExecutor"}  # concurrent.futures' process pool, however it was imported
# Callers that start a process on tpuctl's behalf, each with a `timeout` every call must name (None: the user's own command).
_BOUNDED = {"reaper.run", "run_everywhere"}


def _process_starts(name: str, tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in _START_MODULES:
            if node.module != "subprocess" or any(f"subprocess.{alias.name}" in _STARTS for alias in node.names):
                yield f"{name}:{node.lineno} from {node.module} import " + ", ".join(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in _START_MODULES and (alias.name != "subprocess" or alias.asname is not None):
                    yield f"{name}:{node.lineno} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
        elif isinstance(node, ast.Name | ast.Attribute) and (node.id if isinstance(node, ast.Name) else node.attr) in _START_NAMES:
            yield f"{name}:{node.lineno} a process pool"
        elif isinstance(node, ast.Call):
            func = node.func
            call = f"{func.value.id}.{func.attr}" if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            if call is not None and (call in _STARTS or call.startswith(_STARTS_BY_PREFIX)) and name not in _OWN_START:
                yield f"{name}:{node.lineno} {call}"
            called = call or (func.id if isinstance(func, ast.Name) else None)
            if called in _BOUNDED and not any(k.arg == "timeout" for k in node.keywords):
                yield f"{name}:{node.lineno} {called} without timeout="


def test_every_child_tpuctl_starts_has_a_deadline_and_dies_with_tpuctl() -> None:
    """Issue 29: a one-shot command (kubectl, nvidia-smi, py-spy, ssh, rsync, a compiler) goes through reaper.run
    (or run_everywhere, which uses it) and names its deadline: a timeout, and SIGKILL when tpuctl dies. Anything else
    that starts a process is named above, with its reason; other ways to start one (an alias, multiprocessing) are refused."""
    found = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("tpuctl/runtime/"):
            continue  # inside a worker, itself under a reaper
        found += _process_starts(name, ast.parse(path.read_text(encoding="utf-8")))
    assert not found, found


@pytest.mark.parametrize(
    "source",
    [
        "from subprocess import Popen\nPopen(['x'])",
        "import subprocess as sp\nsp.run(['x'])",
        "import multiprocessing",
        "from concurrent import futures\nfutures.ProcessPoolExecutor()",
        "import os\nos.execvp('x', ['x'])",
        "import asyncio\nasyncio.create_subprocess_exec('x')",
        "from tpuctl import reaper\nreaper.run(['x'])",
        "run_everywhere(hosts, ['x'], options)",
    ],
)
def test_the_process_walk_sees_every_way_to_start_one(source: str) -> None:
    """The walk above must not pass by a spelling it was not written for."""
    assert list(_process_starts("tpuctl/example.py", ast.parse(source)))

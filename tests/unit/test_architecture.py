"""The shape of the code, as docs/architecture.md states it, checked so it cannot drift.

Each rule here is one the architecture issue set: small modules, a CLI that only
parses and renders, TensorFlow only in the runtime, one accelerator table, one
environment contract, docs that name only files that exist, and (issue 22) layers
that import only downward, no import cycles, and folders of at most 20 modules.
"""

from __future__ import annotations

import ast
import functools
import graphlib
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


@functools.cache
def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


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
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
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


def test_only_the_runtime_imports_tensorflow_or_jax() -> None:
    offenders = []
    for path in _modules():
        if (PACKAGE / "runtime") in path.parents:
            continue
        names = set(_imported(_tree(path)))
        if names & {"tensorflow", "tf_keras", "keras", "jax", "jaxlib"} or any(n.startswith(("tensorflow.", "jax.", "keras.")) for n in names):
            offenders.append(_rel(path))
    assert not offenders


def test_the_worker_contract_is_spelt_in_one_place() -> None:
    """Every TPUCTL_* variable between a launch and its workers is written out in tpuctl/cluster/worker_contract.py only."""
    from tpuctl.cluster import worker_contract
    names = {v for k, v in vars(worker_contract).items() if k.isupper() and isinstance(v, str) and v.startswith("TPUCTL_")}
    assert len(names) >= 10, names
    pattern = re.compile(r"""["'](TPUCTL_[A-Z_]+)["']""")
    offenders = {
        _rel(p): found
        for p in _modules()
        if p.name != "worker_contract.py" and (found := sorted(set(pattern.findall(p.read_text(encoding="utf-8"))) & names))
    }
    assert not offenders, f"use the names of tpuctl/cluster/worker_contract.py: {offenders}"


def test_tpu_generation_facts_live_in_the_accelerator_table() -> None:
    """GKE accelerator labels and TPU API config types are spelt in tpuctl/tpu/accelerators.py alone."""
    facts = re.compile(r"""["'](tpu-v\d[a-z0-9-]*|V5LITE_POD|V5P|V6E|TPU_V\d\w*|ct\d\w*-\w+)["']""")
    offenders = {
        _rel(p): sorted(set(facts.findall(text)))
        for p in _modules()
        if _rel(p) != "tpuctl/tpu/accelerators.py" and facts.search(text := p.read_text(encoding="utf-8"))
    }
    assert not offenders, f"move these into tpuctl/tpu/accelerators.py: {offenders}"


def test_the_doctor_asks_the_tpu_table_instead_of_naming_a_generation() -> None:
    """Issue 35: the doctor's verdicts and fixes take generations, types and images from tpuctl/tpu/ (its
    docstrings may still say which chips a check is about)."""
    from tpuctl.tpu import accelerators
    words = {w for name, g in accelerators.GENERATIONS.items() for w in (name, *g.aliases)}
    named = re.compile(rf"\b({'|'.join(sorted(words))})(?:-[0-9N]+)?\b")
    offenders: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / "doctor").rglob("*.py")):
        tree = _tree(path)
        owners = [node for node in ast.walk(tree) if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)]
        docstrings = {id(node.body[0].value) for node in owners if node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings and named.search(node.value):
                offenders.setdefault(_rel(path), []).append(node.value)
    assert not offenders, f"ask tpuctl/tpu/ (software.tensorflow_generations, the Chip rows) instead: {offenders}"


# Issue 35: each seam's name means one thing (docs/architecture.md, "One name, one meaning"): the word, where its one
# definition lives. "Backend" alone and "Watch" alone name no class: a backend is a package under tpuctl/backends/,
# and watch/ is the training's files.
SEAMS = {
    "Runner": "tpuctl/launch/runner.py",
    "Starter": "tpuctl/launch/process/starter.py",
    "Handle": "tpuctl/launch/process/starter.py",
    "Scheduler": "tpuctl/launch/follow/scheduler.py",
    "BabysitTerms": "tpuctl/cloud/nodes/babysit.py",
}
RETIRED_NAMES = {"Backend", "Watch"}


def test_one_name_one_meaning() -> None:
    defined: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(_rel(path))
    assert {name: defined.get(name) for name in SEAMS} == {name: [where] for name, where in SEAMS.items()}
    assert not RETIRED_NAMES & set(defined), {name: defined[name] for name in RETIRED_NAMES & set(defined)}
    assert not [_rel(p) for p in _modules() if p.name == "backend.py"], "a module named backend.py: name it for what it holds"


@pytest.mark.parametrize("doc", [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"], ids=lambda p: p.name)
def test_docs_name_only_files_that_exist(doc: Path) -> None:
    named = set(re.findall(r"`((?:tpuctl|tests|benchmarks|examples|docs)/[\w./-]+?)`", doc.read_text(encoding="utf-8")))
    placeholders = ("*", "NAME")
    missing = sorted(path for path in named if not any(p in path for p in placeholders) and not (ROOT / path.rstrip("/")).exists())
    assert not missing, f"{doc.name} names files that are not in the repository: {missing}"


# Where tpuctl starts a process without reaper.run, and why that one is bounded and dies with tpuctl anyway.
_OWN_START = {
    "tpuctl/safety/reaper.py": "the reaper itself: run() and spawn()",
    "tpuctl/backends/local/processes.py": "workers: their runtime puts each under a reaper whose lifeline tpuctl holds",
    "tpuctl/backends/ssh/session.py": "ssh clients: SIGCONT as parent-death signal, so a stopped one wakes and ends when tpuctl dies",
    "tpuctl/runs/detach.py": "a detached run's supervisor (os.fork twice): it stops its workers as an attached launch does, and they die with it",
    "tpuctl/doctor/probe.py": "doctor's probe, itself under reaper.run (or an ssh session with a deadline): its children "
    "(TensorFlow's import, nvidia-smi) each have a deadline, and the import dies with the probe (PR_SET_PDEATHSIG)",
    "tpuctl/backends/ssh/agent.py": "the remote agent: a subreaper that kills what it adopted when its worker ends or its ssh session does",
    "tpuctl/backends/ssh/environment/host_env.py": "runs on an ssh host, sent as source (no reaper there): venv and pip, each "
    "in a session of its own, its whole group killed at the command's deadline, which the launcher's ssh deadline outlasts",
    "tpuctl/backends/ssh/environment/host_build.py": "runs on an ssh host as host_env.py does: --setup in a session of its own, "
    "its whole group killed at --start-timeout",
    "tpuctl/backends/ssh/environment/setup_output.py": "--setup's ssh client, read line by line as it runs: SIGKILL when "
    "tpuctl dies (reaper.dies_with_parent; the thread that starts it waits for it), its group killed at --start-timeout's deadline",
    "tpuctl/safety/child_output.py": "run(): reaper.run with bounded output (reaper.run would keep all a child prints): a deadline "
    "every caller names, SIGKILL when tpuctl dies (reaper.dies_with_parent), the child killed at its limit or its deadline",
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
_BOUNDED = {"reaper.run", "run_everywhere", "child_output.run"}


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
        found += _process_starts(name, _tree(path))
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
        "from tpuctl.safety import reaper\nreaper.run(['x'])",
        "run_everywhere(hosts, ['x'], options)",
    ],
)
def test_the_process_walk_sees_every_way_to_start_one(source: str) -> None:
    """The walk above must not pass by a spelling it was not written for."""
    assert list(_process_starts("tpuctl/example.py", ast.parse(source)))


# ---- layers: a rank per package, imports only downward ------------------------------------------

# The layers, lowest first. A module's layer is the longest entry its dotted name starts with; it may import
# modules of its own layer (in APART: its own subpackage) and of lower ranks, never higher, never another of its rank.
LAYERS: dict[str, tuple[int, str]] = {
    "tpuctl.inputs": (0, "checking what comes in: the error type and its kinds, parsers' shared checks, durations, private files"),
    "tpuctl.tpu": (1, "the TPU facts: generations, types, topologies, their software (PCI ids, images, libtpu pins)"),
    "tpuctl.cluster": (1, "the cluster a launch describes: TF_CONFIG, hosts, the worker contract"),
    "tpuctl.safety": (1, "process safety: the reaper, stopping signals, workers' stacks"),
    "tpuctl.settings": (2, "settings and where each value comes from: flags, env, files, gcloud's configuration"),
    "tpuctl": (3, "the package's own version, how runs end (endings), the runtime's path for other interpreters, `tpuctl new`'s templates"),
    "tpuctl.cloud": (4, "Google Cloud's APIs: credentials, REST, TPU nodes, IAM, storage, Vertex AI"),
    "tpuctl.runs": (4, "a run folder's layout, and the launches running now"),
    "tpuctl.watch": (5, "following a run's logs and events, locally or in a bucket"),
    "tpuctl.devices": (5, "the accelerators a machine has, as rows to show"),
    "tpuctl.doctor": (5, "can a machine run TensorFlow on its accelerator: a probe's facts, checks, hosts compared"),
    "tpuctl.profiling": (5, "a captured profile read back: sessions, xprof's numbers, the verdict"),
    "tpuctl.tensorboard_plugin": (5, "the tpuctl tab in TensorBoard: run views found under a logdir, checked, served and drawn"),
    "tpuctl.runtime": (6, "inside a worker, next to the training script; nothing else imports it (RUNTIME below)"),
    "tpuctl.launch.console": (7, "what a launch shows: log lines, TensorFlow's noise, side tails, tracebacks"),
    "tpuctl.launch": (8, "the launch flow: the job, its options, the backend contract, the outcome"),
    "tpuctl.launch.process": (9, "the process engine: plans, the supervisor, ports, progress, stacks"),
    "tpuctl.launch.follow": (9, "the job engine: a job submitted to a cluster, followed to its end"),
    "tpuctl.ssh": (10, "the ssh transport: ssh's command line, one command on many hosts, the runtime shipped to hosts"),
    "tpuctl.backends": (11, "one package per backend (local, ssh, kubernetes, vertex); backends never import each other"),
    "tpuctl.cli": (12, "the CLI: parses flags, calls the core, renders"),
    "tpuctl.__main__": (13, "`python -m tpuctl`: the CLI's entry"),
}
# Layers whose subpackages are layers of their own, at the same rank (so none imports another).
APART = {"tpuctl.backends"}
RUNTIME = "tpuctl.runtime"  # shipped alone to hosts and jobs: outside it, a name in a string (python -m), never an import
# Where a module is loaded by a name in a string: the CLI's lazy command table, and the backends as plugins.
LOADS_BY_NAME = ("tpuctl/cli/", "tpuctl/launch/registry.py")
MAX_FOLDER_MODULES = 20


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _module_paths() -> dict[str, Path]:
    return {_module_name(path): path for path in _modules()}


def _imports(module: str, is_package: bool, tree: ast.AST) -> Iterator[str]:
    """The tpuctl modules `module` imports, wherever the import is (module level, a function, TYPE_CHECKING):
    `from tpuctl.x import y` names the module y where there is one, else the package (its __init__)."""
    modules = _module_paths()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "tpuctl")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            if base.split(".")[0] == "tpuctl":
                yield from (name if (name := f"{base}.{alias.name}") in modules else base for alias in node.names)


@functools.cache
def _graph() -> dict[str, set[str]]:
    return {module: set(_imports(module, path.name == "__init__.py", _tree(path))) - {module} for module, path in _module_paths().items()}


def _layer(module: str) -> str:
    return max((name for name in LAYERS if module == name or module.startswith(name + ".")), key=len)


def _unit(module: str) -> str:
    """Where a module's imports are free: its layer, or in a layer of APART the subpackage it is in."""
    layer = _layer(module)
    folder = module if ROOT.joinpath(*module.split(".")).is_dir() else module.rpartition(".")[0]
    below = folder.split(".")[len(layer.split(".")) :]
    return f"{layer}.{below[0]}" if layer in APART and below else layer


def _offense(importer: str, imported: str) -> str | None:
    rank, theirs = LAYERS[_layer(importer)][0], LAYERS[_layer(imported)][0]
    if _layer(imported) == RUNTIME != _layer(importer):
        return f"{importer} -> {imported} (rank {rank} -> {theirs}: only workers load the runtime)"
    if _unit(importer) == _unit(imported) or theirs < rank:
        return None
    return f"{importer} -> {imported} (rank {rank} -> {theirs})"


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import cycle, one at a time: each found is cut at one edge and the search goes on."""
    left = {module: set(imported) for module, imported in graph.items()}
    found = []
    while True:
        try:
            graphlib.TopologicalSorter(left).prepare()
        except graphlib.CycleError as cycle:
            ring: list[str] = cycle.args[1]  # each one imported by the next
            found.append(" -> ".join(reversed(ring)))
            left[ring[1]].discard(ring[0])
        else:
            return found


def _loads_by_name(tree: ast.AST) -> Iterator[int]:
    """Lines that use importlib.import_module, however it was imported or aliased."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name | ast.alias):
            named = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else node.name
            if named == "import_module":
                yield node.lineno


def test_every_package_has_its_layer() -> None:
    """A new package is given its rank, rather than taking the top level's unseen."""
    folders = {_module_name(path.parent / "__init__.py") for path in _modules() if path.parent != PACKAGE}
    unranked = sorted(folder for folder in folders if _layer(folder) == "tpuctl")
    assert not unranked, f"name each package's layer in LAYERS: {unranked}"


def test_imports_go_only_downward() -> None:
    """Issue 22: each package imports only lower layers (lazy and TYPE_CHECKING imports included)."""
    offenses = sorted(o for module, imported in _graph().items() for name in imported if (o := _offense(module, name)))
    assert not offenses, "imports against the layers (LAYERS above):\n" + "\n".join(offenses)


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_backends_are_loaded_by_name_only_through_the_registry() -> None:
    """The one way up: launch/registry.py names each backend's runner module; importlib loads it, as plugins are."""
    from tpuctl.launch.registry import BACKENDS

    strays = [name for name in BACKENDS.values() if not name.startswith("tpuctl.backends.") or name not in _module_paths()]
    assert not strays, f"not a module under tpuctl/backends/: {strays}"
    elsewhere = [
        f"{_rel(path)}:{line}"
        for path in _modules()
        if not _rel(path).startswith(LOADS_BY_NAME)
        for line in _loads_by_name(_tree(path))
    ]
    assert not elsewhere, f"import modules, or load backends through tpuctl/launch/registry.py: {elsewhere}"


# Who may reach into the ssh launch backend: its own modules, and doctor, which finds its hosts as a launch does.
_SSH_BACKEND_USERS = ("tpuctl.backends.ssh", "tpuctl.cli.diagnosis.doctor")


def test_commands_reach_hosts_through_the_ssh_transport() -> None:
    """Issue 35: `tpuctl ssh`, `tpuctl profile` and --cleanup reach their hosts through tpuctl/ssh/, as a launch does;
    the launch backend is loaded by the registry, and only doctor (whose hosts are a launch's) imports it."""
    backend = "tpuctl.backends.ssh"
    offenders = sorted(
        f"{module} -> {name}"
        for module, imported in _graph().items()
        if not module.startswith(_SSH_BACKEND_USERS)
        for name in imported
        if name == backend or name.startswith(backend + ".")
    )
    assert not offenders, f"import the ssh transport (tpuctl.ssh), not the ssh launch backend: {offenders}"


MAX_LOOSE_MODULES = 8


def test_the_top_level_shows_the_architecture() -> None:
    """Issue 35: `tpuctl/` holds packages named by their jobs, each saying what it holds in its __init__'s docstring,
    and at most a handful of loose modules, so a newcomer can tell the TPU facts from process safety from settings."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, f"at most {MAX_LOOSE_MODULES} modules loose in tpuctl/, found {loose}"
    silent = [
        _rel(init.parent) for init in PACKAGE.rglob("__init__.py")
        if len((ast.get_docstring(_tree(init)) or "").split()) < 12
    ]
    assert not silent, f"say in a paragraph what each package holds (its __init__ docstring): {silent}"
    loose_folders = sorted({_rel(p.parent) for p in _modules() if not (p.parent / "__init__.py").exists()})
    assert not loose_folders, f"a folder of modules is a package, with an __init__ that says what it holds: {loose_folders}"


def _one_module_packages(root: Path) -> list[str]:
    """Packages that hold a single module and nothing else (no other module, subpackage or data file beside it):
    a folder made to keep a module out of its parent's count, not a room of its own."""
    found = []
    for init in sorted(root.rglob("__init__.py")):
        folder = init.parent
        held = [p for p in folder.iterdir() if p.name not in ("__init__.py", "__pycache__") and (p.is_file() or (p / "__init__.py").exists())]
        if len(held) <= 1 and all(p.suffix == ".py" for p in held):
            found.append(_rel(folder) if folder.is_relative_to(ROOT) else folder.name)
    return found


def test_no_package_holds_one_module_only() -> None:
    """Issue 47: `cloud/run_nodes/` and `cli/run_vms/` were packages of one module each, made to stay under the folder
    cap; a job too small for a room of its own is a module of the package whose job it is."""
    lonely = _one_module_packages(PACKAGE)
    assert not lonely, f"make each a module of the package whose job it is, or give the package its job's modules: {lonely}"


def test_the_one_module_rule_tells_a_lonely_package_from_a_package_with_data(tmp_path: Path) -> None:
    for name, files in {"lonely": ["__init__.py"], "pair": ["__init__.py", "a.py"], "full": ["__init__.py", "a.py", "b.py"], "shim": ["__init__.py", "shim.c"]}.items():
        for file in files:
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / file).write_text("")
    assert _one_module_packages(tmp_path) == ["lonely", "pair"]


def test_no_folder_holds_more_than_twenty_modules() -> None:
    crowded = {_rel(folder): n for folder in {p.parent for p in _modules()} if (n := len(list(folder.glob("*.py")))) > MAX_FOLDER_MODULES}
    assert not crowded, f"split these folders by job (at most {MAX_FOLDER_MODULES} modules each): {crowded}"


@pytest.mark.parametrize(
    ("module", "source", "offense"),
    [
        ("tpuctl.inputs.errors", "import tpuctl.cli.project.auth", "tpuctl.inputs.errors -> tpuctl.cli.project.auth (rank 0 -> 12)"),
        ("tpuctl.cloud.auth.iam", "def f():\n    from tpuctl.runs import folder", "tpuctl.cloud.auth.iam -> tpuctl.runs.folder (rank 4 -> 4)"),
        (
            "tpuctl.launch.console.logs",
            "if TYPE_CHECKING:\n    from tpuctl.launch.job import Job",
            "tpuctl.launch.console.logs -> tpuctl.launch.job (rank 7 -> 8)",
        ),
        ("tpuctl.launch.job", "from ..backends.ssh import runner", "tpuctl.launch.job -> tpuctl.backends.ssh.runner (rank 8 -> 11)"),
        ("tpuctl.backends.vertex.runner", "from tpuctl.backends import ssh", "tpuctl.backends.vertex.runner -> tpuctl.backends.ssh (rank 11 -> 11)"),
        ("tpuctl.ssh.fanout", "from tpuctl.backends.ssh import session", "tpuctl.ssh.fanout -> tpuctl.backends.ssh.session (rank 10 -> 11)"),
        (
            "tpuctl.launch.job",
            "from tpuctl.runtime import strategies",
            "tpuctl.launch.job -> tpuctl.runtime.strategies (rank 8 -> 6: only workers load the runtime)",
        ),
        ("tpuctl.launch.job", "from tpuctl.launch import runner\nfrom tpuctl.launch.console import logs\nimport tpuctl.inputs.errors", None),
        ("tpuctl.backends.ssh.runner", "from tpuctl.backends.ssh import agent\nfrom . import wire", None),
    ],
)
def test_the_layer_walk_sees_every_way_to_import(module: str, source: str, offense: str | None) -> None:
    """The walk above must not pass by a spelling it was not written for, nor refuse what the layers allow."""
    found = [o for name in _imports(module, False, ast.parse(source)) if (o := _offense(module, name))]
    assert found == ([offense] if offense else [])


def test_the_cycle_search_finds_every_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}, "f": {"a"}}
    assert sorted(len(c.split(" -> ")) for c in _cycles(graph)) == [3, 4]


@pytest.mark.parametrize(
    "source",
    ["import importlib\nimportlib.import_module('x')", "from importlib import import_module", "import importlib as il\nil.import_module('x')"],
)
def test_the_load_walk_sees_every_spelling(source: str) -> None:
    assert list(_loads_by_name(ast.parse(source)))


# ---- endings: one vocabulary (issue 35) ---------------------------------------------------------

ENDINGS_HOME = "tpuctl/endings.py"
# The words of the run states and of the ends they were spelt with before (the outcome's `interrupted`, a job's `cancelled`).
_END_WORDS = {"running", "succeeded", "failed", "preempted", "stopped", "lost", "interrupted", "cancelled"}
_EXITS = {"exit", "SystemExit", "sys.exit", "_exit", "os._exit"}
# Modules whose end words the walk of function bodies passes by, and why.
_SPEAKS_FOR_ITSELF = {
    "tpuctl/doctor/probe.py": "runs alone in the workers' interpreter (python -c SOURCE): the standard library only, no tpuctl to import",
}
# A string that an exit status or a signal number is formatted or added onto: "exit status {code}", "signal " + str(n).
_EXIT_WORDING = re.compile(r"(?:\bexit status|\bsignal) (?:$|%d|\{)")


def _words(node: ast.AST | None) -> set[str]:
    """The end words a value spells: one string, or those in a tuple, list or set."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in _END_WORDS}


def _is_130(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 130


def _ending_vocabularies(name: str, tree: ast.AST) -> Iterator[str]:
    """Where a module spells ends of its own: run states (two end words or more given names in one module or class
    body, as `RUNNING, SUCCEEDED = "running", "succeeded"` or an enum's members were), the exit status 130 as a
    constant (a name, a mapping's value, exit_code=, an exit call), or a `state_of`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "state_of":
            yield f"{name}:{node.lineno} def state_of"
        elif isinstance(node, ast.Module | ast.ClassDef):
            assigned = [a for a in node.body if isinstance(a, ast.Assign | ast.AnnAssign)]
            named = set().union(*(_words(a.value) for a in assigned))
            if len(named) >= 2:
                yield f"{name}:{assigned[0].lineno} run states {sorted(named)}"
        if isinstance(node, ast.Assign | ast.AnnAssign) and (_is_130(node.value) or (isinstance(node.value, ast.Tuple) and any(map(_is_130, node.value.elts)))):
            yield f"{name}:{node.lineno} 130"
        elif isinstance(node, ast.Dict) and any(_is_130(v) for v in node.values):
            yield f"{name}:{node.lineno} 130 in a mapping"
        elif isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if (called in _EXITS and any(_is_130(a) for a in node.args)) or any(k.arg == "exit_code" and _is_130(k.value) for k in node.keywords):
                yield f"{name}:{node.lineno} {called}(130)"
    if name not in _SPEAKS_FOR_ITSELF:
        yield from _end_words_spoken(name, tree)


def _spelt(node: ast.AST | None) -> set[str]:
    """The end words an expression yields as it is: a literal or a collection of them, either branch of an `if` expression."""
    if isinstance(node, ast.IfExp):
        return _spelt(node.body) | _spelt(node.orelse)
    return _words(node)


def _own_words(tree: ast.AST) -> set[str]:
    """End words of a module's own vocabulary: a constant collection of it that holds other words too, as a
    rehearsal's `VERDICTS = ("ok", "warning", "failed", "not checked")` does; there `failed` is a verdict."""
    own: set[str] = set()
    for node in tree.body if isinstance(tree, ast.Module) else []:
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Tuple | ast.List | ast.Set):
            texts = {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            own |= texts & _END_WORDS if texts - _END_WORDS else set()
    return own


def _compared(node: ast.Compare) -> set[str]:
    """The end words a value is compared with: either side of == or !=; the collection after `in` (a word before it
    is a key looked up, as Kubernetes' `"running" in state`)."""
    found: set[str] = set()
    for left, op, right in zip([node.left, *node.comparators[:-1]], node.ops, node.comparators, strict=True):
        if isinstance(op, ast.Eq | ast.NotEq):
            found |= _spelt(left) | _spelt(right)
        elif isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Tuple | ast.List | ast.Set):
            found |= _words(right)
    return found


def _end_words_spoken(name: str, tree: ast.AST) -> Iterator[str]:
    """Where code speaks an end's word for itself instead of naming endings' values: an end word as a mapping's value,
    a function's result, or what a value is compared with; an exit status or a signal formatted into words
    (f"exit status {code}", "signal " + str(n)), which `endings.exit_words` says once."""
    own = _own_words(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            spoken, where = set().union(*(_spelt(v) for v in node.values)), "in a mapping"
        elif isinstance(node, ast.Return):
            spoken, where = _spelt(node.value), "returned"
        elif isinstance(node, ast.Compare):
            spoken, where = _compared(node), "compared with"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _EXIT_WORDING.search(node.value):
            spoken, where = {node.value.strip()}, "words an exit"
        else:
            continue
        if spoken - own:
            yield f"{name}:{node.lineno} {where} {sorted(spoken - own)}"


def test_ends_are_spelt_in_one_place() -> None:
    """Issue 35: how a run, an attempt or a worker ended (its kinds, the run states, INTERRUPTED = 130, `state_of`)
    is defined in tpuctl/endings.py alone; everyone else names its values. Issue 47: function bodies too, where an
    end word was returned, compared or kept in a mapping, and an exit status or a signal was worded in 16 places."""
    found = [hit for path in _modules() if _rel(path) != ENDINGS_HOME for hit in _ending_vocabularies(_rel(path), _tree(path))]
    assert not found, f"use tpuctl/endings.py: {found}"


@pytest.mark.parametrize(
    "source",
    [
        'RUNNING, SUCCEEDED = "running", "succeeded"',
        'STATES = ("succeeded", "failed")',
        'FAILED_STATE = "failed"\nSTOPPED = "stopped"',
        "class End(Enum):\n    SUCCEEDED = 'succeeded'\n    CANCELLED = 'cancelled'",
        "EXIT_INTERRUPTED = 130",
        "TERMINAL = {'JOB_STATE_CANCELLED': 130}",
        "import sys\nsys.exit(130)",
        "raise SystemExit(130)",
        "raise TpuctlError('x', exit_code=130)",
        "def state_of(code):\n    return code",
        'def job_result(job):\n    return "succeeded" if job.ok else "failed"',
        'def detach(pid):\n    echo({"pid": pid, "state": "running"})',
        'if result == "succeeded":\n    pass',
        'ended = state in ("succeeded", "stopped")',
        'VERDICTS = ("ok", "failed")\nfine = state != "succeeded"',  # a vocabulary of its own holds failed, not succeeded
        'why = f"exit status {code}"',
        'why = f"ssh -G exit status {done.returncode}"',
        'why = "exit status " + str(code)',
        'why = "exit status %d" % code',
        'why = f"killed by signal {-code}"',
        "why = f'signal {-status}' if status < 0 else 'ok'",
    ],
)
def test_the_endings_walk_sees_every_spelling(source: str) -> None:
    assert list(_ending_vocabularies("tpuctl/example.py", ast.parse(source)))


def test_the_endings_walk_leaves_other_words_alone() -> None:
    """A verdict list that holds `failed` once and a verdict compared with it, a width of 130 columns in a call, a
    message, a mapping's key, Kubernetes' container state looked up by its key, prose about an exit status."""
    source = (
        'VERDICTS = ("ok", "warning", "failed", "not checked")\nshow(width=130)\nsay("the job failed")\nMARK = {"failed": "FAIL"}\n'
        'def problems(checks):\n    return [c for c in checks if c["verdict"] == "failed"]\n'
        'def see(state, end):\n    if "running" in state:\n        send(end, **{"failed": True})\n'
        'HELP = "List your runs: state, exit status, logs."\nNOTE = f"it exits with {code}, the exit status of its command"'
    )
    assert not list(_ending_vocabularies("tpuctl/example.py", ast.parse(source)))

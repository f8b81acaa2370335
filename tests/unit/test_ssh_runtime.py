"""The runtime an ssh launch ships to its hosts (issue 28, item 5): what is in it, and the host's cache.

What is shipped is checked against the runtime's own imports (an AST trace of every import,
function-level ones included, and a real import of each module from a folder holding only the
shipment). The host side is the shipped source itself (agent and installer) run as a host runs
it, `python -S` with no tpuctl importable, against a cache folder made hostile in the ways a
real one can be. tests/integration/test_launch_ssh.py does the same over real sshd.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tpuctl.backends.ssh import session, wire
from tpuctl.ssh import remote_source
from tpuctl.ssh import shipment as runtime_files

SHIPMENT = runtime_files.shipment()
DIGEST = SHIPMENT.digest


def _imports(tree: ast.Module, package: str) -> Iterator[str]:
    """Every module an import names (and each imported name, which may be a module), outside `if TYPE_CHECKING:`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []  # a type only: never imported at run time
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _traced() -> set[str]:
    """tpuctl's files the runtime reaches, starting from every module in tpuctl/runtime/."""
    runtime = ROOT / "tpuctl" / "runtime"  # its subpackages too: one run as `python -m` is imported by none of it
    todo = [".".join(("tpuctl", "runtime", *path.relative_to(runtime).with_suffix("").parts)) for path in runtime.rglob("*.py")]
    found: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in found or name.split(".")[0] != "tpuctl" or (path := _module_file(name)) is None:
            continue
        found[name] = path
        parents = name.split(".")
        todo += [".".join(parents[:i]) for i in range(1, len(parents))]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo += _imports(ast.parse(path.read_bytes()), package)
    return {path.relative_to(ROOT).as_posix() for path in found.values()}


def test_what_is_shipped_is_exactly_what_the_runtime_imports() -> None:
    shipped = [name for name, _ in SHIPMENT.files]
    assert _traced() == set(shipped), "update RUNTIME_IMPORTS in tpuctl/launch/runtime_files.py"
    assert shipped == sorted(shipped)
    assert "tpuctl/runtime/__main__.py" in shipped and "tpuctl/runtime/bundle.py" in shipped
    assert not any(name.startswith(("tpuctl/cli/", "tpuctl/launch/", "tpuctl/cloud/", "tpuctl/watch/")) for name in shipped)


_IMPORT_ALL = """import importlib, json, sys
loaded = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
        loaded[name] = "ok"
    except ModuleNotFoundError as err:
        loaded[name] = "missing " + str(err.name)
files = {n: getattr(m, "__file__", None) for n, m in sys.modules.items()}
print(json.dumps({"loaded": loaded, "files": files}))
"""


def test_the_shipment_imports_alone_without_the_cli_dependencies(tmp_path: Path) -> None:
    """Each shipped module imported by a Python that has only the shipment and its standard library
    (`-S`: no site-packages, so no click, rich, google, nor TensorFlow)."""
    import json

    for name, data in SHIPMENT.files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    modules = [name.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for name, _ in SHIPMENT.files]
    modules = [name for name in modules if not name.endswith(".__main__")]  # each runs its program when imported
    done = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); exec(sys.argv[1])", _IMPORT_ALL, *modules],
        capture_output=True, text=True, check=True, cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout=60,
    )  # fmt: skip
    seen = json.loads(done.stdout)
    # Only TensorFlow (and what comes with it) may be missing: the host's own.
    assert {result for result in seen["loaded"].values()} <= {"ok", "missing tensorflow"}, seen["loaded"]
    assert seen["loaded"]["tpuctl.runtime.bootstrap"] == "ok"
    ours = {name: path for name, path in seen["files"].items() if name.split(".")[0] == "tpuctl"}
    assert all(path and path.startswith(str(tmp_path)) for path in ours.values()), ours
    assert not {name.split(".")[0] for name in seen["files"]} & {"click", "rich", "google", "jinja2", "requests", "platformdirs"}


# The host side: the shipped agent's hello and the shipped installer, run as a host runs them.


def _env(cache: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(cache.parent), "XDG_CACHE_HOME": str(cache)}


def hello(cache: Path) -> str:
    """What the first agent on a host reports about its runtime copy ("" usable), or `error: ...`."""
    request = [("nonce", "N0"), ("cwd", str(cache.parent)), ("runtime", DIGEST), ("check_runtime", "1")]
    done = subprocess.run(
        [sys.executable, "-S", "-c", session.AGENT_SOURCE, wire.pack(request)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, cwd=cache.parent, env=_env(cache),
    )  # fmt: skip
    nonce, kind, packed = done.stderr.split()
    assert nonce == "N0"
    if kind == "error":
        return "error: " + session.message(packed)
    assert kind == "hello" and done.returncode == 0
    return session.Hello.parse(packed).runtime


def install(cache: Path, payload: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", "-c", remote_source.install_source(), DIGEST],
        input=SHIPMENT.payload if payload is None else payload, capture_output=True, timeout=30, cwd=cache.parent, env=_env(cache),
    )  # type: ignore[call-overload, no-any-return]  # fmt: skip


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """An XDG_CACHE_HOME that does not exist yet, in a home that does, as on a fresh host."""
    (tmp_path / "home").mkdir()
    return tmp_path / "home" / ".cache"


def _copy(cache: Path) -> Path:
    return cache / "tpuctl" / "runtime" / DIGEST


def _installed(cache: Path) -> Path:
    assert hello(cache) == "missing"
    done = install(cache)
    assert done.returncode == 0, done.stderr
    assert hello(cache) == ""
    return _copy(cache)


def test_a_fresh_host_gets_a_private_checked_copy(cache: Path) -> None:
    copy = _installed(cache)
    for folder in (cache, cache / "tpuctl", cache / "tpuctl" / "runtime", copy, copy / "tpuctl" / "runtime"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()} == {n for n, _ in SHIPMENT.files} | {"manifest.txt"}
    assert all((copy / name).read_bytes() == data and (copy / name).stat().st_mode & 0o777 == 0o600 for name, data in SHIPMENT.files)
    assert [p.name for p in copy.parent.iterdir()] == [DIGEST]  # no temporary folder left behind
    # Python's own bytecode beside the copy does not make it a different runtime.
    subprocess.run([sys.executable, "-c", "import tpuctl.inputs.errors"], cwd=copy, check=True, env={"PATH": os.environ["PATH"]})
    assert list((copy / "tpuctl" / "__pycache__").iterdir())
    assert hello(cache) == ""
    assert install(cache).returncode == 0 and hello(cache) == ""  # a second install of a good copy changes nothing


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda copy: (copy / "tpuctl" / "inputs" / "errors.py").write_text("raise SystemExit(0)\n"), "tpuctl/inputs/errors.py differs from what was shipped"),
        (lambda copy: (copy / "tpuctl" / "runtime" / "sitecustomize.py").write_text(""), "tpuctl/runtime/sitecustomize.py was not shipped"),
        (lambda copy: (copy / "manifest.txt").write_text(""), "its manifest.txt does not match"),
        (lambda copy: (copy / "tpuctl" / "inputs" / "errors.py").unlink(), "tpuctl/inputs/errors.py differs from what was shipped"),
        (lambda copy: copy.chmod(0o755), "it is open to other users (mode 0o755)"),
    ],
    ids=["changed file", "extra module", "manifest", "missing file", "open mode"],
)
def test_a_damaged_copy_is_replaced_whole(cache: Path, damage: object, said: str) -> None:
    copy = _installed(cache)
    damage(copy)  # type: ignore[operator]
    assert hello(cache) == said
    done = install(cache)
    assert done.returncode == 0, done.stderr
    assert hello(cache) == ""
    assert (copy / "tpuctl" / "inputs" / "errors.py").read_bytes() == dict(SHIPMENT.files)["tpuctl/inputs/errors.py"]
    assert [p.name for p in copy.parent.iterdir()] == [DIGEST]


def test_a_symlink_in_place_of_the_copy_is_replaced_and_its_target_left_alone(cache: Path, tmp_path: Path) -> None:
    copy = _installed(cache)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(copy, elsewhere)  # a good copy, even: still not one tpuctl made here
    copy.symlink_to(elsewhere, target_is_directory=True)
    assert hello(cache) == "it is not a folder (a symbolic link or a file)"
    assert install(cache).returncode == 0 and hello(cache) == ""
    assert not copy.is_symlink() and (elsewhere / "manifest.txt").is_file()


def test_someone_elses_copy_or_an_open_cache_folder_is_refused(cache: Path) -> None:
    copy = _installed(cache)
    os.chown(copy, 65534, 65534)
    assert hello(cache) == f"error: {copy} belongs to another user (uid 65534); tpuctl neither uses nor replaces it there (remove it)"
    done = install(cache)
    assert (done.returncode, done.stderr.decode().strip()) == (3, f"{copy} belongs to another user (uid 65534)")
    assert copy.stat().st_uid == 65534
    os.chown(copy, os.getuid(), os.getgid())
    (cache / "tpuctl" / "runtime").chmod(0o777)
    root = cache / "tpuctl" / "runtime"
    assert hello(cache) == f"error: {root} is writable by other users (mode 0o777); tpuctl neither uses nor replaces it there (remove it)"
    assert install(cache).returncode == 3
    (cache / "tpuctl" / "runtime").chmod(0o700)
    (cache / "tpuctl").rename(cache / "real")
    (cache / "tpuctl").symlink_to(cache / "real")
    assert hello(cache).startswith(f"error: {cache / 'tpuctl'} is not a folder")


def test_a_damaged_shipment_leaves_the_cache_as_it_was(cache: Path) -> None:
    payload = zlib.decompress(SHIPMENT.payload)
    for bad in (b"not zlib", zlib.compress(payload[:-10]), zlib.compress(payload + b"x"), zlib.compress(payload.replace(b"tpuctl", b"tpuctX", 1))):
        done = install(cache, bad)
        assert done.returncode == 3 and len(done.stderr.decode().splitlines()) == 1, done.stderr
        assert hello(cache) == "missing"
        assert not list((cache / "tpuctl" / "runtime").iterdir())  # no half copy, no temporary folder

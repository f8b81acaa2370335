"""What a Vertex launch ships: the script's folder less its ignore file, no link out of it, within limits,
as a source distribution pip installs and runs (tpuctl/backends/vertex/staging.py, tpuctl/runtime/bundle.py)."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.standins.tiny_wheels import make_wheel
from tpuctl.backends.vertex import staging
from tpuctl.inputs.errors import TpuctlError


def _names(bundle: staging.Bundle) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(bundle.data)) as tar:
        return {m.name.removeprefix(f"{staging.DIST}/{staging.PACKAGE}/") for m in tar.getmembers() if f"/{staging.PACKAGE}/" in m.name}


@pytest.fixture
def app(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text("import sys\nprint('trained', sys.argv[1:], open('data/vocab.txt').read().strip())\n")
    (root / "data" / "vocab.txt").write_text("a b c\n")
    (root / "model.ckpt").write_bytes(b"x" * 10)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_the_ignore_file_and_the_usual_caches_are_left_out(app: Path) -> None:
    (app / ".tpuctlignore").write_text("# checkpoints stay home\n*.ckpt\n/data/big/\n")
    (app / ".gitignore").write_text("data/\n")  # .tpuctlignore wins over .gitignore
    (app / "data" / "big").mkdir()
    (app / "data" / "big" / "shard-0").write_bytes(b"0")
    bundle = staging.build(str(app / "train.py"))
    assert _names(bundle) == {"__init__.py", "train.py", "data/vocab.txt", ".tpuctlignore", ".gitignore"}
    assert bundle.files == 4  # the generated __init__.py is not the folder's


def test_gitignore_applies_where_there_is_no_tpuctlignore(app: Path) -> None:
    (app / ".gitignore").write_text("*.ckpt\n")
    assert "model.ckpt" not in _names(staging.build(str(app / "train.py")))


def test_links_out_of_the_folder_are_left_out_and_named(app: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY")
    (app / "key").symlink_to(secret)
    (app / "loop").symlink_to(app, target_is_directory=True)
    (app / "vocab").symlink_to(app / "data" / "vocab.txt")  # inside: followed
    os.mkfifo(app / "fifo")
    bundle = staging.build(str(app / "train.py"))
    assert set(bundle.skipped_links) == {"key", "loop"}
    assert "vocab" in _names(bundle) and "key" not in _names(bundle) and "fifo" not in _names(bundle)
    assert b"PRIVATE KEY" not in bundle.data and b"PRIVATE KEY" not in tarfile.open(fileobj=io.BytesIO(bundle.data)).extractfile(
        f"{staging.DIST}/{staging.PACKAGE}/vocab"
    ).read()  # type: ignore[union-attr]


def test_an_ignored_script_and_an_oversized_folder_are_one_line(app: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (app / ".tpuctlignore").write_text("train.py\n")
    with pytest.raises(TpuctlError, match="is left out of the bundle"):
        staging.build(str(app / "train.py"))
    (app / ".tpuctlignore").write_text("")
    monkeypatch.setattr(staging, "MAX_BYTES", 8)
    with pytest.raises(TpuctlError, match=r"holds 97 bytes to ship, more than 8 bytes \(largest: train.py \(81 bytes\), model.ckpt \(10 bytes\)"):
        staging.build(str(app / "train.py"))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=8), st.text(max_size=40), st.booleans())
def test_any_ignore_pattern_gives_a_verdict(patterns: list[str], path: str, is_dir: bool) -> None:
    assert staging.ignored(path, is_dir, patterns) in (True, False)


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="pip needs setuptools to build the bundle without network")
def test_pip_installs_the_bundle_and_it_runs_the_script_in_its_folder(app: Path, tmp_path: Path) -> None:
    """... with the launch's --requirements installed with it (its install_requires), as Vertex's pip install of the
    bundle does before it runs the script: here from a folder of wheels instead of an index."""
    (app / "train.py").write_text("import sys, tinydep\nprint('trained', sys.argv[1:], open('data/vocab.txt').read().strip(), tinydep.VALUE)\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "tinydep", "1.0", {"tinydep.py": "VALUE = 'with tinydep 1.0'\n"})
    make_wheel(wheels, "tinydep", "2.0", {"tinydep.py": "VALUE = 'with tinydep 2.0'\n"})
    bundle = staging.build(str(app / "train.py"), ("tinydep>=1.0,<2",))
    archive = tmp_path / staging.FILE_NAME
    archive.write_bytes(bundle.data)
    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-index", "--find-links", str(wheels), "--target", str(target), str(archive)],
        capture_output=True, text=True, timeout=180,
    )
    assert installed.returncode == 0, installed.stderr
    # As Vertex runs it: `python -m tpuctl.runtime.bundle SCRIPT ARGS`, from anywhere, with only the bundle on the path.
    env = {**os.environ, "PYTHONPATH": str(target), "TPUCTL_STRATEGY": "none"}
    ran = subprocess.run([sys.executable, "-m", "tpuctl.runtime.bundle", "train.py", "--epochs", "1"], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "trained ['--epochs', '1'] a b c with tinydep 1.0\n"
    assert (target / "tpuctl" / "runtime" / "bundle.py").is_file()  # the runtime travels with the script

"""`tpuctl new`: the templates listed, one written into a new or empty folder, everything else refused in one line.

The last test builds the wheel once and runs `tpuctl new` from it, away from the checkout: the templates
live in the repository's top-level templates/, outside the package, and must still reach `pip install` users.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tpuctl import scaffold
from tpuctl.cli import main
from tpuctl.inputs import requirements
from tpuctl.launch import framework

EXPECTED = {"keras-fit", "custom-loop", "tpu-strategy", "parameter-server", "keras-jax"}


def run(*args: str) -> tuple[int, str, str]:
    """`tpuctl ARGS` through main(), as the command line runs it: (exit status, stdout, stderr)."""
    code = 0
    with CliRunner().isolation() as (out, err, _):
        try:
            main(list(args))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        sys.stdout.flush()
    return code, out.getvalue().decode(), err.getvalue().decode()


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def test_list_names_every_template_with_a_line() -> None:
    code, out, _ = run("new", "--list")
    assert code == 0
    rows = out.strip().splitlines()[1:]
    assert {row.split()[0] for row in rows} >= EXPECTED
    assert all(len(row.split(None, 1)) == 2 for row in rows), rows


def test_list_json_is_a_list_of_names_and_descriptions() -> None:
    for flag in ("--json", "--format=json"):
        code, out, _ = run("new", "--list", flag)
        assert code == 0
        data = json.loads(out)
        assert {t["name"] for t in data} >= EXPECTED
        assert all(set(t) == {"name", "description"} and t["description"] for t in data)


def test_every_template_has_a_readme_that_says_how_to_run_it() -> None:
    for template in scaffold.available():
        readme = (template.path / "README.md").read_text()
        assert template.run in readme, template.name
        assert template.run.startswith("tpuctl launch train.py "), template.run
        assert (template.path / "train.py").is_file()


def test_new_writes_the_template_into_a_new_folder(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    code, out, _ = run("new", "custom-loop", str(target))
    assert code == 0, out
    source = scaffold.find("custom-loop").path
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "requirements.txt", "train.py"]  # template.toml stays behind
    assert (target / "train.py").read_bytes() == (source / "train.py").read_bytes()
    assert "README.md" in out and "tpuctl launch train.py" in out


def test_the_keras_jax_template_is_a_jax_run_with_its_requirements(tmp_path: Path) -> None:
    """Issue 49: what `tpuctl new keras-jax` writes runs as Keras 3 on JAX under --framework auto (its first line sets
    the backend), and its requirements name keras and jax, never TensorFlow, with jax[tpu] said for a TPU VM."""
    code, out, _ = run("new", "keras-jax", str(tmp_path / "kj"), "--json")
    assert code == 0 and sorted(json.loads(out)["files"]) == ["README.md", "requirements.txt", "train.py"]
    script = str(tmp_path / "kj" / "train.py")
    chosen, why = framework.choose("auto", script, ())
    assert chosen == "jax" and why is not None and why.endswith("sets KERAS_BACKEND=jax")
    assert framework.read(script).line_of("tensorflow") is None
    listed = requirements.read_requirements(str(tmp_path / "kj" / "requirements.txt"))  # as --requirements reads it
    assert [line.name for line in listed.lines] == ["keras", "jax"]
    assert "#   jax[tpu]" in (tmp_path / "kj" / "requirements.txt").read_text().splitlines()


def test_new_into_an_empty_folder_with_json(tmp_path: Path) -> None:
    code, out, _ = run("new", "keras-fit", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["template"] == "keras-fit" and sorted(data["files"]) == ["README.md", "requirements.txt", "train.py"]
    assert data["run"] == scaffold.find("keras-fit").run


def test_a_non_empty_folder_or_a_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("keep me")
    code, _, err = run("new", "keras-fit", str(tmp_path))
    assert code == 2
    assert "is not empty" in one_error_line(err)
    assert [p.name for p in tmp_path.iterdir()] == ["mine.py"] and (tmp_path / "mine.py").read_text() == "keep me"
    code, _, err = run("new", "keras-fit", str(tmp_path / "mine.py"))
    assert code == 2 and "is not a folder" in one_error_line(err)
    assert (tmp_path / "mine.py").read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root (CI and the dev machines run as root)")
def test_an_empty_folder_another_user_owns_or_others_can_write_is_refused(tmp_path: Path) -> None:
    """Whoever owns or can write it could plant a symlinked subfolder where a template file goes (tpuctl
    writes as root here); the rule of tpuctl's own folders (private_files.check_private) holds for it too."""
    theirs, open_to_all, sticky = tmp_path / "theirs", tmp_path / "open", tmp_path / "sticky"
    for folder in (theirs, open_to_all, sticky):
        folder.mkdir()
    os.chown(theirs, 65534, 65534)  # nobody's
    os.chmod(open_to_all, 0o777)  # no sticky bit: anyone can rename or replace what lands there
    os.chmod(sticky, 0o1777)  # sticky: still anyone can create data/ in it first
    for folder, says in ((theirs, "belongs to uid 65534, not to this user (0)"), (open_to_all, "mode 0777"), (sticky, "mode 1777")):
        code, out, err = run("new", "keras-fit", str(folder))
        assert code == 2, out + err
        line = one_error_line(err)
        assert says in line and "tpuctl writes only into folders of yours that others cannot write" in line
        assert "(name a new folder, or an empty one of yours (chmod go-w); nothing was written)" in line
        assert list(folder.iterdir()) == []
    os.chmod(open_to_all, 0o755)  # the user's own folder, closed to others: written
    assert run("new", "keras-fit", str(open_to_all))[0] == 0
    assert sorted(p.name for p in open_to_all.iterdir()) == ["README.md", "requirements.txt", "train.py"]


def test_an_unknown_name_names_the_known_ones(tmp_path: Path) -> None:
    code, _, err = run("new", "keras-fitt", str(tmp_path / "x"))
    line = one_error_line(err)
    assert code == 2 and "no template 'keras-fitt'" in line
    assert all(name in line for name in EXPECTED)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["new"], "needs NAME and DIR"),
        (["new", "keras-fit"], "needs NAME and DIR"),
        (["new", "--list", "keras-fit"], "--list takes no NAME"),
        (["new", "../keras-fit", "DIR"], "no template '../keras-fit'"),
        (["new", "_build.py", "DIR"], "no template"),
        (["new", "\x1b[2Jx", "DIR"], "x1b[2Jx' (one of: "),
        (["new", "keras-fit", "a\nb"], "control characters"),
        (["new", "keras-fit", "\x1b]0;t\x07"], "control characters"),
        (["new", "keras-fit", "LOOP"], "looping symlink"),
        (["new", "keras-fit", "/dev/null"], "is not a folder"),
        (["new", "keras-fit", ""], "empty"),
    ],
)
def test_hostile_input_is_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    places = {"DIR": str(tmp_path / "new"), "LOOP": str(tmp_path / "loop")}
    code, out, err = run(*(places.get(a, a) for a in args))
    assert code == 2, out + err
    assert says in one_error_line(err) and "\x1b" not in err
    assert not (tmp_path / "new").exists()


def test_the_wheel_carries_the_templates_and_new_finds_them_there(tmp_path: Path) -> None:
    # Built from a copy of the sources, so the checkout gets no build/ folder; without build isolation (offline).
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("tpuctl", "templates"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
        check=True, capture_output=True, timeout=120,
    )
    (wheel,) = (tmp_path / "dist").glob("tpuctl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for template in EXPECTED:
        for file in ("train.py", "README.md", "template.toml"):
            assert f"tpuctl/script_templates/{template}/{file}" in names, (template, file)
    assert not [n for n in names if n.endswith("/_build.py") or "__pycache__" in n or n.startswith("templates/")]
    # Installed as a wheel installs (unpacked into site-packages' place), away from the checkout.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    script = "import sys; from tpuctl import scaffold; print(scaffold.root()); from tpuctl.cli import main; sys.exit(main(sys.argv[1:]))"
    listed = subprocess.run([sys.executable, "-c", script, "new", "--list", "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    where, _, rest = listed.stdout.partition("\n")
    assert Path(where) == site / "tpuctl" / "script_templates"
    assert {t["name"] for t in json.loads(rest)} >= EXPECTED
    written = subprocess.run([sys.executable, "-c", script, "new", "tpu-strategy", "out"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "out" / "train.py").read_bytes() == (ROOT / "templates" / "tpu-strategy" / "train.py").read_bytes()

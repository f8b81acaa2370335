"""A TPU VM tpuctl made has nothing of this machine's (issue 48): its workers run the VM's own python3 and the script's
folder goes with them, and every check that needs no VM refuses the launch before anything reaches the TPU API.

The launches run in this process through the real entry point against the Google stand-in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.standins.cli_calls import in_process
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.backends.ssh.fresh import vm_workdir
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value

ZONE = "us-central2-b"
NEW_TPU = ("--new-tpu", "v4-16", "--zone", ZONE)


@pytest.fixture
def cloud(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GoogleStandin]:
    """The stand-in with v4 in one zone, a node of the user's (`mine-0000`) and one a run of tpuctl's kept (`kept-0000`,
    with its label); tpuctl pointed at it."""
    with GoogleStandin(project="tpuctl-test", seed=0) as g:
        g.set_zones([ZONE], ["v4-8", "v4-16"])
        g.create_delay_s = 0.05
        g.add_ready_nodes(ZONE, 1, prefix="mine", accelerator_type="v4-16")
        (kept,) = g.add_ready_nodes(ZONE, 1, prefix="kept", accelerator_type="v4-16")
        with g._lock:
            g.tpu.nodes[(ZONE, kept)]["labels"] = {LABEL_KEY: label_value("20261201-090000-train-beef")}
        for name, value in {**standin_env(g, home), "TPUCTL_ZONE": ZONE}.items():  # HOME: home/home
            monkeypatch.setenv(name, value)
        yield g


def _remote(*args: str) -> tuple[dict[str, object], list[dict[str, object]], str]:
    """A dry run's hosts' side (--json), its workers, and its text."""
    shown = in_process("launch", "train.py", *args, "--dry-run", "--json")
    assert shown.code == 0, shown.err
    text = in_process("launch", "train.py", *args, "--dry-run")
    assert text.code == 0, text.err
    plan = json.loads(shown.out)
    return plan["remote"], plan["workers"], text.out


@pytest.mark.parametrize("where", [NEW_TPU, ("--tpu", "kept-0000"), ("--tpu", "made")], ids=["new-tpu", "tpu-a-run-kept", "tpu-tpuctl-created"])
def test_a_vm_tpuctl_made_runs_its_own_python3_and_gets_the_script_s_folder(cloud: GoogleStandin, home: Path, where: tuple[str, ...]) -> None:
    if "made" in where:  # a VM of `tpuctl create`'s, which saves its spec
        created = in_process("create", "made", "--zone", ZONE, "--accelerator-type", "v4-16")
        assert created.code == 0, created.err
    posts = cloud.count("POST", "/nodes")
    remote, workers, text = _remote(*where, "--model-dir", "runs/m")
    assert remote["python"] == "python3" and {w["argv"][0] for w in workers} == {"python3"}  # type: ignore[index]
    sync = remote["sync"]
    assert isinstance(sync, dict) and sync["source"] == f"{home / 'work'}/" and [path for path, _ in sync["files"]] == ["train.py"]
    assert remote["warnings"] == [] and len(remote["chosen"]) == 3  # type: ignore[arg-type]
    # Not this machine's path, which the VM's user may not be able to make: a folder under that user's home.
    vm_dir = f"tpuctl/work/work-{hashlib.sha256(str(home / 'work').encode()).hexdigest()[:8]}"
    assert remote["workdir"] == f"~/{vm_dir}" and "remote: workers run in " + f"~/{vm_dir} with python3" in text
    assert "default: python3 (the VM's own Python, for " in text and "default: --sync (" in text and "--no-sync" in text
    assert f"default: the workers' directory ~/{vm_dir} (in the VM user's home: this machine's {home / 'work'} need not exist there" in text
    assert f"sync: {home / 'work'}/ -> each host's ~/{vm_dir}/" in text and sync["command"].endswith(f" HOST:{vm_dir}/"), sync  # rsync: under home
    assert {w["env"]["TPUCTL_MODEL_DIR"] for w in workers} == {"runs/m"}  # type: ignore[index]  # as the workers, in that folder, resolve it
    for line in text.splitlines():
        if line.startswith("ssh to "):
            assert shlex.split(shlex.split(line)[-1])[:2] == ["exec", "python3"]
    assert cloud.count("POST", "/nodes") == posts  # a dry run makes nothing


def test_two_projects_of_one_name_get_folders_of_their_own_and_a_name_the_shell_takes() -> None:
    one, other = vm_workdir("/Users/me/proj"), vm_workdir("/Users/me/old/proj")
    assert one.startswith("tpuctl/work/proj-") and other.startswith("tpuctl/work/proj-") and one != other
    assert one == vm_workdir("/Users/me/proj/") and len(one) == len("tpuctl/work/proj-") + 8  # the same project, the same folder
    assert vm_workdir("/home/me/my proj; rm -rf ~").split("/")[-1].startswith("my_proj__rm_-rf__-")
    assert vm_workdir("/").startswith("tpuctl/work/root-")


def test_a_vm_of_the_user_s_keeps_this_machine_s_defaults_and_their_warnings(cloud: GoogleStandin, home: Path) -> None:
    """--tpu on a VM without a run's label: the user's own, set up as they chose (a venv at this machine's path, say)."""
    remote, _, text = _remote("--tpu", "mine-0000")
    assert remote["python"] == sys.executable and remote["sync"] is None and remote["chosen"] == []
    assert remote["workdir"] == str(home / "work")  # this directory's path, as on hosts the user set up (docs/ssh.md)
    assert len(remote["warnings"]) == 2 and "default:" not in text  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "python", "synced", "warned"),
    [
        (["--python", "/usr/bin/python3.10"], "/usr/bin/python3.10", True, False),
        (["--no-sync"], "python3", False, True),  # the hosts must have the folder already: said
        (["--remote-dir", "/srv/train"], "python3", False, False),  # where the folder already is
        (["--remote-dir", "/srv/train", "--sync"], "python3", True, False),
    ],
)
def test_what_the_user_says_wins_over_a_new_vm_s_defaults(cloud: GoogleStandin, args: list[str], python: str, synced: bool, warned: bool) -> None:
    remote, workers, text = _remote(*NEW_TPU, *args)
    assert remote["python"] == python and {w["argv"][0] for w in workers} == {python}  # type: ignore[index]
    assert (remote["sync"] is not None, bool(remote["warnings"])) == (synced, warned), remote
    assert ("default: python3 " in text) == (python == "python3")


def test_the_launch_python_setting_is_refused_by_its_name_when_it_is_this_machine_s(cloud: GoogleStandin, home: Path) -> None:
    (home / "work" / "tpuctl.toml").write_text(f"[launch]\npython = {json.dumps(sys.executable)}\n")
    refused = in_process("launch", "train.py", *NEW_TPU, "--dry-run")
    assert refused.code == 2 and refused.one_line_error, refused.err
    assert refused.err.startswith(f"Error: the [launch] python setting {sys.executable} is in this machine's ")


def _venv_python(home: Path) -> list[str]:
    """The issue's case: the launcher's own interpreter, in its virtual environment."""
    return ["--python", sys.executable]


def _home_python(home: Path) -> list[str]:
    """An interpreter in this machine's home folder (a project's venv, as the issue's /home/me/proj/.venv)."""
    python = home / "home" / "proj" / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    return ["--python", str(python)]


def _script_left_out(home: Path) -> list[str]:
    (home / "work" / ".tpuctlignore").write_text("train.py\n")
    return []


def _no_script(home: Path) -> list[str]:
    (home / "work" / "train.py").unlink()
    return []


# Each check a launch makes without its VM: what sets it off, and what its one line says.
CHECKS: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "this machine's venv": (_venv_python, "is in this machine's Python environment"),
    "this machine's home": (_home_python, "is in this machine's home folder"),
    "the script left out": (_script_left_out, "--sync would not send train.py"),
    "over the sync limit": (lambda home: ["--sync-limit", "8"], "to each host, over the 8 bytes limit"),
    "the script left out, sync asked": (lambda home: [*_script_left_out(home), "--sync"], "--sync would not send train.py"),
    "options ssh rejects": (lambda home: ["--ssh-option", "Bogus=1"], "ssh rejects the options:"),
    "no script": (_no_script, "script not found: train.py"),
}


@pytest.mark.parametrize("check", list(CHECKS))
def test_a_check_that_needs_no_vm_refuses_the_launch_before_any_api_call(cloud: GoogleStandin, home: Path, check: str) -> None:
    """Not a dry run: a launch that gets past its checks hunts, and the stand-in records the create (the zone stocks
    out, so such a launch ends there). Each refusal comes first: one line, exit 2, and the TPU API never asked anything."""
    cloud.faults.stockout(ZONE, "capacity", times=5)
    given, said = CHECKS[check]
    args = given(home)
    result = in_process("launch", "train.py", *NEW_TPU, *args, "--log-dir", str(home / "logs"), limit_s=20)
    assert result.code == 2 and result.one_line_error, result.err
    assert said in result.err
    assert ("--no-sync --remote-dir DIR" in result.err) == (check in ("the script left out", "over the sync limit"))  # a default sync's way out
    assert cloud.requests == [], cloud.requests


def test_the_agent_reads_a_home_relative_sync_folder_from_home_though_it_then_runs_in_it(tmp_path: Path) -> None:
    """--sync without rsync: the host's agent lists what the folder holds (only the changed files travel). A VM's
    folder is relative to the home the session starts in, and the agent enters the workers' directory before it
    lists: it must list the folder there, not a folder of that name inside itself (which would send every file)."""
    from tpuctl.backends.ssh import session, wire
    from tpuctl.cluster import worker_contract as contract

    folder = vm_workdir("/Users/me/proj")
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "train.py").write_text("print(1)\n")
    hello = [("nonce", "N0"), ("cwd", folder), ("control_fd", contract.CONTROL_FD), ("reserved_fd", contract.RESERVED_FD), ("sync", folder)]
    done = subprocess.run(
        [sys.executable, "-S", "-c", session.AGENT_SOURCE, wire.pack(hello)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60, env={"PATH": os.environ["PATH"]}, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
    said = session.Hello.parse(done.stderr.splitlines()[0].split()[2])
    assert said.manifest is not None and list(said.manifest) == ["train.py"]

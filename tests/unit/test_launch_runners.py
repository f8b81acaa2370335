"""Every launch backend has the same shape: options as data, a dry run that is the request, one outcome."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, documented_outcome, run_tpuctl
from tests.standins.cli_calls import launch_in_process
from tpuctl.launch import option_fields
from tpuctl.launch.job import Job
from tpuctl.launch.launch_options import LaunchOptions
from tpuctl.launch.registry import BACKENDS, backend_module
from tpuctl.launch.runner import JobRunner

EXAMPLE = str(ROOT / "examples" / "train_keras.py")


@pytest.mark.parametrize("name", list(BACKENDS))
def test_each_backend_declares_its_options_as_a_frozen_dataclass(name: str) -> None:
    options = backend_module(name).Options
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert options() == option_fields.from_params(options, {})  # every option has a default


@pytest.mark.parametrize("name", ["kubernetes", "vertex"])
def test_a_job_backend_s_run_submits_the_request_its_dry_run_prints(name: str) -> None:
    """A backend that submits a job has no run of its own: JobRunner's builds the request with `request`, as the dry
    run does, and hands exactly that to `submit` (issue 47: the Vertex runner once built its body twice)."""
    runner = type(backend_module(name).runner(backend_module(name).Options()))
    assert issubclass(runner, JobRunner) and runner.run is JobRunner.run


def test_two_option_groups_share_a_name_only_as_one_shared_option() -> None:
    """--image means one thing whichever backend reads it: a name in two groups is one tpuctl.launch.shared_options declaration."""
    groups = [Job, LaunchOptions, *(backend_module(name).Options for name in BACKENDS)]
    seen: dict[str, tuple[object, object]] = {}
    shared = 0
    for group in groups:
        # An inherited group (ssh's connection options) counts once.
        own = [f for f in dataclasses.fields(group) if not any(f.name in option_fields.names(b) for b in group.__mro__[1:] if dataclasses.is_dataclass(b))]
        for field in own:
            if field.name in seen:
                first_group, first_metadata = seen[field.name]
                assert first_metadata == field.metadata, f"{field.name} is declared differently by {first_group} and {group}"
                shared += 1
            seen[field.name] = (group, field.metadata)
    assert shared >= 5  # --project, --image, --job-name, --accelerator, --gpus-per-worker


def test_the_launch_command_imports_no_backend_machinery() -> None:
    probe = "import sys, tpuctl.cli.launch; print(sorted({m.split('.')[0] for m in sys.modules} & {'jinja2', 'yaml', 'google', 'tensorflow', 'rich'}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
    probe = "import sys, tpuctl.cli.launch; print('tpuctl.backends.ssh.session' in sys.modules, 'tpuctl.backends.kubernetes.manifest' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == ["False", "False"]


def test_a_local_dry_run_is_the_plan_with_real_ports() -> None:
    code, out, _ = launch_in_process(EXAMPLE, "--workers", "2", "--dry-run", "--json")
    plan = json.loads(out)
    assert code == 0 and [w["task"] for w in plan["workers"]] == ["worker:0", "worker:1"]
    assert all(w["address"].startswith("127.0.0.1:") and not w["address"].endswith(":<port>") for w in plan["workers"])


def test_an_ssh_dry_run_places_workers_on_hosts_and_leaves_ports_open() -> None:
    code, out, _ = launch_in_process(EXAMPLE, "--hosts", "gpu-a:2,gpu-b", "--dry-run", "--json")
    plan = json.loads(out)
    assert code == 0 and [(w["host"], w["address"]) for w in plan["workers"]] == [
        ("gpu-a", "gpu-a:<port>"),
        ("gpu-a", "gpu-a:<port>"),
        ("gpu-b", "gpu-b:<port>"),
    ]


def test_an_ssh_dry_run_shows_each_host_s_command_quoted_once_and_the_sync() -> None:
    """Issue 30: the hosts' side of a dry run, as a launch builds it: a word with a space stays one word on the
    host (quoted once for its shell), the sync copies the script's folder to the remote one, with the same ssh."""
    args = (EXAMPLE, "--hosts", "gpu-a,gpu-b", "--python", "/opt/my env/bin/python", "--remote-dir", "/srv/my train", "--sync")
    code, out, err = launch_in_process(*args, "--ssh-option", "User=trainer", "--dry-run", "--json")
    assert code == 0, err
    remote = json.loads(out)["remote"]
    assert (remote["workdir"], remote["python"], remote["warnings"]) == ("/srv/my train", "/opt/my env/bin/python", [])
    for host in ("gpu-a", "gpu-b"):
        argv = shlex.split(remote["ssh"][host])
        assert argv[0] == "ssh" and "User=trainer" in argv and argv[-3:-1] == ["--", host]
        assert shlex.split(argv[-1]) == ["exec", "/opt/my env/bin/python", "-S", "-c", "<agent>", "<hello>"]
    sync = remote["sync"]
    rsync = shlex.split(sync["command"])
    assert rsync[0] == "rsync" and rsync[-2:] == [str(Path(EXAMPLE).parent) + "/", "HOST:/srv/my train/examples/"]  # its place under the working directory
    assert "User=trainer" in shlex.split(rsync[rsync.index("-e") + 1])  # the same ssh as the sessions
    code, text, _ = launch_in_process(*args, "--dry-run")
    assert code == 0 and f"sync: {Path(EXAMPLE).parent}/ -> each host's /srv/my train/examples/, the files chosen by git ls-files" in text
    assert sync["summary"] in text and "sync: with: rsync -a --protect-args --files-from=- --from0 -e " in text
    assert "remote: workers run in /srv/my train with /opt/my env/bin/python" in text and "warning:" not in text


def test_a_kubernetes_dry_run_is_the_manifest_as_yaml_or_inside_json() -> None:
    args = ("train.py", "--backend", "kubernetes", "--image", "example.com/train:1", "--workers", "2", "--job-name", "demo", "--dry-run")
    code, text, _ = launch_in_process(*args)
    code_json, out, _ = launch_in_process(*args, "--json")
    request = json.loads(out)
    assert code == code_json == 0
    assert (request["kind"], request["name"], request["namespace"], request["workers"]) == ("TFJob", "demo", "default", ["worker:0", "worker:1"])
    assert request["manifest"].rstrip("\n") == text.rstrip("\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image", "x"], "--image is for --backend kubernetes or vertex (this launch uses --backend local)"),
        (["--hosts", "a", "--image", "x"], "--image is for --backend kubernetes or vertex (this launch uses --backend ssh)"),
        (["--backend", "kubernetes", "--image", "x", "--sync"], "--sync is for launches over ssh"),
        (["--backend", "kubernetes", "--image", "x", "--tail", "--model-dir", "m"], "--tail is not available with --backend kubernetes"),
    ],
)
def test_an_option_of_another_backend_is_refused_in_one_line(args: list[str], message: str) -> None:
    code, _, err = launch_in_process(EXAMPLE, *args, "--dry-run")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_outcome_of_a_local_launch_has_the_documented_keys(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('about to fail')\nsys.exit(3)\n")
    done = run_tpuctl("launch", str(script), "--strategy", "none", "--log-dir", str(tmp_path / "logs"), "--json", timeout=60)
    record = json.loads(done.stdout)
    documented = documented_outcome()
    assert done.returncode == 3
    assert record.keys() == documented.keys()
    assert isinstance(documented["failure"], dict) and record["failure"].keys() == documented["failure"].keys()
    assert (record["backend"], record["result"], record["exit_code"], record["job"]) == ("local", "failed", 3, None)
    assert record["failure"]["tail"] == ["about to fail"]
    assert json.loads((tmp_path / "logs" / "outcome.json").read_text()) == record

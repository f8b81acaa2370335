"""`tpuctl launch` input handling: one-line errors, exit 2, option placement, dry runs.

The commands run in this process through the real entry point (test_hostile_cli.invoke: main(), its output captured,
the exit status it ends with); a worker's runtime and the CLI's imports are checked in processes of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.standins.cli_calls import in_process
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import parse_env

EXAMPLE = str(ROOT / "examples" / "train_keras.py")



@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["launch", "missing.py"], "script not found: missing.py"),
        (["launch", EXAMPLE, "--workers", "0"], "'--workers': 0 is not in the range 1<=x<=4096"),
        (["launch", EXAMPLE, "--workers", "two"], "'two' is not a valid integer"),
        (["launch", EXAMPLE, "--env", "NOEQUALS"], "--env 'NOEQUALS' is not NAME=VALUE"),
        (["launch", EXAMPLE, "--env", "1BAD=x"], "is not NAME=VALUE"),
        (["launch", EXAMPLE, "--env", "TF_CONFIG={}"], "--env cannot set TF_CONFIG"),
        (["launch", EXAMPLE, "--strategy", "bogus"], "'bogus' is not one of"),
        (["launch", EXAMPLE, "--start-timeout", "0"], "--start-timeout"),
        (["launch", EXAMPLE, "--python", "/no/such/python"], "no such interpreter"),
        (["launch", EXAMPLE, "--python", EXAMPLE], "not executable"),
        (["launch"], "Missing argument 'SCRIPT'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = in_process(*args, "--dry-run")
    assert result.code == 2
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.startswith("Error: ")


def test_unusable_log_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = in_process("launch", EXAMPLE, "--log-dir", str(blocker / "logs"))
    assert result.code == 2
    assert result.err.strip().splitlines()[-1].startswith("Error: cannot create log dir")
    assert "Traceback" not in result.err


def test_bad_tf_config_in_a_worker_is_one_line_and_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('never')\n")
    env = {**os.environ, "TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'}
    result = subprocess.run(
        [sys.executable, "-m", "tpuctl.runtime", str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "never" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpuctl: error:") and "index" in lines[0]


def _dry_run(*args: str) -> dict:
    result = in_process("launch", "--dry-run", "--json", *args)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_options_may_come_before_or_after_the_script() -> None:
    before = _dry_run("--workers", "2", EXAMPLE, "--epochs", "1")
    after = _dry_run(EXAMPLE, "--epochs", "1", "--workers", "2")
    for plan in (before, after):
        assert [w["argv"][4:] for w in plan["workers"]] == [["--epochs", "1"]] * 2


def test_everything_after_double_dash_goes_to_the_script() -> None:
    plan = _dry_run(EXAMPLE, "--workers", "2", "--", "--workers", "5", "--", "-x")
    assert plan["workers"][0]["argv"][4:] == ["--workers", "5", "--", "-x"]
    assert len(plan["workers"]) == 2


def test_dry_run_prints_each_worker_command_and_environment() -> None:
    result = in_process("launch", EXAMPLE, "--workers", "2", "--model-dir", "gs://b/run", "--dry-run")
    assert result.code == 0
    out = result.out
    assert "worker:0 (chief) on localhost" in out and "worker:1 on localhost" in out
    assert out.count("env: TF_CONFIG=") == 2
    assert "TPUCTL_MODEL_DIR=gs://b/run" in out
    assert "-m tpuctl.runtime" in out


def test_the_cli_never_imports_tensorflow_or_rich() -> None:
    probe = (
        "import sys\n"
        "from tpuctl.cli import main\n"
        "try:\n"
        f"    main(['launch', {EXAMPLE!r}, '--workers', '2', '--dry-run'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras', 'rich', 'google')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@given(st.lists(st.text(max_size=30), max_size=5))
@settings(max_examples=200, deadline=None)
def test_parse_env_accepts_or_rejects_cleanly(values: list[str]) -> None:
    try:
        pairs = parse_env(tuple(values))
    except TpuctlError as err:
        assert "\n" not in err.message.replace("\\n", "")
        return
    for (name, value), raw in zip(pairs, values):
        assert f"{name}={value}" == raw


def test_launch_help_is_grouped_by_backend() -> None:
    """Issue 30: 170 lines of four backends' options in one flat list; now one section each, shared ones named again."""
    done = in_process("launch", "--help")  # click's runner formats help 80 columns wide, as for a pipe
    assert done.code == 0, done.err
    text = done.out
    sections = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert sections == [
        "Options:", "How each worker builds its strategy:", "Failures, restarts and deadlines:", "Rehearsal and watching:",
        "Local workers (the default):", "SSH hosts and TPU VM slices (--hosts, --hostfile, --tpu):",
        "Kubernetes (--backend kubernetes):", "Vertex AI (--backend vertex):",
    ]
    first = text.split("How each worker builds its strategy:")[0]
    assert all(f"  {flag} " in first for flag in ("--workers", "--strategy", "--model-dir", "--dry-run", "--backend"))
    assert "--keras" not in first and "--rehearse" not in first
    # click 8.5 gives arguments a help record too: SCRIPT is in the usage line, not a row among the options
    assert not any(line.strip() in ("SCRIPT", "[SCRIPT_ARGS]...") for line in text.splitlines())
    from tpuctl.cli.launch import launch

    rows = [line.split()[0] for line in text.splitlines() if line.startswith("  --")]
    assert sorted(rows) == sorted({p.opts[0] for p in launch.params if p.opts[0].startswith("--") and p.name != "output_format"})
    vertex = text.split("Vertex AI (--backend vertex):")[1]
    assert "--staging-bucket" in vertex and "(also)" in vertex and "--image" in vertex
    assert text.count("  --image ") == 1  # listed once, under Kubernetes; named again under Vertex

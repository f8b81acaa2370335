"""`tpuctl tf-config` end to end: output formats, --check, and one-line errors with exit 2."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.conftest import run_tpuctl
from tpuctl.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str


class Run(Protocol):
    def __call__(self, *args: str, stdin: str | None = None) -> Result: ...


@pytest.fixture
def tpuctl(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """Run `tpuctl ARGS` in-process the way the console script does, without TF_CONFIG set."""
    monkeypatch.delenv("TF_CONFIG", raising=False)

    def run(*args: str, stdin: str | None = None) -> Result:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        with pytest.raises(SystemExit) as exited:
            main(["tf-config", *args])
        captured = capsys.readouterr()
        assert isinstance(exited.value.code, int)
        return Result(exited.value.code, captured.out, captured.err)

    return run


def _configs(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def _task_names(out: str) -> list[str]:
    return [f"{c['task']['type']}:{c['task']['index']}" for c in _configs(out)]


# -- generation ---------------------------------------------------------------


def test_json_prints_one_compact_object_per_task_in_order(tpuctl: Run) -> None:
    result = tpuctl("--workers", "2", "--chief", "--ps", "1", "--evaluator")
    assert result.code == 0 and result.err == ""
    assert _task_names(result.out) == ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]
    assert " " not in result.out
    assert _configs(result.out)[0]["cluster"] == {
        "chief": ["localhost:2222"],
        "worker": ["localhost:2223", "localhost:2224"],
        "ps": ["localhost:2225"],
    }


def test_task_prints_one(tpuctl: Run) -> None:
    result = tpuctl("--workers", "3", "--task", "worker:2", "--base-port", "5000")
    assert result.code == 0
    assert result.out == (
        '{"cluster":{"worker":["localhost:5000","localhost:5001","localhost:5002"]},'
        '"task":{"type":"worker","index":2}}\n'
    )


def test_env_lines_are_shell_quoted_and_labelled(tpuctl: Run) -> None:
    result = tpuctl("--workers", "2", "--format", "env")
    lines = result.out.splitlines()
    assert lines[0::2] == ["# worker:0", "# worker:1"]
    for index, line in enumerate(lines[1::2]):
        words = shlex.split(line)
        assert words[0] == "export" and words[1].startswith("TF_CONFIG=")
        assert json.loads(words[1].removeprefix("TF_CONFIG="))["task"] == {"type": "worker", "index": index}


def test_env_output_sets_tf_config_in_a_shell(tpuctl: Run) -> None:
    script = tpuctl("--workers", "1", "--hosts", "[::1]:9", "--format", "env").out
    shown = subprocess.run(["sh", "-c", script + 'printf %s "$TF_CONFIG"'], capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["cluster"] == {"worker": ["[::1]:9"]}


def test_dir_writes_one_file_per_task(tpuctl: Run, tmp_path: Path) -> None:
    target = tmp_path / "new" / "tfc"
    result = tpuctl("--workers", "1", "--chief", "--evaluator", "--format", "dir", str(target))
    assert result.code == 0
    names = ["chief-0.json", "worker-0.json", "evaluator-0.json"]
    assert result.out.splitlines() == [f"wrote {target / name}" for name in names]
    assert sorted(p.name for p in target.iterdir()) == sorted(names)
    assert json.loads((target / "worker-0.json").read_text())["task"] == {"type": "worker", "index": 0}


def test_dir_with_task_writes_only_that_file(tpuctl: Run, tmp_path: Path) -> None:
    assert tpuctl("--workers", "2", "--task", "worker:1", "--format", "dir", str(tmp_path)).code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["worker-1.json"]


def test_hosts_fill_chief_workers_ps_in_order(tpuctl: Run) -> None:
    result = tpuctl("--workers", "1", "--chief", "--ps", "1", "--hosts", "c:1,w,[::1]:3", "--base-port", "7")
    assert _configs(result.out)[0]["cluster"] == {"chief": ["c:1"], "worker": ["w:7"], "ps": ["[::1]:3"]}


def test_hostfile_slots_supply_consecutive_ports(tpuctl: Run, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two GPU boxes\nbox-a slots=2\nbox-b:3000 slots=2\n")
    result = tpuctl("--workers", "4", "--hostfile", str(hostfile))
    assert _configs(result.out)[0]["cluster"] == {"worker": ["box-a:2222", "box-a:2223", "box-b:3000", "box-b:3001"]}


# -- --check ------------------------------------------------------------------

GOOD = '{"cluster":{"chief":["c:1"],"worker":["w:1","w:2"],"ps":["p:1"]},"task":{"type":"worker","index":1}}'


def test_check_value_summary(tpuctl: Run) -> None:
    result = tpuctl("--check", GOOD)
    assert (result.code, result.err) == (0, "")
    assert (
        result.out == "TF_CONFIG ok: worker:1 (not the chief); 3 training workers; cluster chief:0, worker:0-1, ps:0\n"
    )


@pytest.mark.parametrize(
    ("config", "summary"),
    [
        (
            '{"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0}}',
            "worker:0 (the chief); 1 training worker;",
        ),
        ('{"cluster":{"chief":["c:1"]},"task":{"type":"chief","index":0}}', "chief:0 (the chief); 1 training worker;"),
        (
            '{"cluster":{"worker":["w:1","w:2"]},"task":{"type":"evaluator","index":0}}',
            "evaluator:0 (the evaluator, beside the cluster); 2 training workers;",
        ),
    ],
)
def test_check_names_the_chief(tpuctl: Run, config: str, summary: str) -> None:
    assert summary in tpuctl("--check", config).out


def test_check_reads_tf_config_by_default(tpuctl: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", GOOD)
    assert tpuctl("--check").out.startswith("TF_CONFIG ok: worker:1 ")


def test_check_reads_a_file_and_stdin(tpuctl: Run, tmp_path: Path) -> None:
    path = tmp_path / "tf_config.json"
    path.write_text(GOOD)
    assert tpuctl("--check", f"@{path}").code == 0
    assert tpuctl("--check", "-", stdin=GOOD).code == 0


def test_generated_configs_pass_check(tpuctl: Run) -> None:
    for line in tpuctl("--workers", "2", "--chief", "--ps", "2", "--evaluator").out.splitlines():
        assert tpuctl("--check", line).code == 0


# -- errors: one line on stderr, exit 2 ----------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--workers is required"),
        (["--workers", "0"], "Invalid value for '--workers': 0 is not in the range 1<=x<=4096."),
        (["--workers", "two"], "Invalid value for '--workers': 'two' is not a valid integer"),
        (["--workers", "1", "--ps", "-1"], "Invalid value for '--ps': -1 is not in the range 0<=x<=4096."),
        (
            ["--workers", "1", "--base-port", "70000"],
            "Invalid value for '--base-port': 70000 is not in the range 1<=x<=65535.",
        ),
        (["--workers", "2", "--base-port", "65535"], "localhost: 2 task(s) from port 65535 need ports up to 65536"),
        (
            ["--workers", "1", "--task", "bogus"],
            "Invalid value for '--task': 'bogus': expected TYPE:INDEX, e.g. worker:1",
        ),
        (["--workers", "2", "--task", "worker:9"], "--task worker:9: not in this cluster, which has worker:0-1"),
        (["--workers", "2", "--task", "chief:0"], "--task chief:0: not in this cluster, which has worker:0-1"),
        (
            ["--workers", "2", "--task", "evaluator:0"],
            "--task evaluator:0: this cluster has no evaluator (add --evaluator)",
        ),
        (
            ["--workers", "2", "--evaluator", "--task", "evaluator:1"],
            "--task evaluator:1: out of range, there is only evaluator:0",
        ),
        (["--workers", "2", "--hosts", "a:1,b:x"], "--hosts entry 2 'b:x': port 'x' is not a number 1-65535"),
        (["--workers", "2", "--hosts", "a;b"], "--hosts entry 1 'a;b': invalid host name 'a;b'"),
        (
            ["--workers", "2", "--hosts", "a,b,c"],
            "--hosts gives 3 address(es) but the cluster has 2 task(s): worker:0-1",
        ),
        (
            ["--workers", "2", "--hosts", "a:2222,a"],
            "cluster.worker[1]: duplicate address a:2222 (also cluster.worker[0])",
        ),
        (["--workers", "2", "--hosts", "a", "--hostfile", "f"], "--hosts and --hostfile cannot be combined"),
        (
            ["--workers", "2", "--hostfile", "/nonexistent/hosts"],
            "cannot read hostfile /nonexistent/hosts: No such file or directory",
        ),
        (
            ["--workers", "2", "--format", "yaml"],
            "Invalid value for '--format' / '--output' / '-o': 'yaml' is not one of 'json', 'env', 'dir'.",
        ),
        (["--workers", "2", "--format", "dir"], "--format dir needs a directory"),
        (["--workers", "2", "out"], "unexpected argument 'out' (a DIR argument goes with --format dir)"),
        (["--check", GOOD, "--workers", "2"], "--check cannot be combined with '--workers'"),
        (["--check", GOOD, "--format", "env"], "--check cannot be combined with '--format'"),
        (["--check"], "TF_CONFIG is not set"),
        (["--check", "@/nonexistent.json"], "cannot read /nonexistent.json: No such file or directory"),
        (["--check", '{"cluster": {'], "TF_CONFIG: invalid JSON at line 1, column 14: Expecting property name"),
        (
            [
                "--check",
                '{"cluster":{"worker":["localhost:2222","localhost:2222"]},"task":{"type":"worker","index":1}}',
            ],
            "cluster.worker[1]: duplicate address localhost:2222 (also cluster.worker[0])",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tpuctl: Run, args: list[str], message: str) -> None:
    result = tpuctl(*args)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith(f"Error: {message}")
    assert result.err.count("\n") == 1 and result.err.endswith("\n")


def test_files_larger_than_a_megabyte_are_bad_input(tpuctl: Run, tmp_path: Path) -> None:
    """Hostfiles and --check files are read through read_small_text: /dev/zero cannot fill memory."""
    big = tmp_path / "big"
    big.write_bytes(b"h slots=1\n" * 200_000)
    for args in (["--workers", "2", "--hostfile", str(big)], ["--check", f"@{big}"]):
        result = tpuctl(*args)
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        assert "is larger than 1048576 bytes" in result.err


def test_check_of_non_utf8_stdin_is_bad_input(tpuctl: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff{}"), encoding="utf-8"))
    result = tpuctl("--check", "-")
    assert result.code == 2 and result.err.startswith("Error: cannot read stdin: ")


def test_unwritable_dir_is_a_failed_operation(tpuctl: Run, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = tpuctl("--workers", "1", "--format", "dir", str(blocker / "sub"))
    assert result.code == 1
    assert result.err.startswith(f"Error: cannot write {blocker / 'sub'}: ")
    assert result.err.count("\n") == 1


# -- the real console process ---------------------------------------------------

_IMPORTS = """
import sys
sys.argv = ["tpuctl", "tf-config", "--workers", "2", "--chief"]
from tpuctl.cli import main
try:
    main()
except SystemExit as done:
    assert done.code == 0, done.code
heavy = sorted(m for m in ("tensorflow", "rich", "keras", "numpy") if m in sys.modules)
print("heavy:", heavy)
"""


def test_process_imports_neither_tensorflow_nor_rich() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORTS], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "heavy: []"


def test_module_entry_point_error_is_one_line() -> None:
    done = run_tpuctl("tf-config", "--check", '{"cluster":{},"task":{}}', env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "Error: cluster: empty (list at least one chief or worker address)\n"

"""The launch's preflight checks (tpuctl/launch/preflight.py): each failure is one line naming `tpuctl doctor`.

Real interpreters and a fake sysfs tree (TPUCTL_SYSFS_ROOT); the ssh agent's half is run as a host runs it,
without ssh (tests/integration/test_launch_preflight.py goes through sshd).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.standins.processes import python_without_tensorflow
from tpuctl.backends.ssh import session, wire
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.launch import preflight
from tpuctl.launch.job import Job
from tpuctl.launch.prepare import prepare

TPU7X, V4 = "0x0076", "0x005e"


def fake_sysfs(root: Path, device: str) -> Path:
    folder = root / "sys" / "bus" / "pci" / "devices" / "0000:00:04.0"
    folder.mkdir(parents=True)
    (folder / "vendor").write_text("0x1ae0\n")
    (folder / "device").write_text(device + "\n")
    return root


def job(**fields: object) -> Job:
    return dataclasses.replace(Job(script="train.py", python=sys.executable), **fields)  # type: ignore[arg-type]


def assert_one_doctor_line(err: TpuctlError, doctor: str) -> None:
    assert err.exit_code == FAILED
    assert "\n" not in str(err) and f"`{doctor}`" in str(err) and "--no-preflight" in str(err)


def test_a_tpu7x_fails_a_tpu_launch_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(fake_sysfs(tmp_path, TPU7X)))
    for strategy in ("tpu", "auto"):
        with pytest.raises(TpuctlError, match="this machine's TPU is TPU7x: TensorFlow does not support TPU7x") as raised:
            preflight.LocalChecks(job(strategy=strategy)).result()
        assert_one_doctor_line(raised.value, f"tpuctl doctor --python {sys.executable}")
        assert "Keras 3 on JAX runs there: port the script to it, then `tpuctl launch train.py --framework jax` (docs/jax.md)" in str(raised.value)


def test_a_tpu7x_leaves_cpu_strategies_rehearsals_and_no_preflight_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(fake_sysfs(tmp_path, TPU7X)))
    for fields in ({"strategy": "multi-worker-mirrored"}, {"strategy": "none"}, {"rehearse": "v2-8"}, {"strategy": "tpu", "preflight": False}):
        preflight.LocalChecks(job(**fields)).result()


def test_a_v4_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(fake_sysfs(tmp_path, V4)))
    preflight.LocalChecks(job(strategy="tpu")).result()


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow in the tests' interpreter")
def test_an_interpreter_with_tensorflow_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path))  # no PCI bus at all
    preflight.LocalChecks(job()).result()


def test_an_interpreter_without_tensorflow_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path))
    python = python_without_tensorflow()
    with pytest.raises(TpuctlError, match=f"no TensorFlow for the workers' interpreter {python}") as raised:
        preflight.LocalChecks(job(python=python)).result()
    assert_one_doctor_line(raised.value, f"tpuctl doctor --python {python}")
    # --env is the workers' environment: a PYTHONPATH there that holds TensorFlow is found.
    package = tmp_path / "theirs" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    preflight.LocalChecks(job(python=python, env=(("PYTHONPATH", str(package.parent)),))).result()
    # What never imports TensorFlow is not asked to have it, and --no-preflight asks nothing.
    preflight.LocalChecks(job(python=python, strategy="none")).result()
    preflight.LocalChecks(job(python=python, preflight=False)).result()


def test_the_launchers_own_interpreter_is_asked_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path))
    started: list[list[str]] = []
    monkeypatch.setattr(preflight.reaper, "run", lambda argv, **kwargs: started.append(argv) or subprocess.CompletedProcess(argv, 0))
    monkeypatch.setattr(preflight.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TpuctlError, match=f"no TensorFlow for the workers' interpreter {sys.executable}") as raised:
        preflight.LocalChecks(job()).result()
    assert_one_doctor_line(raised.value, f"tpuctl doctor --python {sys.executable}")
    assert not started
    # The workers' own Python settings differ from the launcher's: their interpreter is asked.
    preflight.LocalChecks(job(env=(("PYTHONNOUSERSITE", "1"),))).result()
    assert [argv[0] for argv in started] == [sys.executable]


def test_an_interpreter_that_cannot_run_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path))
    broken = tmp_path / "python3"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so.1.0' >&2\nexit 127\n")
    broken.chmod(0o755)
    with pytest.raises(TpuctlError, match="cannot run: error while loading shared libraries") as raised:
        preflight.LocalChecks(job(python=str(broken))).result()
    assert_one_doctor_line(raised.value, f"tpuctl doctor --python {broken}")
    broken.write_text("not a script")  # no #! line: exec fails
    with pytest.raises(TpuctlError, match="cannot run the workers' interpreter"):
        preflight.LocalChecks(job(python=str(broken))).result()


def test_no_preflight_and_the_config_key_reach_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuctl.launch.launch_options import CONFIG_KEYS
    from tpuctl.settings import files as config

    script = tmp_path / "train.py"
    script.write_text("")
    params = {"script": str(script), "preflight": False}
    assert prepare(str(script), (), params, frozenset({"preflight"})).job.preflight is False
    assert prepare(str(script), (), {}, frozenset()).job.preflight is True
    (tmp_path / "tpuctl.toml").write_text("[launch]\npreflight = false\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "none.toml"))
    assert config.section_defaults("launch", CONFIG_KEYS) == {"preflight": False}


def test_what_the_hosts_are_asked_to_check() -> None:
    assert preflight.remote_hello(job(strategy="mirrored")) == [("tensorflow", "")]
    assert preflight.remote_hello(job(strategy="none", env=(("PYTHONPATH", "/opt/theirs"),))) == []
    assert preflight.remote_hello(job(preflight=False)) == []
    [tensorflow, chip] = preflight.remote_hello(job(strategy="tpu", env=(("PYTHONPATH", "/opt/theirs"),)))
    assert tensorflow == ("tensorflow", "/opt/theirs")
    assert chip[1].startswith("0x1ae0:0x0076=the TPU is TPU7x: TensorFlow does not support")
    assert preflight.remote_doctor("gpu-a", "/opt/my env/bin/python", None) == "tpuctl doctor --hosts gpu-a --python '/opt/my env/bin/python'"
    assert preflight.remote_doctor("10.0.0.2", "python3", "my-tpu") == "tpuctl doctor --tpu my-tpu --python python3"


def _agent(python: str, checks: list[tuple[str, str]], cwd: Path, sysfs: Path) -> tuple[str, str]:
    """The shipped agent's hello with these checks, as a host runs it: (kind, the packed rest)."""
    hello = [("nonce", "N0"), ("cwd", str(cwd)), *checks]
    done = subprocess.run(
        [python, "-S", "-c", session.AGENT_SOURCE, wire.pack(hello)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "TPUCTL_SYSFS_ROOT": str(sysfs)},
    )
    nonce, kind, packed = done.stderr.split()
    assert nonce == "N0"
    return kind, packed


def test_the_agent_runs_the_same_checks_on_its_host(tmp_path: Path) -> None:
    tpu7x, v4 = fake_sysfs(tmp_path / "tpu7x", TPU7X), fake_sysfs(tmp_path / "v4", V4)
    checks = preflight.remote_hello(job(strategy="tpu"))
    kind, packed = _agent(sys.executable, checks[1:], tmp_path, tpu7x)
    assert kind == "error" and session.message(packed).startswith("preflight: the TPU is TPU7x: TensorFlow does not support TPU7x")
    assert _agent(sys.executable, checks[1:], tmp_path, v4)[0] == "hello"
    bare = python_without_tensorflow()
    kind, packed = _agent(bare, checks, tmp_path, v4)
    assert (kind, session.message(packed)) == ("error", f"preflight: no TensorFlow for {bare}")
    if importlib.util.find_spec("tensorflow") is not None:
        # -S leaves site-packages out of the agent's own sys.path: the check puts it back, as a worker has it.
        assert _agent(sys.executable, checks, tmp_path, v4)[0] == "hello"


# --- a JAX run: jax (and keras, where the script imports it) in the workers' interpreter, never TensorFlow -------------

JAX_SCRIPT = 'import os\nos.environ["KERAS_BACKEND"] = "jax"\nimport keras\n'


def python_without_jax() -> str:
    """A real interpreter on this machine that finds neither jax nor keras (the tests' own venv has both)."""
    for python in (python_without_tensorflow(), "/root/.pyenv/versions/3.8.18/bin/python3"):
        if os.access(python, os.X_OK) and subprocess.run([python, "-c", preflight.FIND_JAX, "jax", "keras"], capture_output=True, timeout=30).returncode == 3:
            return python
    pytest.skip("every interpreter here has jax or keras")


def test_a_jax_run_needs_jax_not_tensorflow_in_one_line_with_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(fake_sysfs(tmp_path, TPU7X)))  # JAX's chip: no TensorFlow refusal
    script = tmp_path / "train.py"
    script.write_text(JAX_SCRIPT)
    python = python_without_jax()
    with pytest.raises(TpuctlError) as raised:
        preflight.LocalChecks(job(python=python, framework="jax", script=str(script))).result()
    said = f"no jax or keras for the workers' interpreter {python} (a JAX run): pip install 'tpuctl[jax]' (jax[tpu] in --requirements on TPU VMs)"
    assert str(raised.value).startswith(said)
    assert_one_doctor_line(raised.value, f"tpuctl doctor --python {python} --framework jax")
    script.write_text("import jax\n")  # a plain JAX script: keras is not asked for
    with pytest.raises(TpuctlError, match=f"no jax for the workers' interpreter {python} "):
        preflight.LocalChecks(job(python=python, framework="jax", script=str(script))).result()
    # --env is the workers' environment: a PYTHONPATH there that holds jax is found; --no-preflight asks nothing.
    package = tmp_path / "theirs" / "jax"
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    preflight.LocalChecks(job(python=python, framework="jax", script=str(script), env=(("PYTHONPATH", str(package.parent)),))).result()
    preflight.LocalChecks(job(python=python, framework="jax", script=str(script), preflight=False)).result()


@pytest.mark.skipif(not all(importlib.util.find_spec(name) for name in ("jax", "keras")), reason="needs jax and keras in the tests' interpreter")
def test_a_jax_run_passes_where_the_interpreter_has_jax_and_keras_even_without_tensorflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_SYSFS_ROOT", str(tmp_path))
    script = tmp_path / "train.py"
    script.write_text(JAX_SCRIPT)
    real = importlib.util.find_spec
    monkeypatch.setattr(preflight.importlib.util, "find_spec", lambda name: None if name == "tensorflow" else real(name))
    preflight.LocalChecks(job(framework="jax", script=str(script))).result()  # in-process: this interpreter
    with pytest.raises(TpuctlError, match=f"no TensorFlow for the workers' interpreter {sys.executable}"):
        preflight.LocalChecks(job(script=str(script))).result()  # the same interpreter, a TensorFlow run


def test_a_jax_run_asks_the_hosts_for_jax_and_no_chip_and_their_agent_finds_it_or_says_where_it_comes_from(tmp_path: Path) -> None:
    checks = preflight.remote_hello(job(strategy="auto", framework="jax", env=(("PYTHONPATH", "/opt/theirs"),)))
    assert checks == [("jax", "/opt/theirs")]
    assert preflight.remote_hello(job(strategy="auto", framework="jax", preflight=False)) == []
    tpu7x = fake_sysfs(tmp_path / "tpu7x", TPU7X)
    bare = python_without_jax()
    kind, packed = _agent(bare, [("jax", "")], tmp_path, tpu7x)
    assert (kind, session.message(packed)) == ("error", f"preflight: no jax for {bare}")
    package = tmp_path / "theirs" / "jax"
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    assert _agent(bare, [("jax", str(package.parent))], tmp_path, tpu7x)[0] == "hello"  # TPU7x is JAX's chip: no refusal
    assert preflight.remote_doctor("10.0.0.2", "python3", "my-tpu", "jax") == "tpuctl doctor --tpu my-tpu --python python3 --framework jax"

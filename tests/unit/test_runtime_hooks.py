"""The worker runtime's hooks, without TensorFlow: a callback when a module loads (after_import.py), the
end of a strategy's construction (deferred.py), and tpuctl's TPU deadline around a script's own
connection calls (tpu_connect.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.standins.processes import run_python
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import deferred, tpu_connect


def test_a_module_is_patched_as_it_loads_before_anyone_imports_from_it(tmp_path: Path) -> None:
    (tmp_path / "impl.py").write_text("def connect():\n    return 'original'\n")
    (tmp_path / "api.py").write_text("from impl import connect as public_connect\n")  # as TensorFlow's API modules bind names
    done = run_python(
        """
        import sys
        sys.path.insert(0, '.')
        from tpuctl.runtime import after_import
        after_import.when_imported('impl', lambda m: setattr(m, 'connect', lambda: 'patched'))
        print('impl' in sys.modules)
        import api
        print(api.public_connect(), type(sys.modules['impl'].__loader__).__name__)
        seen = []
        after_import.when_imported('impl', lambda m: seen.append(m.__name__))  # already loaded: at once
        print(seen)
        """,
        tmp_path,
    )
    assert done.stdout.split("\n")[:3] == ["False", "patched SourceFileLoader", "['impl']"], done.stderr


class Base:
    def __init__(self, value: int = 0) -> None:
        self.value = value


class Middle(Base):
    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self.inner = Base(5)  # constructed inside another's constructor: not the script's strategy
        self.connected = True  # work after the base's __init__ (ParameterServerStrategy connects here)


def test_the_outermost_constructor_is_reported_once_it_returns() -> None:
    built: list[tuple[str, Any]] = []
    deferred.watch_constructors(Base, lambda s: built.append((type(s).__name__, getattr(s, "connected", None))))
    Middle()
    assert built == [("Middle", True)]

    class Later(Middle):  # defined after the watch began: a script's own subclass
        def __init__(self) -> None:
            super().__init__(7)

    Later()
    Base(3)
    assert built[1:] == [("Later", True), ("Base", None)]
    with pytest.raises(TypeError):
        Middle(1, 2)  # type: ignore[call-arg]  # a constructor that fails reports nothing
    assert len(built) == 3


def test_ready_is_said_once(tmp_path: Path) -> None:
    import os

    read, write = os.pipe()
    ready = deferred.Ready(write)
    ready()
    ready()
    os.close(write)
    assert os.read(read, 100) == b"ready\n"


class TPUClusterResolver:
    """Named as TensorFlow's: the guards know a TPU resolver by its class name, without importing TensorFlow."""

    def __init__(self, tpu: str) -> None:
        self._tpu = tpu


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_scripts_connect_to_an_unreachable_tpu_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_TPU_TIMEOUT", "1.5")
    calls: list[object] = []
    guarded = tpu_connect._guarded(lambda resolver: calls.append(resolver), "experimental_connect_to_cluster", tpu_only=True)
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(TpuctlError, match=f"TPU at grpc://127.0.0.1:{port} is not reachable") as caught:
        guarded(TPUClusterResolver(f"grpc://127.0.0.1:{port}"))
    assert time.monotonic() - started < 5 and caught.value.exit_code == 1 and calls == []
    other = object()  # another cluster (ParameterServerStrategy's own connect): no TPU, no guard
    guarded(other)
    assert calls == [other]
    # Inside a call already under the deadline (tpuctl's own connect), TensorFlow's nested calls run as they are.
    assert tpu_connect.within_deadline(lambda: guarded(TPUClusterResolver("grpc://127.0.0.1:1")), None, 5, hung="test") is None


def test_a_scripts_call_that_hangs_ends_the_worker_at_the_deadline(tmp_path: Path) -> None:
    code = """
        import os, time
        os.environ['TPUCTL_TPU_TIMEOUT'] = '1'
        from tpuctl.runtime import tpu_connect
        class TPUClusterResolver:
            _tpu = 'my-tpu'
        hang = tpu_connect._guarded(lambda r: time.sleep(60), 'initialize_tpu_system', tpu_only=False)
        hang(TPUClusterResolver())
        print('never')
    """
    started = time.monotonic()
    done = run_python(code, tmp_path)
    assert time.monotonic() - started < 20
    assert done.returncode == 1 and "never" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tpuctl: error: no TPU answered at 'my-tpu' within 1s")
    assert "the script's initialize_tpu_system hung" in lines[0]


def test_local_without_tpu_chips_is_refused_at_once_for_tpuctls_own_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tpu_connect.worker_env, "tpu_present", lambda: False)
    with pytest.raises(TpuctlError, match="no TPU on this machine"):
        tpu_connect.within_deadline(lambda: "connected", "local", 5, hung="tpuctl's connect")
    guarded = tpu_connect._guarded(lambda resolver: "connected", "initialize_tpu_system", tpu_only=False)
    assert guarded(None) == "connected"  # the script's call with no resolver: TensorFlow's default; only the deadline applies


def test_a_scripts_quick_tpu_failure_reaches_it_as_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """`try: initialize_tpu_system(TPUClusterResolver('local')) except NotFoundError: ...` must still fall back at once."""

    class NotFoundError(Exception):
        pass

    def initialize(resolver: object) -> None:
        raise NotFoundError("TPUs not found in the cluster")

    monkeypatch.setenv("TPUCTL_TPU_TIMEOUT", "30")
    monkeypatch.setattr(tpu_connect.worker_env, "tpu_present", lambda: False)
    guarded = tpu_connect._guarded(initialize, "initialize_tpu_system", tpu_only=False)
    started = time.monotonic()
    with pytest.raises(NotFoundError):
        guarded(TPUClusterResolver("local"))
    assert time.monotonic() - started < 2  # once, not retried until the deadline

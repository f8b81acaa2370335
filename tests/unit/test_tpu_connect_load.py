"""tpuctl's own TPU connection imports TensorFlow only once the target has passed the checks that need no
TensorFlow (tpu_connect.within_deadline's `load`), and the import's seconds are not the deadline's."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.standins.processes import run_python
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runtime import tpu_connect


def test_a_target_that_fails_the_checks_costs_no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    monkeypatch.setattr(tpu_connect.worker_env, "tpu_present", lambda: False)
    with pytest.raises(TpuctlError, match="no TPU on this machine"):
        tpu_connect.within_deadline(lambda: "connected", "local", 5, hung="test", load=lambda: loads.append("local"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TpuctlError, match=f"TPU at grpc://127.0.0.1:{port} is not reachable"):
        tpu_connect.within_deadline(lambda: "connected", f"grpc://127.0.0.1:{port}", 0.2, hung="test", load=lambda: loads.append("closed"))
    assert loads == []


def test_a_load_longer_than_the_deadline_is_not_counted_against_it(tmp_path: Path) -> None:
    """The import of TensorFlow can outlast a short --tpu-timeout on a busy machine; the TPU was not what hung."""
    done = run_python(
        """
        import time
        from tpuctl.runtime import tpu_connect
        loaded = []

        def call():
            time.sleep(0.2)  # a deadline counted from the start would end the process now, inside the call
            return 'connected' if loaded else 'not loaded'

        print(tpu_connect.within_deadline(call, None, 0.5, hung='test', load=lambda: loaded.append(time.sleep(1.5))))
        """,
        tmp_path,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "connected"), done.stderr


def test_devices_counts_the_import_against_its_deadline(tmp_path: Path) -> None:
    """`tpuctl devices --tpu X --tpu-timeout N` promises its answer within N: its connection imports TensorFlow inside
    the deadline (a stand-in `tensorflow` that takes 3 s to import, a 1 s deadline: the deadline ends it)."""
    fake = tmp_path / "fake"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text("import time\ntime.sleep(3)\n")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = run_python(
            f"""
            import sys
            sys.path.insert(0, {str(fake)!r})
            from tpuctl.runtime import tpu_connect
            tpu_connect.connect('grpc://127.0.0.1:{port}', 1, import_within_deadline=True)
            """,
            tmp_path,
        )
    assert done.returncode != 0 and "within 1s" in done.stderr, (done.returncode, done.stderr)

"""Kinds of script on the newest TensorFlow tested (the main environment's, 2.21) that the other TF tests do not cover.

Each test is one real launch and checks what the script itself printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_tpuctl
from tests.integration.compat_env import outcome, reports, trained_in_sync

pytestmark = pytest.mark.tf


def test_keras3_custom_loop_under_its_own_strategy_on_two_workers(tmp_path: Path) -> None:
    # Keras 3 cannot run model.fit under MultiWorkerMirroredStrategy, but a custom loop with strategy.run can:
    # --keras keras3 keeps tf.keras Keras 3 although tf-keras is installed here.
    model_dir = tmp_path / "model"
    result = run_tpuctl(
        "launch", str(SCRIPTS / "compat" / "custom_loop_mwms.py"), "--workers", "2", "--keras", "keras3",
        "--model-dir", str(model_dir), "--log-dir", str(tmp_path / "logs"), "--start-timeout", "120", timeout=180,
    )
    assert result.returncode == 0, outcome(result)
    seen = reports(result.stdout, "custom_loop_mwms")
    assert set(seen) == {"worker:0", "worker:1"}, outcome(result)
    chief, other = seen["worker:0"], seen["worker:1"]
    for record in (chief, other):
        assert str(record["tf"]).startswith("2.21."), record
        assert str(record["keras"]).startswith("3.") and record["keras_package"] == "keras", record  # Keras 3, not tf-keras
        assert record["replicas_in_sync"] == 2 and record["global_batch"] == 32, record
    trained_in_sync(chief, other, model_dir)
    assert "tf.keras is tf-keras here" not in result.stdout

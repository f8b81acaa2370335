"""Scripts that build their own cluster in their own process (tpuctl/runtime/script_scan.in_process_cluster)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SCRIPTS
from tpuctl.runtime.script_scan import in_process_cluster


def test_the_parameter_server_tutorials_in_process_cluster_is_found() -> None:
    source = (SCRIPTS / "ps_in_process.py").read_text().splitlines()
    line = in_process_cluster(str(SCRIPTS / "ps_in_process.py"))
    assert line is not None and "create_in_process_cluster(" in source[line - 1]


def test_a_server_from_tf_config_is_not_an_in_process_cluster(tmp_path: Path) -> None:
    # The tutorial's real-cluster branch: workers and ps serve the cluster TF_CONFIG names.
    script = tmp_path / "serve.py"
    script.write_text(
        "import tensorflow as tf\n"
        "resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()\n"
        "server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id)\n"
        "server.join()\n"
    )
    assert in_process_cluster(str(script)) is None
    assert in_process_cluster(str(SCRIPTS / "ps_partitioned.py")) is None
    assert in_process_cluster(str(tmp_path / "missing.py")) is None

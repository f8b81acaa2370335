"""Files tpuctl reads on its own, not named on its command line (gcloud's configuration): a FIFO, a device or a
huge file there must neither hang tpuctl nor fill its memory (issue 29: every read is a bounded read of a regular file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl


@pytest.mark.parametrize("damage", ["fifo", "dev-zero", "huge"])
def test_a_hostile_gcloud_configuration_is_neither_read_forever_nor_fatal(tmp_path: Path, damage: str) -> None:
    gcloud = tmp_path / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    for path in (gcloud / "active_config", gcloud / "configurations" / "config_default"):
        if damage == "fifo":
            os.mkfifo(path)  # nobody writes: an open or a read would block forever
        elif damage == "dev-zero":
            path.symlink_to("/dev/zero")  # endless
        else:
            path.write_text("[core]\nproject = p\n" + "# padding\n" * 200_000)  # 2 MB: over the cap
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "TPUCTL_"))}
    result = run_tpuctl("config", "show", "--json", env={**env, "CLOUDSDK_CONFIG": str(gcloud), "NO_GCE_CHECK": "true"}, cwd=tmp_path, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert '"project"' in result.stdout and "gcloud configuration" not in result.stdout  # gcloud's layer gave nothing

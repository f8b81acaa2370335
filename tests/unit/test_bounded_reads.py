"""Files tpuctl reads on its own, not named on its command line (gcloud's configuration): a FIFO, a device or a
huge file there must neither hang tpuctl nor fill its memory (issue 29: every read is a bounded read of a regular file)."""

from __future__ import annotations

import os
import stat
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


def _app(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    app.mkdir()
    (app / "train.py").write_text("print('trained')\n")
    return app


@pytest.mark.parametrize("damage", ["fifo", "dev-zero", "device-node", "huge"])
def test_a_vertex_bundle_reads_only_small_regular_files(tmp_path: Path, damage: str) -> None:
    """The script's folder is read to ship it: a FIFO, a device (a link to /dev/zero, a node made there) or an
    oversized file, as the ignore file or beside the script, is left out or refused in one line, never read on."""
    from tpuctl.backends.vertex import staging
    from tpuctl.inputs.errors import TpuctlError

    app = _app(tmp_path)
    for path in (app / ".tpuctlignore", app / "data.bin"):
        if damage == "fifo":
            os.mkfifo(path)
        elif damage == "dev-zero":
            path.symlink_to("/dev/zero")
        elif damage == "device-node":
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers (we run as root)
        else:
            with path.open("wb") as sparse:
                sparse.truncate(staging.MAX_BYTES + 1)
    if damage == "huge":
        with pytest.raises(TpuctlError, match=r"ignore file .* is larger than"):
            staging.build(str(app / "train.py"))
        (app / ".tpuctlignore").unlink()
        with pytest.raises(TpuctlError, match=r"holds 256.0 MiB to ship, more than 256.0 MiB \(largest: data.bin"):
            staging.build(str(app / "train.py"))
        return
    bundle = staging.build(str(app / "train.py"))
    assert bundle.files == 1  # train.py alone: neither the FIFO nor the device is a file to ship
    assert "data.bin" in bundle.skipped_links if damage == "dev-zero" else not bundle.skipped_links

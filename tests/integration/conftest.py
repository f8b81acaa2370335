"""Fixtures the integration modules share: the same tests on the local and the ssh backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.sshd import SshCluster, running_cluster
from tests.standins.gcs_emulator import serve as gcs_emulator_server
from tests.standins.google_apis import GoogleStandin
from tests.standins.new_tpu_cloud import Cloud, new_tpu_cloud


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    """Two sshd hosts on loopback, host1 and host2 (a module may define its own, with another count)."""
    yield from running_cluster(tmp_path_factory, 2)


@pytest.fixture
def cloud(cluster: SshCluster, google_standin: GoogleStandin, tmp_path: Path) -> Cloud:
    """The new-TPU scenarios' cloud (tests/standins/new_tpu_cloud.py): two v4 zones, a user's node and another run's."""
    return new_tpu_cloud(cluster, google_standin, tmp_path)


@pytest.fixture(params=["local", "ssh"])
def backend(request: pytest.FixtureRequest) -> list[str]:
    """The launch options that pick the backend (ssh: two sshd hosts on loopback)."""
    if request.param == "local":
        return []
    cluster: SshCluster = request.getfixturevalue("cluster")
    return ["--ssh-config", str(cluster.config), "--hosts", "host1,host2"]


@pytest.fixture
def gcs_emulator() -> Iterator[str]:
    """A GCS emulator in this process (gcp-storage-emulator), for google-cloud-storage via STORAGE_EMULATOR_HOST."""
    yield from gcs_emulator_server()


@pytest.fixture(scope="module")
def module_gcs_emulator() -> Iterator[str]:
    """One GCS emulator for a module's tests (a server process started once reads it, as TensorBoard does)."""
    yield from gcs_emulator_server()

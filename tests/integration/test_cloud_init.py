"""`tpuctl init` against the stand-in: answers checked with the API, files written once and kept intact."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl, tpuctl_cmd
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin
from tpuctl.settings import files as config

FLAGS = ("--zone", "us-central2-b", "--accelerator-type", "v4-8", "--runtime-version", "tpu-vm-tf-2.18.0-pjrt")


@pytest.fixture
def env(google_standin: GoogleStandin, tmp_path: Path) -> dict[str, str]:
    return standin_env(google_standin, tmp_path)


def user_file(env: dict[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "tpuctl" / "config.toml"


def test_init_writes_once_then_changes_nothing(env: dict[str, str], tmp_path: Path) -> None:
    target = user_file(env)
    target.parent.mkdir(parents=True)
    target.write_text("# mine\n[launch]\nworkers = 4\n")
    first = run_tpuctl("init", "--yes", *FLAGS, "--model-dir", "gs://my-bucket/runs", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.endswith(f"wrote {target}\n")
    assert target.read_text().startswith("# mine\n[launch]\nworkers = 4\n")
    assert config.read_file(target)["cloud"] == {
        "project": "tpuctl-test",
        "zone": "us-central2-b",
        "accelerator-type": "v4-8",
        "runtime-version": "tpu-vm-tf-2.18.0-pjrt",
        "model-dir": "gs://my-bucket/runs",
    }
    before = target.read_bytes()
    again = run_tpuctl("init", "--yes", env=env, cwd=tmp_path)  # every value now comes from the file itself
    assert again.returncode == 0, again.stderr
    assert "already has these values; nothing changed" in again.stdout
    assert target.read_bytes() == before
    shown = run_tpuctl("config", "show", env=env, cwd=tmp_path)
    runtime_row = next(line for line in shown.stdout.splitlines() if line.startswith("runtime-version"))
    assert runtime_row.split() == ["runtime-version", "tpu-vm-tf-2.18.0-pjrt", str(target)]


def test_defaults_come_from_gcloud(env: dict[str, str], tmp_path: Path) -> None:
    del env["TPUCTL_PROJECT"]
    gcloud = Path(env["CLOUDSDK_CONFIG"])
    (gcloud / "configurations").mkdir(parents=True, exist_ok=True)
    (gcloud / "active_config").write_text("default")
    (gcloud / "configurations" / "config_default").write_text("[core]\nproject = tpuctl-test\n[compute]\nzone = us-central2-b\n")
    result = run_tpuctl("init", "--yes", "--here", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert config.read_file(tmp_path / "tpuctl.toml")["cloud"] == {"project": "tpuctl-test", "zone": "us-central2-b", "accelerator-type": "v4-8"}
    assert "# runtime-version: tpu-vm-tf-2.16.1-pjrt, TensorFlow's image for v4-8 (not written: it follows accelerator-type)\n" in result.stdout
    assert not user_file(env).exists()


def test_the_default_runtime_follows_the_accelerator_type(env: dict[str, str], tmp_path: Path) -> None:
    """Not written, so a later --accelerator-type v4-32 gets the pod image, not the one init showed for v4-8."""
    pod = run_tpuctl("init", "--yes", "--dry-run", "--zone", "us-central2-b", "--accelerator-type", "v4-32", env=env, cwd=tmp_path)
    assert pod.returncode == 0, pod.stderr
    assert "accelerator-type = v4-32\n# runtime-version: tpu-vm-tf-2.16.1-pod-pjrt, TensorFlow's image for v4-32" in pod.stdout
    assert "runtime-version =" not in pod.stdout and not user_file(env).exists()
    wrote = run_tpuctl("init", "--yes", "--zone", "us-central2-b", env=env, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    assert "runtime-version" not in config.read_file(user_file(env))["cloud"]
    shown = run_tpuctl("config", "show", env={**env, "TPUCTL_ACCELERATOR_TYPE": "v4-32"}, cwd=tmp_path)
    runtime_row = next(line for line in shown.stdout.splitlines() if line.startswith("runtime-version"))
    assert runtime_row.split() == ["runtime-version", "tpu-vm-tf-2.16.1-pod-pjrt", "default"]
    named = run_tpuctl("init", "--yes", "--zone", "us-central2-b", env={**env, "TPUCTL_RUNTIME_VERSION": "tpu-vm-base"}, cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert config.read_file(user_file(env))["cloud"]["runtime-version"] == "tpu-vm-base"


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--zone", "mars-north1-a"), "zone mars-north1-a has no Cloud TPUs for project tpuctl-test (choose one of: "),
        (("--zone", "us-central2-b", "--accelerator-type", "v5p-8"), "accelerator type v5p-8 is not offered in us-central2-b (choose one of: v4-8, v4-16"),
        (("--zone", "us-central2-b", "--runtime-version", "tpu-vm-tf-1.15"), "runtime version tpu-vm-tf-1.15 does not exist in us-central2-b (choose one of: "),
        (("--zone", "us-central2-b", "--model-dir", "/tmp/x"), "model-dir '/tmp/x' from --model-dir is not valid"),
    ],
)
def test_bad_answers_list_the_choices_and_write_nothing(env: dict[str, str], tmp_path: Path, flags: tuple[str, ...], words: str) -> None:
    result = run_tpuctl("init", "--yes", *flags, env=env, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert words in result.stderr
    assert not user_file(env).exists()


def test_dry_run_and_no_terminal(env: dict[str, str], tmp_path: Path) -> None:
    dry = run_tpuctl("init", "--yes", "--dry-run", *FLAGS, env=env, cwd=tmp_path)
    assert dry.returncode == 0 and "(dry run:" in dry.stdout and not user_file(env).exists()
    asked = run_tpuctl("init", *FLAGS, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert asked.returncode == 2 and "stdin is not a terminal" in asked.stderr


def test_questions_on_a_terminal_take_the_suggested_defaults(env: dict[str, str], tmp_path: Path) -> None:
    """Enter at project, zone, runtime and the optional bucket keeps their suggestions; the runtime suggested
    is TensorFlow's image for the accelerator type just answered, and taken as suggested it is not written."""
    primary, secondary = os.openpty()
    os.write(primary, b"\n" + b"us-central2-b\n" + b"v4-32\n" + b"\n\n")
    try:
        done = subprocess.run(tpuctl_cmd("init"), stdin=secondary, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    finally:
        os.close(secondary)
        os.close(primary)
    assert done.returncode == 0, done.stderr
    assert "Google Cloud project id (project) [tpuctl-test]:" in done.stderr
    assert "TPU VM software version for new nodes (runtime-version) [tpu-vm-tf-2.16.1-pod-pjrt]:" in done.stderr
    assert config.read_file(user_file(env))["cloud"] == {"project": "tpuctl-test", "zone": "us-central2-b", "accelerator-type": "v4-32"}


def test_init_for_jax_writes_the_types_jax_image_once_unless_a_runtime_is_named(env: dict[str, str], tmp_path: Path) -> None:
    """TensorFlow's default is not written (it follows the type); a JAX image is, checked against the zone."""
    flags = ("--yes", "--zone", "europe-west4-a", "--accelerator-type", "v6e-8", "--framework", "jax")
    wrote = run_tpuctl("init", *flags, env=env, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    assert "runtime-version = v2-alpha-tpuv6e\n" in wrote.stdout
    assert config.read_file(user_file(env))["cloud"]["runtime-version"] == "v2-alpha-tpuv6e"
    again = run_tpuctl("init", *flags, env=env, cwd=tmp_path)
    assert again.returncode == 0 and "nothing changed" in again.stdout
    v5e = ("init", "--yes", "--dry-run", "--zone", "europe-west4-a", "--accelerator-type", "v5litepod-8", "--framework", "jax")
    kept = run_tpuctl(*v5e, env=env, cwd=tmp_path)
    assert kept.returncode == 0 and "runtime-version = v2-alpha-tpuv6e\n" in kept.stdout  # the file's own wins, as ever
    os.remove(user_file(env))
    named = run_tpuctl(*v5e, env=env, cwd=tmp_path)
    assert named.returncode == 0 and "runtime-version = v2-alpha-tpuv5-lite\n" in named.stdout

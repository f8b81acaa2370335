"""`launch --requirements/--setup` where a backend only checks, refuses or stages them: a TPU VM's TensorFlow held to the
image's before anything is made (ssh: --tpu, --new-tpu), GPU hosts free to choose, local workers and Kubernetes pods
told where the packages go instead, Vertex AI installing them with its staged bundle.

Each command runs in this process through the real entry point (tests/standins/cli_calls.py); nothing reaches Google:
a dry run or a refusal is all a case needs, and --tpu's node is the TPU stand-in's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.standins.cli_calls import OFFLINE, Result, in_process
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

IMAGE = "us-docker.pkg.dev/my-project/train/tf:2.21"
TF_LINE = "tensorflow==2.21.0"


@pytest.fixture
def work(home: Path) -> Path:
    """The `home` fixture's folder (train.py, no user config), with a requirements file of the tutorials' kind."""
    (home / "work" / "requirements.txt").write_text(f"# what train.py imports\ntensorflow-datasets>=4.9\nkeras-hub>=0.18\n{TF_LINE}\n")
    (home / "work" / "plain.txt").write_text("tensorflow-datasets>=4.9\nkeras-hub>=0.18\n")
    return home / "work"


def launch(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return in_process("launch", "train.py", *args, env={**OFFLINE, **(env or {})})


def refused(result: Result, *says: str) -> str:
    assert result.code == 2 and result.one_line_error, result.err
    for words in says:
        assert words in result.err
    return result.err


NEW_TPU = ("--new-tpu", "v4-8", "--zone", "us-central2-b", "--project", "my-project")


@pytest.mark.usefixtures("work")
def test_new_tpu_refuses_a_tensorflow_line_before_anything_is_made() -> None:
    err = refused(launch(*NEW_TPU, "--requirements", "requirements.txt"), "Error: requirements.txt:4: 'tensorflow==2.21.0' would install a TensorFlow")
    assert "tpu-vm-tf-2.16.1-pjrt" in err and "--replace-tensorflow" in err  # the image --new-tpu would ask for, v4-8's
    pod = refused(launch("--new-tpu", "v4-32", "--zone", "us-central2-b", "--project", "my-project", "--requirements", "requirements.txt"))
    assert "tpu-vm-tf-2.16.1-pod-pjrt" in pod
    chosen = refused(launch(*NEW_TPU, "--requirements", "requirements.txt", env={"TPUCTL_RUNTIME_VERSION": "tpu-vm-tf-2.18.0-pjrt"}))
    assert "tpu-vm-tf-2.18.0-pjrt" in chosen
    refused(launch(*NEW_TPU, "--setup", "sudo pip3 install -U tf-nightly"), "Error: --setup 'sudo pip3 install -U tf-nightly': 'tf-nightly' would install")


@pytest.mark.usefixtures("work")
def test_replace_tensorflow_lets_the_expert_through_and_a_clean_file_passes() -> None:
    assert launch(*NEW_TPU, "--requirements", "requirements.txt", "--replace-tensorflow", "--dry-run").code == 0
    assert launch(*NEW_TPU, "--requirements", "plain.txt", "--setup", "pip install tensorflow-text", "--dry-run").code == 0


@pytest.mark.usefixtures("work")
def test_gpu_hosts_choose_their_own_tensorflow_but_not_what_they_cannot_reach(work: Path) -> None:
    assert launch("--hosts", "gpu1,gpu2", "--requirements", "requirements.txt", "--setup", "pip install tensorflow", "--dry-run").code == 0
    (work / "editable.txt").write_text("keras-hub\n-e ../mylib\n")
    refused(launch("--hosts", "gpu1,gpu2", "--requirements", "editable.txt", "--dry-run"), "Error: editable.txt:2: '-e ../mylib' asks for an editable install")
    refused(launch("--hosts", "gpu1", "--requirements", "missing.txt", "--dry-run"), "requirements file 'missing.txt' does not exist")


def test_tpu_names_the_image_of_the_vm_it_runs_on(work: Path, google_standin: GoogleStandin, tmp_path: Path) -> None:
    g = google_standin
    with g._lock:  # a node created by someone else, on an image tpuctl did not choose
        g.tpu.add_ready("us-central2-b", "my-tpu", "v4-8", "tpu-vm-tf-2.18.0-pjrt")
    env: dict[str, str | None] = {**standin_env(g, tmp_path), "TPUCTL_CONFIG": str(tmp_path / "none.toml")}
    err = refused(in_process("launch", "train.py", "--tpu", "my-tpu", "--zone", "us-central2-b", "--requirements", "requirements.txt", "--dry-run", env=env))
    assert "requirements.txt:4: 'tensorflow==2.21.0'" in err and "on a TPU VM of image tpu-vm-tf-2.18.0-pjrt" in err


@pytest.mark.usefixtures("work")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--requirements", "plain.txt"), "Error: --requirements is for hosts (--hosts, --tpu, --new-tpu)"),
        (("--setup", "apt-get install -y sox"), "Error: --setup is for hosts"),
        (("--index-url", "https://pypi.example/simple"), "Error: --index-url is for hosts"),
    ],
)
def test_local_workers_refuse_what_only_hosts_install(args: tuple[str, ...], says: str) -> None:
    err = refused(launch(*args, "--dry-run"), says)
    assert "this machine's interpreter" in err


def test_a_launch_table_s_requirements_are_said_to_be_for_hosts_by_a_local_dry_run(work: Path) -> None:
    (work / "tpuctl.toml").write_text('[launch]\nrequirements = "plain.txt"\n')
    text = launch("--dry-run")
    assert text.code == 0, text.err
    assert "[launch] requirements and setup are for hosts (--hosts, --tpu, --new-tpu)" in text.out
    plan = launch("--dry-run", "--json")
    said = "[launch] requirements and setup are for hosts (--hosts, --tpu, --new-tpu): the local workers run in this machine's interpreter as it is"
    assert json.loads(plan.out)["notes"] == [said]
    assert json.loads(launch("--dry-run", "--json", "--workers", "2").out)["notes"] == json.loads(plan.out)["notes"]
    (work / "tpuctl.toml").write_text("[launch]\nworkers = 1\n")
    assert json.loads(launch("--dry-run", "--json").out)["notes"] == []


KUBE = ("--backend", "kubernetes", "--image", IMAGE)


@pytest.mark.usefixtures("work")
@pytest.mark.parametrize("flag", [("--requirements", "plain.txt"), ("--setup", "apt-get install -y sox"), ("--index-url", "https://pypi.example/simple")])
def test_kubernetes_refuses_them_the_image_must_hold_the_packages(flag: tuple[str, str]) -> None:
    for dry in ((), ("--dry-run",)):
        refused(launch(*KUBE, *flag, *dry), f"Error: {flag[0]} is not available with --backend kubernetes: the image must hold the packages", "pip install -r")


def test_kubernetes_says_a_launch_table_s_requirements_are_not_installed(work: Path) -> None:
    (work / "tpuctl.toml").write_text('[launch]\nrequirements = "plain.txt"\n')
    manifest = launch(*KUBE, "--dry-run")
    assert manifest.code == 0, manifest.err
    assert manifest.out.splitlines()[0] == "# [launch] requirements and setup are not installed on Kubernetes: the image must hold the packages"
    assert json.loads(launch(*KUBE, "--dry-run", "--json").out)["notes"] == [manifest.out.splitlines()[0].removeprefix("# ")]


VERTEX = ("--backend", "vertex", "--image", IMAGE, "--project", "my-project")
STAGED = (*VERTEX, "--staging-bucket", "gs://my-bucket/stage")


@pytest.mark.usefixtures("work")
def test_vertex_installs_them_with_the_staged_bundle_and_its_dry_run_says_so() -> None:
    shown = launch(*STAGED, "--requirements", "plain.txt", "--dry-run")
    assert shown.code == 0, shown.err
    said = "installs with the bundle, before the script, plain.txt's requirements (its install_requires): tensorflow-datasets>=4.9, keras-hub>=0.18"
    assert said in shown.out
    # A CPU or GPU image's TensorFlow is the user's to replace; a TPU replica's is its image's.
    assert launch(*STAGED, "--requirements", "requirements.txt", "--dry-run").code == 0
    tpu = (*STAGED, "--accelerator", "v5litepod-8", "--requirements", "requirements.txt")
    err = refused(launch(*tpu, "--dry-run"), "Error: requirements.txt:4: 'tensorflow==2.21.0'")
    assert IMAGE in err
    assert launch(*tpu, "--replace-tensorflow", "--dry-run").code == 0


@pytest.mark.usefixtures("work")
def test_vertex_refuses_what_it_cannot_install(work: Path) -> None:
    refused(launch(*VERTEX, "--requirements", "plain.txt", "--dry-run"), "installs with the staged bundle: add --staging-bucket", "RUN pip install -r")
    (work / "hashed.txt").write_text("Pillow\nkeras-hub==0.18.1 --hash=sha256:" + "a" * 64 + "\n")
    hashed = launch(*STAGED, "--requirements", "hashed.txt", "--dry-run")
    refused(hashed, "Error: hashed.txt:2: Vertex AI installs requirements with the bundle", "drop the --hash")
    refused(launch(*STAGED, "--setup", "apt-get install -y sox", "--dry-run"), "Error: --setup is not available with --backend vertex")
    refused(launch(*STAGED, "--index-url", "https://u:s3cret@pypi.example/simple", "--dry-run"), "Error: --index-url is not available with --backend vertex")


def test_vertex_says_what_a_launch_table_sets_that_it_leaves_alone(work: Path) -> None:
    (work / "tpuctl.toml").write_text('[launch]\nrequirements = "plain.txt"\nsetup = "apt-get install -y sox"\n')
    shown = launch(*VERTEX, "--dry-run")
    assert shown.code == 0, shown.err
    assert "[launch] setup is not run on Vertex AI" in shown.out and "[launch] requirements are not installed without --staging-bucket" in shown.out
    staged = launch(*STAGED, "--dry-run")
    assert "plain.txt's requirements (its install_requires)" in staged.out and "requirements are not installed" not in staged.out



def test_every_template_ships_a_requirements_file_its_readme_installs() -> None:
    """`tpuctl new`'s templates: a requirements.txt tpuctl reads (what the script imports beyond TensorFlow, a
    commented example while that is nothing) that keeps a TPU image's TensorFlow, shown with --requirements."""
    from tpuctl import scaffold
    from tpuctl.inputs.requirements import read_requirements, refuse_image_software

    for template in scaffold.available():
        reqs = read_requirements(str(template.path / "requirements.txt"))
        refuse_image_software(reqs, allowed=False, image="tpu-vm-tf-2.16.1-pjrt")
        assert "--requirements requirements.txt" in (template.path / "README.md").read_text(), template.name

"""Laptop and TPU, the same TensorFlow (tpuctl/launch/tfpair/): what an interpreter has, read from metadata; the pair a
TPU launch says and what differs that matters; the image --new-tpu picks.

Another interpreter is a real one: this one under another spelling of its path. What a rehearsal runs on is
test_rehearsal_runtime.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.standins.cli_calls import in_process
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.tfpair import choice
from tpuctl.launch.tfpair.here import Installed, of_interpreter, parse_version, this_interpreter
from tpuctl.launch.tfpair.pair import Image, imported, lines
from tpuctl.settings import cloud as settings
from tpuctl.tpu import software

LAPTOP = Installed("/laptop/bin/python", {"tensorflow": "2.21.0", "keras": "3.15.1", "tf-keras": "2.21.0"})


def script(folder: Path, source: str) -> str:
    path = folder / "train.py"
    path.write_text(source)
    return str(path)


# --- what an interpreter has ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "version"),
    [("2.21.0", (2, 21, 0)), ("2.16.0rc0", (2, 16, 0)), ("2.22.0.dev20251001", (2, 22, 0)), ("2.15", (2, 15, 0)), ("", None), (None, None), ("x", None)],
)
def test_versions_as_metadata_writes_them(text: str | None, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


def test_another_interpreter_is_read_by_its_own_query_as_this_one_reads_itself() -> None:
    """The same interpreter under another spelling of its path goes through the query: the same distributions."""
    other = os.path.join(os.path.dirname(sys.executable), ".", os.path.basename(sys.executable))
    assert other != sys.executable
    assert of_interpreter(other).versions == this_interpreter().versions


def test_an_interpreter_that_cannot_answer_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TpuctlError, match="cannot run /nonexistent/python"):
        of_interpreter("/nonexistent/python")
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(TpuctlError, match=r"cannot read which TensorFlow .*: Fatal Python error: init_fs_encoding"):
        of_interpreter(str(broken))


def test_what_an_interpreter_has_in_words() -> None:
    assert LAPTOP.describe() == "TensorFlow 2.21.0 with Keras 3.15.1 and tf-keras 2.21.0"
    assert Installed("p", {"tensorflow-cpu": "2.15.1", "keras": "2.15.0"}).describe() == "TensorFlow 2.15.1 with Keras 2.15.0"
    assert Installed("p", {"keras": "3.15.1"}).describe() == "no TensorFlow"


# --- the pair and what differs -----------------------------------------------------------------------------------


def test_the_same_tensorflow_says_the_pair_alone(tmp_path: Path) -> None:
    said = lines(LAPTOP, Image("tpu-vm-tf-2.21.0-pjrt", "as given"), script(tmp_path, "import tensorflow as tf\n"), {}, None, "v5litepod-8")
    assert said == [
        "TensorFlow: here TensorFlow 2.21.0 with Keras 3.15.1 and tf-keras 2.21.0 (/laptop/bin/python: what the script was tried with); "
        "on the TPU TensorFlow 2.21.0 with Keras 3 (tpu-vm-tf-2.21.0-pjrt: as given)"
    ]


def test_an_older_tensorflow_on_the_tpu_is_said_with_how_to_rehearse_under_it(tmp_path: Path) -> None:
    said = lines(LAPTOP, Image("tpu-vm-tf-2.16.1-pjrt", "why"), script(tmp_path, "import tensorflow as tf\n"), {}, None, "v5litepod-8")
    assert len(said) == 2 and said[1].startswith("TensorFlow differs: 2.21 here, 2.16 on the TPU")
    assert "`--rehearse v5litepod-8 --runtime tpu-vm-tf-2.16.1-pjrt`" in said[1]


def test_keras_2_on_the_tpu_beside_keras_3_here_and_what_the_script_imports_that_needs_3(tmp_path: Path) -> None:
    source = "import keras_hub\nfrom keras import ops\nimport tensorflow as tf\n"
    said = lines(LAPTOP, Image("tpu-vm-tf-2.15.1-pjrt", "why"), script(tmp_path, source), {}, None, "v4-8")
    assert said[2] == (
        "Keras differs: TensorFlow 2.21 here brings Keras 3 as tf.keras, TensorFlow 2.15 on the TPU Keras 2: code written for one may fail on the other"
    )
    assert said[3].startswith("train.py uses keras_hub, and the TPU's TensorFlow is 2.15: keras-hub needs Keras 3")
    assert said[4].startswith("train.py uses keras.ops, and the TPU's TensorFlow is 2.15: keras.ops is Keras 3's")
    assert len(said) == 5
    assert lines(LAPTOP, Image("tpu-vm-tf-2.16.1-pjrt", "why"), script(tmp_path, source), {}, None, "v4-8")[2:] == []  # Keras 3 there too


@pytest.mark.parametrize(
    "source",
    [
        "import tensorflow as tf\nest = tf.estimator.Estimator\n",
        "import tensorflow as t2\nt2.compat.v1.estimator.tpu.TPUEstimator\n",
        "import tensorflow_estimator as tfe\n",
        "from tensorflow.estimator import RunConfig\n",
    ],
)
def test_tf_estimator_on_a_tensorflow_that_removed_it(tmp_path: Path, source: str) -> None:
    path = script(tmp_path, source)
    assert "tf.estimator" in imported(path)
    older = Installed("p", {"tensorflow-cpu": "2.15.1", "keras": "2.15.0"})
    said = lines(older, Image("tpu-vm-tf-2.16.1-pjrt", "why"), path, {}, None, "v2-8")
    assert said[-1] == "train.py uses tf.estimator, and the TPU's TensorFlow is 2.16: TensorFlow 2.16 removed tf.estimator (tensorflow-estimator ends at 2.15)"
    assert not any("tf.estimator" in line for line in lines(older, Image("tpu-vm-tf-2.15.1-pjrt", "why"), path, {}, None, "v2-8"))


def test_a_script_that_cannot_be_parsed_imports_nothing_that_can_be_shown(tmp_path: Path) -> None:
    assert imported(script(tmp_path, "import keras_hub\ndef (:\n")) == frozenset()
    assert imported(str(tmp_path / "missing.py")) == frozenset()
    assert imported(script(tmp_path, "estimator = 1\nx.estimator\nfrom . import keras_hub\n")) == frozenset()


def test_tf_keras_here_but_not_on_the_tpu_is_said_where_the_script_uses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    image = Image("tpu-vm-tf-2.16.1-pjrt", "why")
    uses = script(tmp_path, "import tf_keras\n")
    said = lines(LAPTOP, image, uses, {}, None, "v4-8")
    assert said[-1] == (
        "tf-keras 2.21.0 is installed here, and TensorFlow 2.16 on the TPU does not bring it: train.py imports tf_keras; add tf-keras~=2.16.0 to --requirements"
    )
    legacy = lines(LAPTOP, image, script(tmp_path, "import tensorflow\n"), {"TF_USE_LEGACY_KERAS": "1"}, None, "v4-8")
    assert legacy[-1].endswith("train.py runs with TF_USE_LEGACY_KERAS; add tf-keras~=2.16.0 to --requirements")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy\nTF_Keras==2.16.0  # the image's line\n")
    assert not any("does not bring it" in line for line in lines(LAPTOP, image, uses, {}, str(requirements), "v4-8"))
    assert not any("does not bring it" in line for line in lines(LAPTOP, image, script(tmp_path, "import keras\n"), {}, None, "v4-8"))


def test_an_image_without_tensorflow_in_its_name_gets_the_pair_alone(tmp_path: Path) -> None:
    said = lines(LAPTOP, Image("tpu-ubuntu2204-base", "node pod-0000's image"), script(tmp_path, "import keras_hub\n"), {}, None, "v4-8")
    assert len(said) == 1 and said[0].endswith("on the TPU a TensorFlow its name does not say (tpu-ubuntu2204-base: node pod-0000's image)")


# --- the image --new-tpu picks ---------------------------------------------------------------------------------


def test_new_tpu_picks_this_machines_tensorflow_where_an_image_has_it(home: Path) -> None:
    here = Installed("p", {"tensorflow": "2.16.1"})
    images = choice.images_for(["v5litepod-16", "v6e-8"], settings.resolve({}), here)
    assert images["v5litepod-16"] == Image("tpu-vm-tf-2.16.1-pod-pjrt", "picked: this machine's TensorFlow 2.16.1")
    assert images["v6e-8"].name == software.NO_TENSORFLOW_IMAGE and "v6e has no TensorFlow image" in images["v6e-8"].why


def test_new_tpu_picks_the_newest_where_none_has_this_machines_and_says_why(home: Path) -> None:
    (image,) = choice.images_for(["v5litepod-8"], settings.resolve({}), LAPTOP).values()
    assert image.name == "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6"
    assert image.why == "picked: no TPU image has this machine's TensorFlow 2.21 for v5litepod; this is the newest documented for it"
    (default,) = choice.images_for(["v4-8"], settings.resolve({}), Installed("p", {})).values()
    assert default == Image(software.tensorflow_image("v4-8"), "tpuctl's default for v4: this machine has no TensorFlow to match")


def test_a_runtime_version_the_user_set_wins_for_every_type(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUCTL_RUNTIME_VERSION", "tpu-vm-tf-2.15.1-pjrt")
    images = choice.images_for(["v5litepod-8", "v6e-8"], settings.resolve({}), LAPTOP)
    assert set(images.values()) == {Image("tpu-vm-tf-2.15.1-pjrt", "runtime-version from TPUCTL_RUNTIME_VERSION, used as given")}


def test_a_dry_run_of_new_tpu_says_the_image_it_picked_and_the_pair_before_anything_is_made(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "work" / "train.py").write_text("import keras_hub\nimport tensorflow as tf\n")
    args = ["launch", "train.py", "--new-tpu", "v5litepod-8", "--zone", "us-west4-a", "--project", "my-proj", "--python", "python3", "--dry-run", "--json"]
    picked = software.image_for_tensorflow("v5litepod-8", this_interpreter().tensorflow_version or (2, 21, 0))
    assert picked is not None
    result = in_process(*args, env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    assert result.code == 0, result.err
    shown = json.loads(result.out)["remote"]
    assert shown["new_tpu"]["images"] == {"v5litepod-8": {"image": picked.image, "why": f"picked: {picked.why}"}}
    assert shown["tensorflow"][0].startswith(f"TensorFlow: here {this_interpreter().describe()} ({sys.executable}: what the script was tried with)")
    assert shown["tensorflow"][0].endswith(f"({picked.image}: picked: {picked.why})")
    monkeypatch.setenv("TPUCTL_RUNTIME_VERSION", "tpu-vm-tf-2.15.1-pjrt")
    older = in_process(*args, env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    said = json.loads(older.out)["remote"]["tensorflow"]
    assert "(tpu-vm-tf-2.15.1-pjrt: runtime-version from TPUCTL_RUNTIME_VERSION, used as given)" in said[0]
    assert said[-1].startswith("train.py uses keras_hub, and the TPU's TensorFlow is 2.15")
    text = in_process(*args[:-1], env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    assert all(line in text.out.splitlines() for line in said)  # the plain dry run says the same lines


def test_a_launch_on_a_tpu_says_the_pair_of_its_nodes_image(home: Path, google_standin: object) -> None:
    from tests.standins.fixtures import standin_env
    from tests.standins.google_apis import GoogleStandin

    g = google_standin
    assert isinstance(g, GoogleStandin)
    (name,) = g.add_ready_nodes("us-central2-b", 1, prefix="pod", accelerator_type="v4-8", runtime="tpu-vm-tf-2.15.1-pjrt")
    env = {**standin_env(g, home), "TPUCTL_ZONE": "us-central2-b"}
    result = in_process("launch", "train.py", "--tpu", name, "--python", "python3", "--dry-run", "--json", env=dict(env))
    assert result.code == 0, result.err
    said = json.loads(result.out)["remote"]["tensorflow"]
    assert said[0].endswith(f"on the TPU TensorFlow 2.15.1 with Keras 2 (tpu-vm-tf-2.15.1-pjrt: node {name}'s image)")
    assert any(line.startswith("Keras differs") for line in said) == (software.keras_major(this_interpreter().tensorflow_version or (2, 21)) == 3)


# --- a JAX run: JAX's image, no TensorFlow pairing; a TensorFlow run on v6e is told the way there ---------------------

JAX_SCRIPT = 'import os\nos.environ["KERAS_BACKEND"] = "jax"\nimport keras\n'


def test_a_jax_run_takes_each_types_jax_image_and_the_users_own_still_wins(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = choice.images_for(["v5litepod-16", "v6e-8", "v4-32"], settings.resolve({}), LAPTOP, "jax")
    named = {name: image.name for name, image in images.items()}
    assert named == {"v5litepod-16": "v2-alpha-tpuv5-lite", "v6e-8": "v2-alpha-tpuv6e", "v4-32": "tpu-ubuntu2204-base"}
    assert images["v6e-8"].why.startswith("the JAX image for v6e, cloud.google.com/tpu/docs/runtimes: a JAX run takes no TensorFlow image")
    monkeypatch.setenv("TPUCTL_RUNTIME_VERSION", "v2-alpha-tpuv6e")
    assert set(choice.images_for(["v6e-8"], settings.resolve({}), LAPTOP, "jax").values()) == {
        Image("v2-alpha-tpuv6e", "runtime-version from TPUCTL_RUNTIME_VERSION, used as given")
    }


def test_a_dry_run_of_a_jax_run_on_new_tpu_says_its_jax_image_instead_of_the_tensorflow_pair(home: Path) -> None:
    (home / "work" / "train.py").write_text(JAX_SCRIPT)
    (home / "work" / "requirements.txt").write_text("jax[tpu]\nkeras>=3.6\n")
    args = ["launch", "train.py", "--new-tpu", "v6e-8", "--zone", "us-east5-b", "--project", "my-proj", "--python", "python3"]
    args += ["--requirements", "requirements.txt"]
    result = in_process(*args, "--dry-run", "--json", env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    assert result.code == 0, result.err
    shown = json.loads(result.out)["remote"]
    assert shown["new_tpu"]["images"]["v6e-8"]["image"] == "v2-alpha-tpuv6e"
    [said] = shown["tensorflow"]
    assert said.startswith("JAX: on the TPU v2-alpha-tpuv6e (the JAX image for v6e") and "never import TensorFlow" in said
    bare = in_process(*args[:-2], "--dry-run", "--json", env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})  # no --requirements
    assert json.loads(bare.out)["remote"]["tensorflow"][1] == (
        "v2-alpha-tpuv6e has no JAX (cloud.google.com/tpu/docs/runtimes: install the framework): list jax[tpu] and keras in --requirements FILE"
    )
    tensorflow = in_process(*args[:-2], "--framework", "tensorflow", "--dry-run", "--json", env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    assert tensorflow.code != 0 and "KERAS_BACKEND" in tensorflow.err  # the script's own backend is never overridden


def test_a_tensorflow_run_on_v6e_is_told_the_command_that_takes_it_to_keras_3_on_jax(home: Path) -> None:
    (home / "work" / "train.py").write_text("import tensorflow as tf\n")
    args = ["launch", "train.py", "--new-tpu", "v6e-8", "--zone", "us-east5-b", "--project", "my-proj", "--python", "python3", "--dry-run", "--json"]
    result = in_process(*args, env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    assert result.code == 0, result.err
    said = json.loads(result.out)["remote"]["tensorflow"]
    assert said[-1].startswith("TensorFlow on v6e (Trillium) is reported broken")
    assert said[-1].endswith("then `tpuctl launch train.py --framework jax --new-tpu v6e-8 --requirements requirements.txt` (docs/jax.md)")
    v5e = in_process(*[arg if arg != "v6e-8" else "v5litepod-8" for arg in args], env={"TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})
    assert not any("--framework jax" in line for line in json.loads(v5e.out)["remote"]["tensorflow"])


def test_a_launch_on_a_v6e_node_points_a_tensorflow_run_to_jax_and_a_jax_run_says_its_image(home: Path, google_standin: object) -> None:
    from tests.standins.fixtures import standin_env
    from tests.standins.google_apis import GoogleStandin

    g = google_standin
    assert isinstance(g, GoogleStandin)
    (name,) = g.add_ready_nodes("us-east1-d", 1, prefix="trillium", accelerator_type="v6e-8", runtime="v2-alpha-tpuv6e")
    env = {**standin_env(g, home), "TPUCTL_ZONE": "us-east1-d"}
    (home / "work" / "train.py").write_text("import tensorflow as tf\n")
    result = in_process("launch", "train.py", "--tpu", name, "--python", "python3", "--dry-run", "--json", env=dict(env))
    assert result.code == 0, result.err
    assert "`tpuctl launch train.py --framework jax --new-tpu v6e-8 --requirements requirements.txt`" in json.loads(result.out)["remote"]["tensorflow"][-1]
    (home / "work" / "train.py").write_text(JAX_SCRIPT)
    jax_run = in_process("launch", "train.py", "--tpu", name, "--python", "python3", "--dry-run", "--json", env=dict(env))
    assert json.loads(jax_run.out)["remote"]["tensorflow"] == [
        f"JAX: on the TPU v2-alpha-tpuv6e (node {name}'s image); this machine's TensorFlow is not paired with it: a JAX run's workers never import TensorFlow",
        "v2-alpha-tpuv6e has no JAX (cloud.google.com/tpu/docs/runtimes: install the framework): list jax[tpu] and keras in --requirements FILE",
    ]

"""The launcher's side of the hosts' environments that needs no host: the lock as read from a host's answer, the TPU VM's
TensorFlow rule on what a resolution pulled in, what a dry run shows, and credentials in an index URL kept out of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuctl
from tpuctl.backends.ssh.environment.hosts import Console, Environments
from tpuctl.backends.ssh.environment.lock import Lock
from tpuctl.backends.ssh.environment.spec import EnvSpec, render
from tpuctl.inputs.errors import TpuctlError
from tpuctl.runs.folder import RunFolder
from tpuctl.ssh.client_args import SshOptions

SECRET = "s3cret-t0ken"
INDEX = f"https://ci-user:{SECRET}@packages.example.com/simple/"


def wheel(name: str, version: str = "1.0", **changes: Any) -> dict[str, Any]:
    return {"name": name, "version": version, "file": f"{name.replace('-', '_')}-{version}-py3-none-any.whl", "sha256": "a" * 64, "size": 10} | changes


@pytest.mark.parametrize(
    "bad",
    [
        [wheel("x", file="../../.ssh/authorized_keys.whl")],
        [wheel("x", file="x-1.0.tar.gz")],
        [wheel("x", sha256="A" * 64)],
        [wheel("x", size=-1)],
        [wheel("x", size=True)],
        [wheel("Not_Normalised")],
        [wheel("x"), wheel("x", "2.0")],
        {"x": 1},
        [["x"]],
    ],
)
def test_a_lock_takes_nothing_a_resolution_does_not_write(bad: object) -> None:
    with pytest.raises(ValueError):
        Lock.of(bad)


def test_a_lock_s_digest_is_its_wheels_not_their_order() -> None:
    one, two = Lock.of([wheel("a"), wheel("b")]), Lock.of([wheel("b"), wheel("a")])
    assert one == two and one.digest == two.digest and len(one.digest) == 32
    assert Lock.of([wheel("a"), wheel("b", sha256="b" * 64)]).digest != one.digest


def environments(spec: EnvSpec) -> Environments:
    console = Console(notice=lambda line: None, show=lambda host, line: None, folder=RunFolder(Path("/nonexistent")))
    return Environments(spec, SshOptions(), "python3", console, 60.0, "/work")


def spec(**changes: Any) -> EnvSpec:
    given = {"requirements": "requirements.txt", "pip_text": "numpy\nkeras-hub\n", "setup": None, "index_url": INDEX, "replace_tensorflow": False, "tpu": True}
    return EnvSpec(**{**given, "bucket": None, "lines": (("numpy", 1), ("keras-hub", 2)), **changes})


def test_a_lock_that_would_replace_a_tpu_vms_tensorflow_is_refused_naming_what_pulled_it_in() -> None:
    """A requirement that pulls TensorFlow in (keras-hub's tensorflow-text needs one): refused on a TPU VM before any
    host installs a thing, naming the version and what required it; --replace-tensorflow, or hosts that are no TPU VM's,
    let it be."""
    lock = Lock.of(
        [wheel("numpy", "2.0"), wheel("keras-hub", "0.18.1"), wheel("tensorflow-text", "2.21.0"), wheel("tensorflow", "2.21.0")],
        {"keras-hub": ["tensorflow-text"], "tensorflow-text": ["tensorflow", "numpy"], "tensorflow": ["numpy"], "numpy": []},
    )
    with pytest.raises(TpuctlError) as refused:
        environments(spec())._refuse_replacing(lock, "host1")
    message = str(refused.value)
    # keras-hub's line, not numpy's (which tensorflow needs, but which pulls nothing in)
    assert "resolves on host1 to tensorflow 2.21.0 (required by tensorflow-text), pulled in by requirements.txt:2, which" in message
    assert "--replace-tensorflow" in message
    assert refused.value.exit_code == 2
    environments(spec(replace_tensorflow=True))._refuse_replacing(lock, "host1")
    environments(spec(tpu=False))._refuse_replacing(lock, "host1")


def test_a_jax_runs_lock_brings_jax_and_libtpu_and_only_a_tpu_build_of_tensorflow_is_refused() -> None:
    """A JAX run's image has no framework: jax[tpu]'s jaxlib and libtpu are what its lock is for; a TPU build of
    TensorFlow pulled in beside them would hold the TPU JAX needs."""
    stack = [wheel("jax", "0.10.2"), wheel("jaxlib", "0.10.2"), wheel("libtpu", "0.0.42"), wheel("keras", "3.15.1")]
    stack.append(wheel("tensorflow-cpu", "2.21.0"))
    environments(spec(framework="jax"))._refuse_replacing(Lock.of(stack), "host1")
    with pytest.raises(TpuctlError, match=r"to jaxlib 0\.10\.2"):
        environments(spec())._refuse_replacing(Lock.of(stack), "host1")  # a TensorFlow run's rule is unchanged
    fights = Lock.of([*stack, wheel("tensorflow-tpu", "2.20.0")], {"keras-hub": ["tensorflow-tpu"]})
    with pytest.raises(TpuctlError) as refused:
        environments(spec(framework="jax"))._refuse_replacing(fights, "host1")
    message = str(refused.value)
    assert "to tensorflow-tpu 2.20.0 (required by keras-hub)" in message and "the image's accelerator stack" in message
    assert refused.value.hint is not None and "tensorflow-cpu" in refused.value.hint
    said = render(spec(framework="jax").describe())
    assert "environment: a lock that adds or replaces a TPU build of TensorFlow (it would fight JAX for the TPU) is refused before anything is installed" in (
        said
    )


def test_text_from_a_host_never_shows_the_index_credentials() -> None:
    """pip's words may quote the index URL whole, or the user name or the password alone."""
    scrub = spec().scrub
    for text in (f"Looking in indexes: {INDEX}", f"401 for ci-user:{SECRET}", f"token {SECRET} refused", "https://tok3n-only@host/simple"):
        shown = scrub(text)
        assert SECRET not in shown and "tok3n-only" not in shown and "ci-user" not in shown, shown
    assert spec().shown_index.startswith("https://<hidden") and SECRET not in spec().shown_index


def test_the_request_a_host_files_its_environment_under_changes_with_what_pip_would_do() -> None:
    base = spec()
    assert base.request("python3") == spec().request("python3")
    others = {spec(pip_text="keras-hub==0.18\n").request("python3"), spec(index_url=None).request("python3"), base.request("/opt/py/bin/python")}
    assert base.request("python3") not in others and len(others) == 3
    assert base.request("python3") == spec(setup="apt-get install -y sox").request("python3")  # --setup: a marker in it


def test_a_dry_run_shows_the_environment_step_with_the_index_hidden(tmp_path: Path) -> None:
    """Before anything connects: the requirements' digest, --setup, the index without its credentials, where the
    environments and the wheels will be, in the text and in --json."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "requirements.txt").write_text("tpuctl-test-beta>=1.0  # comment\n")
    args = ["launch", str(tmp_path / "train.py"), "--hosts", "a,b", "--requirements", str(tmp_path / "requirements.txt"), "--setup", "echo ready"]
    args += ["--index-url", INDEX, "--model-dir", "gs://my-bucket/runs/1", "--dry-run"]
    text = run_tpuctl(*args, timeout=60)
    assert text.returncode == 0, text.stderr
    assert SECRET not in text.stdout + text.stderr and "ci-user" not in text.stdout
    assert "environment: " in text.stdout and "resolved once on the first host from https://<hidden" in text.stdout
    assert "gs://my-bucket/tpuctl/wheels/<LOCK-HASH>/, every host installing exactly them from there with no index" in text.stdout
    assert "--setup 'echo ready' once per host" in text.stdout
    unbucketed = run_tpuctl(*[arg for arg in args if not arg.startswith("gs://") and arg != "--model-dir"], timeout=60)
    assert "one host of each Python installing exactly them with no index, the others of that Python getting a copy" in unbucketed.stdout
    shown = run_tpuctl(*args, "--json", timeout=60)
    assert shown.returncode == 0 and SECRET not in shown.stdout
    environment = json.loads(shown.stdout)["remote"]["environment"]
    assert environment["requirements_lines"] == 1 and environment["setup"] == "echo ready" and len(environment["requirements_digest"]) == 64
    assert environment["env"] == "~/.cache/tpuctl/envs/<KEY>/" and environment["wheels"] == "gs://my-bucket/tpuctl/wheels/<LOCK-HASH>/"


@pytest.mark.parametrize(
    ("ready", "holders", "expected"),
    [
        ({}, ["h1"], {"A": "h1", "B": "h3"}),  # the host keeping the wheels builds its key's; the first of another key builds that
        ({}, [], {"A": "h1", "B": "h3"}),  # a recreated VM: nobody keeps them (this machine sends them to the builder)
        ({}, ["h2"], {"A": "h2", "B": "h3"}),  # a host keeping the wheels saves sending them
        ({"h2": "/e/A/bin/python"}, ["h1"], {"A": "h2", "B": "h3"}),  # a host that has it ready is copied from: no build
    ],
    ids=["first-host", "no-holder", "holder", "ready-host"],
)
def test_each_python_s_environment_is_built_once_or_copied_from_a_host_that_has_it(ready: dict[str, str], holders: list[str], expected: dict[str, str]) -> None:
    """Hosts h1, h2, h4 share a Python (key A), h3 has another (key B): one source per key; every other host of a key
    gets a copy of its source's environment."""
    from tpuctl.backends.ssh.environment.copies import builders

    keys = {"h1": "A", "h2": "A", "h3": "B", "h4": "A"}
    todo = [host for host in keys if host not in ready]
    assert builders(todo, keys, ready, holders) == expected


def test_pip_s_words_about_a_requirement_point_at_its_line_in_the_file() -> None:
    """pip names a requirement as the hosts got it (spelled as the file spells it, with its version): the error names
    the file's line of each project it names, whatever the spelling, and none for a project pulled in by another."""
    named = spec(lines=(("keras-hub", 2), ("tensorflow-text", 5), ("my-pkg", 7)))
    assert named.lines_named_in("no wheel of keras_hub==0.18 for this host's Python") == " (requirements.txt:2)"
    said = "conflicting requirements: The user requested tensorflow-text>=2.19; My.Pkg 1.0 depends on tensorflow-text<2"
    assert named.lines_named_in(said) == " (requirements.txt:5, 7)"
    assert named.lines_named_in("no wheel of grpcio>=1.60 for this host's Python") == ""
    assert named.lines_named_in("no wheel of keras-hubx==1") == ""

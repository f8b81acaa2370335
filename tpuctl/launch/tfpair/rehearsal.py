"""Which TensorFlow a `--rehearse` runs on, so that its verdict is about the TensorFlow the TPU will run.

The image it stands for, first found of:
- `--runtime IMAGE`; `--runtime local` names none: the rehearsing interpreter's TensorFlow as it is.
- a runtime-version setting (TPUCTL_RUNTIME_VERSION, tpuctl.toml, the user's file: the image `--new-tpu` and `create`
  use);
- the image `--new-tpu ACCELERATOR` would pick for the rehearsing interpreter's TensorFlow (choice.py): the one with
  its X.Y, where none has it the generation's newest, said so with the way out (`--runtime local`).
Where the rehearsing interpreter (this one, or --python) has the image's X.Y it runs there; otherwise in a cached
environment with the CPU build of that line (envs.py), built before the run from --python (default: this Python), or the
interpreter TPUCTL_REHEARSE_PYTHON_<X>_<Y> names. An image whose name carries no TensorFlow stands for nothing: the
rehearsing interpreter's TensorFlow, said so.

The run's --requirements (held to the TPU VMs' TensorFlow rule, tpuctl/inputs/requirements.py) go into that
environment; where the rehearsal runs on an interpreter as it is, into a venv over it with its site-packages visible, as
the TPU hosts' environments are made, so the script sees the packages the hosts will.

None of this applies to a JAX script (`job.framework == "jax"`): it rehearses on the rehearsing interpreter's own JAX,
said so, as one process per host of the slice where it has few hosts (`jax_processes`; tpuctl/runtime/jax_rehearsal/).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tpuctl.cluster import worker_contract as contract
from tpuctl.inputs import requirements
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.redact import url_credentials_hidden
from tpuctl.inputs.requirements import Requirements
from tpuctl.launch import framework
from tpuctl.launch.job import Job, parse_env
from tpuctl.launch.tfpair import choice, envs
from tpuctl.launch.tfpair.here import TENSORFLOW_DISTRIBUTIONS, Installed, of_interpreter
from tpuctl.settings import cloud as settings
from tpuctl.tpu import accelerators, software

if TYPE_CHECKING:
    from tpuctl.cloud.nodes.nodespec import NodeSpec

RUNTIME = "runtime-version"
LOCAL = "local"  # --runtime local: the rehearsing interpreter's TensorFlow, no image's
# A JAX rehearsal of a slice with up to this many hosts runs one process per host (each a JAX process on this machine's
# CPU, joined as one cluster); a larger slice runs in one process with all of its devices.
MAX_HOST_PROCESSES = 8


@dataclass(frozen=True)
class Runtime:
    """What a rehearsal runs on: the worker's interpreter, the image it stands for (None: no image's TensorFlow), the
    environment to build first (None: none), and what the dry run and the run say of it."""

    python: str
    image: str | None
    env: envs.Env | None
    lines: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        env = self.env
        built: dict[str, object] | None = None
        if env is not None:
            index = url_credentials_hidden(env.index_url) if env.index_url else None
            over = env.base_python if env.over_base else None
            built = {"folder": str(env.folder), "pins": list(env.pins), "constraints": list(env.constraints), "over": over}
            built.update(index_url=index, ready=env.ready)
        return {"python": self.python, "image": self.image, "environment": built, "said": list(self.lines)}

    def prepare(self, notice: Callable[[str], None]) -> None:
        """Say what the rehearsal runs on, and build its environment where it is not built yet."""
        for line in self.lines:
            notice(line)
        if self.env is not None:
            envs.ensure(self.env, notice)


@dataclass(frozen=True)
class Target:
    """The image a rehearsal stands for (None: none, `why` says so) and why that one; `picked`: tpuctl chose it."""

    image: str | None
    why: str
    picked: bool = False


def image_of(name: str) -> software.Image | None:
    """A --runtime's image with TensorFlow, read from its name (None: `local`); anything else is a one-line refusal."""
    if name == LOCAL:
        return None
    image = software.read_image(name)
    if image is None:
        raise TpuctlError(
            f"--runtime {name}: not a TPU VM image with TensorFlow (tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se]): there is no TensorFlow to rehearse under",
            hint=f"e.g. --runtime tpu-vm-tf-2.15.1-pjrt (https://cloud.google.com/tpu/docs/runtimes), or --runtime {LOCAL} for this machine's TensorFlow",
        )
    return image


@dataclass(frozen=True)
class StandIn:
    """A launch's options once a rehearsal stands in for the TPU it names; `why`: where its image comes from, where
    tpuctl found it (None: --runtime or the rehearsal's own choice); `left_out`: the TPU's own flags it ignores."""

    params: Mapping[str, Any]
    given: frozenset[str]
    why: str | None = None
    left_out: tuple[str, ...] = ()


def stand_in(params: Mapping[str, Any], given: frozenset[str], tpu_options: Mapping[str, tuple[str, Any]], script: str | None = None) -> StandIn:
    """--rehearse added to a launch on a TPU (--tpu NAME, --new-tpu TYPE) rehearses that launch here, under the image
    that TPU runs: --runtime where given; else --new-tpu's, which is the image a rehearsal picks by itself; else node
    NAME's from the spec tpuctl saved when it made the node (known without a cloud call; for a node tpuctl did not make,
    a one-line refusal asks for its image). Nothing reaches the TPU API: the TPU's own options (`tpu_options`: name ->
    (flag, default), the ssh backend's) are set back and said as left out. A JAX script (`script` read as prepare reads
    it, tpuctl/launch/framework.py) runs no image's TensorFlow: no image is looked up for it."""
    accelerator, name, new = params.get("rehearse"), params.get("tpu_name"), params.get("new_tpu")
    if accelerator is None or (name is None and new is None):
        return StandIn(params, given)
    values = dict(params)
    why = None
    if new is not None and str(new) != str(accelerator):
        raise TpuctlError(f"--rehearse {accelerator} with --new-tpu {new}: a rehearsal stands in for the TPU the launch makes", hint=f"--rehearse {new}")
    if name is not None and params.get("runtime") is None:
        jax = _jax_script(params, script)
        spec = _saved_spec(str(name), params.get("project"), params.get("tpu_zone"))
        if spec is None and not jax:
            raise TpuctlError(
                f"--rehearse with --tpu {name}: tpuctl has no saved spec of node {name} (one `tpuctl create` made), so its image is not known here",
                hint=f"`--rehearse {accelerator} --runtime IMAGE` with its image (`tpuctl list` shows it)",
            )
        if spec is not None and spec.accelerator_type and spec.accelerator_type != accelerator:
            raise TpuctlError(f"--rehearse {accelerator} with --tpu {name}, a {spec.accelerator_type}", hint=f"--rehearse {spec.accelerator_type}")
        if spec is not None and not jax:
            values["runtime"], why = spec.runtime_version, f"node {name}'s image, from its saved spec"
    left_out = tuple(flag for option, (flag, _) in tpu_options.items() if option in given)
    values.update({option: default for option, (_, default) in tpu_options.items()})
    return StandIn(values, given - set(tpu_options), why, left_out)


def _jax_script(params: Mapping[str, Any], script: str | None) -> bool:
    """Whether the launch runs `script` as JAX; its refusals (a KERAS_BACKEND tpuctl does not run) come as prepare's."""
    if script is None:
        return False
    with contextlib.suppress(TpuctlError):
        return framework.choose(str(params.get("framework") or "auto"), script, parse_env(tuple(params.get("env") or ())))[0] == contract.JAX
    return False


def _saved_spec(name: str, project: object, zone: object) -> NodeSpec | None:
    """The spec tpuctl saved of node `name` where the project (and the zone, or a single saved one) is known; None
    where it is not, or the file cannot be read (the refusal then asks for the image)."""
    from tpuctl.cloud.nodes import nodespec

    with contextlib.suppress(TpuctlError):
        project = project or settings.picked("project").value
        if not isinstance(project, str):
            return None
        zones = [zone] if isinstance(zone, str) else nodespec.saved_zones(project, name)
        return nodespec.load(project, zones[0], name) if len(zones) == 1 else None
    return None


def target(job: Job, installed: Installed) -> Target:
    """The image a rehearsal of `job` stands for, `installed` the rehearsing interpreter's (see the module's docstring)."""
    if job.runtime == LOCAL:
        return Target(None, f"--runtime {LOCAL}: its TensorFlow as it is, no TPU image's")
    if job.runtime is not None:
        return Target(job.runtime, job.runtime_of or "--runtime")
    setting = settings.picked(RUNTIME)
    if setting.value is not None:
        return Target(setting.value, f"runtime-version from {setting.source}")
    accelerator = str(job.rehearse)
    picked = choice.image_for(accelerator, installed)
    if picked is None:
        return Target(None, f"tpuctl knows no TPU image for {accelerator}")
    return Target(picked.name, f"the image `--new-tpu {accelerator}` would run: {picked.why.removeprefix('picked: ')}", picked=True)


def jax_processes(job: Job) -> Job:
    """A JAX rehearsal's processes and each one's CPU devices: one process per host of the slice, each with that host's
    devices as JAX sees them (one per TensorCore on v2/v3 and TPU7x, one per chip on v4/v5p's megacore and on v5e/v6e:
    accelerators.jax_devices), up to MAX_HOST_PROCESSES hosts; past that one process with the whole slice's devices."""
    refused = "--requirements" if job.requirements else "--index-url" if job.index_url else None
    if refused is not None:
        raise TpuctlError(
            f"{refused} with a JAX rehearsal: it runs on this machine's JAX as it is, in no environment of its own",
            hint="install them into this interpreter (`pip install -r FILE`), or name another with --python",
        )
    devices, hosts = accelerators.jax_devices(str(job.rehearse))
    if hosts <= MAX_HOST_PROCESSES:
        return replace(job, workers=hosts, simulate_devices=devices // hosts)
    return replace(job, workers=1, simulate_devices=devices)


def resolve(job: Job) -> Runtime | None:
    """A rehearsing job's runtime (None for any other launch); its environment is planned, not built."""
    if job.rehearse is None:
        return None
    found = _jax_runtime(job) if job.framework == contract.JAX else _resolved(job)
    if not job.left_out:
        return found
    ignored = f"rehearsing here what the launch would run on a TPU: {', '.join(job.left_out)} left out (the TPU's, not a rehearsal's)"
    return replace(found, lines=(ignored, *found.lines))


def _jax_runtime(job: Job) -> Runtime:
    """A JAX script rehearses on its interpreter's JAX as it is: no TPU image's TensorFlow stands for anything there."""
    version = _jax_version() if job.python == sys.executable else None
    jax = f"JAX {version}" if version else "JAX"
    devices = job.simulate_devices
    each = f"{job.workers} processes, one per host, {devices} CPU devices each" if job.workers > 1 else f"one process, {devices} CPU devices"
    said = f"rehearsing on this machine's {jax} ({job.python}): a JAX run, so no TPU image's TensorFlow applies; {each}"
    return Runtime(str(job.python), None, None, (said,))


def _jax_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        return None


def _resolved(job: Job) -> Runtime:
    installed = of_interpreter(job.python)
    aim = target(job, installed)
    reqs = requirements.checked(job.requirements, None, tpu_vm=True, image=aim.image, allowed=job.replace_tensorflow)
    image = software.read_image(aim.image) if aim.image is not None else None
    if image is None:  # none named, or an image whose name carries no TensorFlow
        why = aim.why if aim.image is None else f"{aim.image} ({aim.why}) has no TensorFlow to stand for"
        return _as_it_is(job, installed, None, f"rehearsing on {installed.describe()} ({job.python}): {why}", reqs)
    named, line = aim.image, f"{image.tensorflow[0]}.{image.tensorflow[1]}"
    mine = installed.tensorflow_version
    if mine is not None and mine[:2] == image.tensorflow[:2]:
        said = f"rehearsing under {named} ({aim.why}) on {installed.describe()} ({job.python}): the same TensorFlow {line}"
        return _as_it_is(job, installed, named, said, reqs)
    given = envs.override(image.tensorflow)
    if given is not None:
        variable, python = given
        found = of_interpreter(python)
        have = found.tensorflow_version
        if have is None or have[:2] != image.tensorflow[:2]:
            shown = "none" if have is None else ".".join(map(str, have))
            hint = f"name an interpreter with TensorFlow {line}, or unset {variable}"
            raise TpuctlError(f"{variable}={python} has TensorFlow {shown}, not {line}", hint=hint)
        return _as_it_is(job, found, named, f"rehearsing under {named}'s TensorFlow {line} ({aim.why}) with {python} ({variable})", reqs)
    env = envs.planned(image.tensorflow, job.python, _pip_lines(reqs), index_url=job.index_url)
    state = "built" if env.ready else "built before the run starts, once: about 1.6 GB"
    said = f"rehearsing under {named}'s TensorFlow {line} ({aim.why}) in its environment {env.folder} ({state})"
    if aim.picked:
        said += f"; --runtime {LOCAL} rehearses on {installed.describe()} ({job.python}) instead"
    return Runtime(str(env.python), named, env, (said, *_requirements_line(job, env, reqs)))


def _as_it_is(job: Job, installed: Installed, image: str | None, said: str, reqs: Requirements | None) -> Runtime:
    """A rehearsal on an interpreter as it is; the run's requirements, where there are some, in a venv over it that keeps
    its TensorFlow."""
    if reqs is None or not reqs.lines:
        return Runtime(installed.python, image, None, (said,))
    kept = [f"{name}=={version}" for name, version in installed.versions.items() if name in TENSORFLOW_DISTRIBUTIONS]
    env = envs.over(installed.python, kept, _pip_lines(reqs), index_url=job.index_url)
    return Runtime(str(env.python), image, env, (said, *_requirements_line(job, env, reqs)))


def _pip_lines(reqs: Requirements | None) -> tuple[str, ...]:
    """The requirements as pip gets them here: without their --hash options, as with one pip would want a hash of
    TensorFlow and of each of its dependencies too (hash-checking is all or nothing); the hosts check them."""
    return tuple(line.text for line in reqs.lines) if reqs is not None else ()


def _requirements_line(job: Job, env: envs.Env, reqs: Requirements | None) -> tuple[str, ...]:
    if reqs is None or not reqs.lines:
        return ()
    state = "built" if env.ready else "built before the run starts, once"
    where = f"a venv over {env.base_python} that keeps its TensorFlow" if env.over_base else "that environment"
    index = f" from {url_credentials_hidden(job.index_url)}" if job.index_url else ""
    said = f"the run's requirements ({reqs.source}) are installed{index} into {where}: {env.folder} ({state})"
    if any(line.hashes for line in reqs.lines):
        said += "; their --hash options are checked on the hosts, not here (pip would want one for TensorFlow too)"
    return (said,)

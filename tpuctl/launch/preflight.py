"""The cheap checks `tpuctl launch` runs before any worker starts, each one whose failure alone decides the outcome.

Without them such a launch fails late and in every worker at once (N tracebacks
from N processes, or a wait for the start timeout), and the one thing to fix is
buried. Only what costs a few milliseconds and cannot be wrong is checked here:
the workers' interpreter runs and finds TensorFlow (unless `--strategy none`,
where the runtime never imports it), and no chip TensorFlow refuses outright
(TPU7x) sits on the machine when the workers will build a TPU strategy. A JAX
run (job.framework "jax") imports no TensorFlow and builds no strategy: its
interpreter must find jax instead (and keras where the script imports it),
found with find_spec as TensorFlow is, never imported here; its chips are JAX's.
`tpuctl doctor` does the full check; every failure here names the doctor
command for that interpreter and host. `--no-preflight` skips them all.

Where they run: a local launch checks here, in a thread while the launch loads
the rest of its machinery (the TensorFlow check starts `--python`'s interpreter
once; the launcher's own interpreter answers in-process); over ssh each host's agent checks
during its hello (tpuctl/backends/ssh/agent.py), with what to check taken from
`remote_hello` (a JAX run's agents run in the run's --requirements environment where
there is one, built before they start: its jax is found there). Kubernetes and Vertex AI
workers run an image the user built: nothing is checked there.

A TensorFlow run aimed at a TPU TensorFlow is leaving (v6e, TPU7x: software.CHIPS)
is told the way there, Keras 3 on JAX, with the command (`leaving_tensorflow`).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import threading

from tpuctl.cluster import worker_contract as contract
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import PreflightFailed, TpuctlError, one_line
from tpuctl.launch.job import Job
from tpuctl.safety import reaper
from tpuctl.tpu.software import CHIPS, GOOGLE_PCI_VENDOR, JAX_GUIDE, Chip, jax_launch

# An interpreter that cannot even start within this is itself the finding.
INTERPRETER_TIMEOUT_S = 20.0
NO_TENSORFLOW = 3  # the check's exit status when find_spec finds nothing
# find_spec, not an import: TensorFlow's import costs seconds, its absence is known from sys.path alone.
FIND_TENSORFLOW = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('tensorflow') else {NO_TENSORFLOW})"
TPU_STRATEGIES = ("tpu", "auto")  # auto builds a TPU strategy wherever the machine has TPU chips
# A JAX run's modules, each found as TensorFlow is (find_spec: nothing imported); exit status: a bit per missing module.
FIND_JAX = (
    "import importlib.util, sys; "
    "sys.exit(sum(1 << i for i, name in enumerate(sys.argv[1:]) if importlib.util.find_spec(name) is None))"
)
# tpuctl's own extra brings both here (pyproject.toml: jax = ["jax>=0.4.30", "keras>=3.6"]); a TPU VM takes jax[tpu],
# which brings the libtpu that jax release pins (its own metadata: libtpu==...; extra == "tpu"), in --requirements.
JAX_HERE = "pip install 'tpuctl[jax]'"
JAX_ON_TPU_VMS = "jax[tpu] in --requirements on TPU VMs"


def wants_tensorflow(job: Job) -> bool:
    """Every strategy but `none` has the runtime import TensorFlow before the script runs; a JAX run never does."""
    return job.framework != contract.JAX and job.strategy != "none"


def wants_jax(job: Job) -> list[str]:
    """The modules a JAX run's workers need: jax, and keras where the script imports it (its source, read with ast)."""
    if job.framework != contract.JAX:
        return []
    from tpuctl.launch import framework

    keras = os.path.isfile(job.script) and framework.read(job.script).line_of("keras") is not None  # a FIFO is never read
    return ["jax", *(["keras"] if keras else [])]


def wants_chips(job: Job) -> bool:
    """A rehearsal runs on the CPU, whatever chips the machine has; a JAX run builds no TensorFlow strategy."""
    return job.rehearse is None and job.framework != contract.JAX and job.strategy in TPU_STRATEGIES


def refused_chips() -> dict[str, Chip]:
    """The chips TensorFlow cannot run on at all, by device id as sysfs writes it ("0x0076")."""
    return {f"0x{chip.device_id:04x}": chip for chip in CHIPS.values() if chip.tensorflow == "fail"}


def doctor_hint(doctor: str) -> str:
    return f"`{doctor}` checks it in full; --no-preflight skips this check"


def local_doctor(python: str, framework: str = contract.TENSORFLOW) -> str:
    return f"tpuctl doctor --python {shlex.quote(python)}" + (" --framework jax" if framework == contract.JAX else "")


def refusal(chip: Chip, script: str) -> str:
    """Why the workers cannot run TensorFlow on this chip, and the way they can run the script's model there: Keras 3 on
    JAX, on the same hosts (TPU7x is made outside the Cloud TPU API: no --new-tpu takes it)."""
    return f"{chip.why}; Keras 3 on JAX runs there: port the script to it, then `{jax_launch(script, None)}` ({JAX_GUIDE})"


def check_chips(doctor: str, script: str) -> None:
    """A chip TensorFlow refuses, on this machine's PCI bus (read in-process: sysfs, a few files)."""
    from tpuctl.doctor.probe import pci_devices

    refused = refused_chips()
    vendor = f"0x{GOOGLE_PCI_VENDOR:04x}"
    for device in pci_devices():
        chip = refused.get(device["device"]) if device["vendor"] == vendor else None
        if chip is not None:
            raise PreflightFailed(f"this machine's TPU is {chip.name}: {refusal(chip, script)}", hint=doctor_hint(doctor))


def no_tensorflow(python: str, doctor: str) -> PreflightFailed:
    return PreflightFailed(f"no TensorFlow for the workers' interpreter {python}", hint=doctor_hint(doctor))


def check_tensorflow(python: str, env: dict[str, str], doctor: str) -> None:
    """The workers' interpreter starts and finds TensorFlow, in the environment the workers get (`--env` included)."""
    done = _ask(python, [python, "-c", FIND_TENSORFLOW], env, doctor)
    if done.returncode == NO_TENSORFLOW:
        raise no_tensorflow(python, doctor)
    _ran(python, done, doctor)


def _ask(python: str, argv: list[str], env: dict[str, str], doctor: str) -> subprocess.CompletedProcess[bytes]:
    """One short question to the workers' interpreter, bounded; one that cannot start is the finding."""
    try:
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        return reaper.run(argv, timeout=INTERPRETER_TIMEOUT_S, env=env, check=False, **quiet)
    except subprocess.TimeoutExpired:
        raise PreflightFailed(
            f"the workers' interpreter {python} did not start within {INTERPRETER_TIMEOUT_S:g}s", hint=doctor_hint(doctor)
        ) from None
    except OSError as err:
        raise PreflightFailed(f"cannot run the workers' interpreter {python}: {err.strerror or err}", hint=doctor_hint(doctor)) from None


def _ran(python: str, done: subprocess.CompletedProcess[bytes], doctor: str) -> None:
    """Any other failure of the question: the interpreter itself cannot run (a broken install, a missing library)."""
    if done.returncode:
        said = one_line(done.stderr.decode("utf-8", "replace"), last=True) or exit_words(done.returncode)
        raise PreflightFailed(f"the workers' interpreter {python} cannot run: {said}", hint=doctor_hint(doctor))


def no_jax(python: str, missing: list[str], doctor: str) -> PreflightFailed:
    return PreflightFailed(
        f"no {' or '.join(missing)} for the workers' interpreter {python} (a JAX run): {JAX_HERE} ({JAX_ON_TPU_VMS})", hint=doctor_hint(doctor)
    )


def check_jax(python: str, modules: list[str], env: dict[str, str], doctor: str) -> None:
    """The workers' interpreter starts and finds each of `modules`, in the environment the workers get; none imported."""
    done = _ask(python, [python, "-c", FIND_JAX, *modules], env, doctor)
    if 0 < done.returncode < 1 << len(modules):
        raise no_jax(python, [name for bit, name in enumerate(modules) if done.returncode & 1 << bit], doctor)
    _ran(python, done, doctor)


def leaving_tensorflow(job: Job, accelerator_type: str) -> str | None:
    """For a TensorFlow run aimed at a TPU whose chip TensorFlow is leaving (software.CHIPS: v6e reported broken, TPU7x
    none at all), the way there: Keras 3 on JAX, with the exact command; None for a JAX run or any other TPU."""
    if job.framework == contract.JAX:
        return None
    generation = _generation(accelerator_type)
    chip = next((c for c in CHIPS.values() if c.tensorflow != "ok" and generation is not None and c.generation == generation), None)
    if chip is None:
        return None
    requirements = job.requirements or "requirements.txt"
    return (
        f"{chip.why}; Keras 3 on JAX runs there: port the script to it (KERAS_BACKEND=jax, keras.distribution), list "
        f"jax[tpu] and keras in {requirements}, then `{jax_launch(job.script, accelerator_type, requirements)}` ({JAX_GUIDE})"
    )


def _generation(accelerator_type: str) -> str | None:
    from tpuctl.tpu.accelerators import shape_of

    try:
        return shape_of(accelerator_type).generation
    except TpuctlError:
        return None


class LocalChecks:
    """A local launch's checks, started at once in a thread: `result()` waits for them and raises the first
    failure, so another interpreter's start-up (and the sysfs module's import) overlaps the launcher's own."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._failure: TpuctlError | None = None
        self._thread: threading.Thread | None = None
        if job.preflight and (wants_chips(job) or wants_tensorflow(job) or wants_jax(job)):
            self._thread = threading.Thread(target=self._check, name="preflight", daemon=True)
            self._thread.start()

    def _check(self) -> None:
        doctor = local_doctor(self.job.python, self.job.framework)
        try:
            if wants_chips(self.job):
                check_chips(doctor, self.job.script)
            if modules := wants_jax(self.job):
                self._check_jax(modules, doctor)
            if not wants_tensorflow(self.job):
                return
            if not self._own_interpreter():
                check_tensorflow(self.job.python, {**os.environ, **dict(self.job.env)}, doctor)
            elif importlib.util.find_spec("tensorflow") is None:
                raise no_tensorflow(self.job.python, doctor)
        except TpuctlError as failure:
            self._failure = failure

    def _check_jax(self, modules: list[str], doctor: str) -> None:
        if not self._own_interpreter():
            check_jax(self.job.python, modules, {**os.environ, **dict(self.job.env)}, doctor)
        elif missing := [name for name in modules if importlib.util.find_spec(name) is None]:
            raise no_jax(self.job.python, missing, doctor)

    def _own_interpreter(self) -> bool:
        """The workers run this very interpreter (no --python) with its own Python settings: its answer is known
        here, without starting it again (on two busy cores that start cost the launch ~25 ms)."""
        return self.job.python == sys.executable and not any(name.startswith("PYTHON") for name, _ in self.job.env)

    def result(self) -> None:
        if self._thread is not None:
            self._thread.join()
        if self._failure is not None:
            raise self._failure


def remote_hello(job: Job) -> list[tuple[str, str]]:
    """What each host's agent checks in its hello (agent.py `preflight`): `tensorflow` (a JAX run: `jax`) asks for the
    find_spec (its value: the PYTHONPATH the launch gives the workers, if any), each `chip` names a refused chip as
    VENDOR:DEVICE=the line to fail with."""
    if not job.preflight:
        return []
    found = "tensorflow" if wants_tensorflow(job) else "jax" if wants_jax(job) else None  # the agent's preflight.MODULES
    hello = [(found, dict(job.env).get("PYTHONPATH", ""))] if found else []
    if wants_chips(job):
        vendor = f"0x{GOOGLE_PCI_VENDOR:04x}"
        hello += [("chip", f"{vendor}:{device}=the TPU is {chip.name}: {refusal(chip, job.script)}") for device, chip in refused_chips().items()]
    return hello


def remote_doctor(hosts: str, python: str, tpu: str | None, framework: str = contract.TENSORFLOW) -> str:
    """The doctor command for some hosts of an ssh launch ("h1,h2"), or for the whole TPU slice."""
    where = f"--tpu {shlex.quote(tpu)}" if tpu is not None else f"--hosts {shlex.quote(hosts)}"
    return f"tpuctl doctor {where} --python {shlex.quote(python)}" + (" --framework jax" if framework == contract.JAX else "")

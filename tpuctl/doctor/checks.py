"""The checks in the order they print: the interpreter, then the TPU, then the machine and the cloud around it; a
JAX run's interpreter and TPU have checks of their own (jax_checks.py).

Every check gives one line: ok, warn or fail, what was found and, for warn and fail, the fix (a command
where there is one); docs/doctor.md lists them with the issue each comes from.
"""

from __future__ import annotations

from collections.abc import Callable

from tpuctl.doctor import jax_checks as jax
from tpuctl.doctor import machine_checks as machine
from tpuctl.doctor import python_checks as python
from tpuctl.doctor import tpu_checks as tpu
from tpuctl.doctor.facts import Facts
from tpuctl.doctor.verdict import Check, Context

# The machine and the cloud around it: the same for every framework.
MACHINE: tuple[Callable[[Facts, Context], Check], ...] = (
    machine.check_gpus,
    machine.check_gpu_share,
    machine.check_ports,
    machine.check_gcs_credentials,
    machine.check_clock,
)
CHECKS: tuple[Callable[[Facts, Context], Check], ...] = (
    python.check_python,
    python.check_tensorflow,
    python.check_import,
    python.check_keras,
    python.check_tensorboard,
    tpu.check_tpu_chips,
    tpu.check_tpu_driver,
    tpu.check_tpu_busy,
    tpu.check_libtpu,
    tpu.check_tpu_build,
    python.check_jax,
    tpu.check_runtime_image,
    *MACHINE,
)
# A JAX run's (--framework jax): TensorFlow's import, Keras 2 and tf-keras, its libtpu pin, TPU build and image are not
# its concern; JAX's versions, Keras 3 and whether a TensorFlow beside it would take the TPU are.
JAX_CHECKS: tuple[Callable[[Facts, Context], Check], ...] = (
    jax.check_python,
    jax.check_jax_versions,
    jax.check_keras,
    tpu.check_tpu_chips,
    tpu.check_tpu_driver,
    tpu.check_tpu_busy,
    python.check_jax,
    *MACHINE,
)


def run_checks(facts: Facts, context: Context) -> list[Check]:
    return [check(facts, context) for check in (JAX_CHECKS if context.framework == jax.JAX else CHECKS)]

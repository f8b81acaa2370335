"""The checks in the order they print: the interpreter, then the TPU, then the machine and the cloud around it.

Every check gives one line: ok, warn or fail, what was found and, for warn and fail, the fix (a command
where there is one); docs/doctor.md lists them with the issue each comes from.
"""

from __future__ import annotations

from collections.abc import Callable

from tpuctl.doctor import machine_checks as machine
from tpuctl.doctor import python_checks as python
from tpuctl.doctor import tpu_checks as tpu
from tpuctl.doctor.facts import Facts
from tpuctl.doctor.verdict import Check, Context

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
    machine.check_gpus,
    machine.check_gpu_share,
    machine.check_ports,
    machine.check_gcs_credentials,
    machine.check_clock,
)


def run_checks(facts: Facts, context: Context) -> list[Check]:
    return [check(facts, context) for check in CHECKS]

"""Every doctor check, every status it can give, from answers shaped as the probe prints them.

Each case is a failure TensorFlow users really hit (docs/doctor.md names the issue behind each), so each
asserts what the user reads: what was found and the fix (the right pin, the package to drop). The facts
go through `facts.parse` as the CLI's do (a sitecustomize's noise before the marker line included), so the
parser is exercised with every check, and checks are looked up through `run_checks` so an unregistered one
fails here.
"""

from __future__ import annotations

import email.utils
import json
from typing import Any

import pytest

from tpuctl.doctor import facts
from tpuctl.doctor.checks import CHECKS, run_checks
from tpuctl.doctor.verdict import Check, Context
from tpuctl.tpu import software as sw

SITE = "/opt/venv/lib/python3.11/site-packages"
SERVER_TIME = 1_795_000_000  # a whole second: an HTTP Date header has one-second resolution


def answer(**parts: Any) -> dict[str, Any]:
    """A plain machine as the probe describes it (no TensorFlow, no accelerator, off GCE); `parts` replace keys."""
    raw: dict[str, Any] = {
        "format": 1,
        "hostname": "worker-0",
        "python": {"version": [3, 11, 7], "executable": "/opt/venv/bin/python", "implementation": "cpython", "prefix": "/opt/venv"},
        "distributions": [],
        "tensorflow_package": None,
        "env": {},
        "on_gce": False,
        "pci": [],
        "dev": {"accel": [], "vfio": []},
        "holders": {"held": [], "unreadable": 0, "lockfile": False},
        "libtpu_files": [],
        "ports": {"asked": 2, "bound": 2, "error": None, "range": [32768, 60999]},
        "credentials": {"env_file": None, "env_file_readable": False, "adc_file": None},
        "paths": {},
        "metadata": {"reachable": False, "why": "not on Google Compute Engine"},
        "nvidia_smi": {"found": False},
        "import": {"status": "absent"},
    }
    raw.update(parts)
    return raw


def dist(name: str, version: str, *requires: str, location: str = SITE) -> dict[str, Any]:
    return {"name": name, "version": version, "location": location, "requires": list(requires)}


def tf(version: str, name: str = "tensorflow", *extra: dict[str, Any]) -> dict[str, Any]:
    """The parts of an interpreter with that TensorFlow (and `extra` distributions), imported fine."""
    return {
        "distributions": [dist(name, version), *extra],
        "tensorflow_package": f"{SITE}/tensorflow",
        "import": {"status": "ok", "version": version, "seconds": 4.2, "stage": "keras"},
    }


def tpu(device_id: int, chips: int = 4, driver: str | None = "vfio-pci", nodes: bool = True) -> dict[str, Any]:
    """The PCI functions and device nodes of a TPU VM with `chips` chips of that id."""
    vfio = (sw.chip(device_id) or sw.CHIPS[0x0063]).nodes == "vfio"
    pci = [{"address": f"0000:00:0{4 + i}.0", "vendor": "0x1ae0", "device": f"0x{device_id:04x}", "driver": driver} for i in range(chips)]
    names = [f"/dev/vfio/{i}" if vfio else f"/dev/accel{i}" for i in range(chips)] if nodes else []
    return {"pci": pci, "dev": {"accel": [] if vfio else names, "vfio": names if vfio else []}}


def run(name: str, context: Context | None = None, **parts: Any) -> Check:
    """The named check's verdict on that answer, read as the CLI reads a probe's output."""
    output = "sitecustomize: hello\n" + facts.MARK + json.dumps(answer(**parts)) + "\n"
    found = {c.name: c for c in run_checks(facts.parse(output, "worker-0"), context or Context())}
    return found[name]


def assert_verdict(check: Check, status: str, *found: str, fix: tuple[str, ...] = ()) -> None:
    """The status, the words of `found` in what was found and of `fix` in the fix (which warn and fail must have)."""
    assert check.status == status, check
    for words in found:
        assert words in check.found, check
    for words in fix:
        assert words in check.fix, check
    assert bool(check.fix) == (status != "ok") or check.name == "ports", check


def test_seventeen_checks_one_per_name() -> None:
    names = [c.name for c in run_checks(facts.from_json(answer()), Context())]
    assert len(CHECKS) == len(set(names)) == 17


# --- python ----------------------------------------------------------------------------------------------------


def test_python_that_says_no_version_fails() -> None:
    assert_verdict(run("python", python={"executable": "/x/python"}), "fail", "did not say", fix=("--python",))


def test_python_no_tensorflow_release_has_wheels_for_fails_with_the_newest_supported() -> None:
    high = sw.PYTHONS_FOR_TENSORFLOW[sw.NEWEST_TENSORFLOW][1]
    check = run("python", python={"version": [3, 14, 0], "executable": "/usr/bin/python3.14"})
    assert_verdict(check, "fail", "Python 3.14.0", "no TensorFlow", fix=(f"python{high[0]}.{high[1]} -m venv",))


def test_python_outside_the_installed_tensorflows_range_warns() -> None:
    check = run("python", python={"version": [3, 12, 3], "executable": "/usr/bin/python3"}, **tf("2.15.1"))
    assert_verdict(check, "warn", "TensorFlow 2.15 is built for Python 3.9-3.11", fix=("Python 3.11",))


@pytest.mark.parametrize("parts", [{}, tf("2.21.0")])
def test_python_in_range_is_ok(parts: dict[str, Any]) -> None:
    assert_verdict(run("python", **parts), "ok", "Python 3.11.7 (/opt/venv/bin/python)")


# --- tensorflow ------------------------------------------------------------------------------------------------


def test_no_tensorflow_fails() -> None:
    assert_verdict(run("tensorflow"), "fail", "not installed", fix=("pip install tensorflow",))


def test_tensorflow_without_pip_metadata_warns() -> None:
    assert_verdict(run("tensorflow", tensorflow_package="/usr/lib/tf/tensorflow"), "warn", "/usr/lib/tf/tensorflow", fix=("pip",))


def test_two_tensorflows_in_one_folder_fail_and_the_fix_drops_the_one_that_is_not_tensorflow_tpu() -> None:
    check = run("tensorflow", distributions=[dist("tensorflow-tpu", "2.18.0"), dist("tensorflow", "2.18.1")])
    assert_verdict(check, "fail", "tensorflow-tpu 2.18.0, tensorflow 2.18.1 installed together")
    assert check.fix.startswith("pip uninstall -y tensorflow && ")
    assert "--force-reinstall 'tensorflow-tpu==2.18.0'" in check.fix


def test_tensorflow_cpu_pulled_in_beside_tensorflow_names_the_second_to_drop() -> None:
    check = run("tensorflow", distributions=[dist("tensorflow-cpu", "2.20.0"), dist("tensorflow", "2.20.0"), dist("tf-keras", "2.20.1")])
    assert_verdict(check, "fail", fix=("pip uninstall -y tensorflow && ", "'tensorflow-cpu==2.20.0'"))


def test_one_tensorflow_per_folder_is_ok() -> None:
    both = [dist("tensorflow", "2.21.0"), dist("tensorflow-cpu", "2.21.0", location="/home/u/.local/lib/python3.11/site-packages")]
    assert_verdict(run("tensorflow", distributions=both), "ok", "tensorflow 2.21.0, tensorflow-cpu 2.21.0")


# --- import ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "status", "found", "fix"),
    [
        ({"status": "absent"}, "fail", "not installed", "pip install tensorflow"),
        ({"status": "skipped"}, "ok", "not tried", ""),
        ({"status": "ok", "version": "2.21.0", "seconds": 5.04}, "ok", "TensorFlow 2.21.0 imported in 5.0s", ""),
        ({"status": "ok", "version": "2.21.0", "seconds": 31.5}, "warn", "imported in 31.5s", "slow file system"),
        ({"status": "crash", "signal": 11, "seconds": 2.5, "stage": "import"}, "fail", "killed by SIGSEGV during import after 2.5s", "--force-reinstall"),
        ({"status": "hang", "seconds": 60.0, "stage": "devices"}, "fail", "no answer within 60s (during devices)", "tpu-busy"),
        (
            {"status": "error", "exit_code": 1, "stage": "import", "message": "ImportError: numpy.core.multiarray failed to import"},
            "fail",
            "failed during import: ImportError: numpy.core.multiarray failed to import",
            "NumPy",
        ),
        ({"status": "error", "exit_code": 1}, "fail", "failed during import: no message", "--force-reinstall"),
    ],
)
def test_import(result: dict[str, Any], status: str, found: str, fix: str) -> None:
    assert_verdict(run("import", **{**tf("2.21.0"), "import": result}), status, found, fix=(fix,))


def test_import_error_message_is_one_escaped_line() -> None:
    check = run("import", **{**tf("2.21.0"), "import": {"status": "error", "message": "bad\x1b[2J\nthing"}})
    assert check.found.isprintable() and "\x1b" not in check.found and "\\x1b" in check.found


# --- keras -----------------------------------------------------------------------------------------------------


def test_keras_without_tensorflow_is_ok() -> None:
    assert_verdict(run("keras", distributions=[dist("keras", "3.12.0")]), "ok", "no TensorFlow")


def test_keras_3_only_on_tensorflow_2_16_and_later_warns_with_the_tf_keras_pin() -> None:
    check = run("keras", **tf("2.21.0", "tensorflow", dist("keras", "3.12.0")))
    assert_verdict(check, "warn", "Keras 3 only (keras 3.12.0)", "multi-worker", fix=("pip install 'tf-keras==2.21.*'",))
    assert_verdict(run("keras", **tf("2.16.2")), "warn", fix=("'tf-keras==2.16.*'",))


def test_tf_keras_of_another_minor_fails() -> None:
    check = run("keras", **tf("2.21.0", "tensorflow", dist("keras", "3.12.0"), dist("tf-keras", "2.20.1")))
    assert_verdict(check, "fail", "tf-keras 2.20.1 beside TensorFlow 2.21", fix=("pip install 'tf-keras==2.21.*'",))


def test_tensorflow_2_15_with_keras_3_fails_with_the_keras_2_pin() -> None:
    check = run("keras", **tf("2.15.1", "tensorflow", dist("keras", "3.0.5")))
    assert_verdict(check, "fail", "keras 3.0.5 beside TensorFlow 2.15", "Keras 2", fix=("pip install 'keras==2.15.*'",))


def test_tensorflow_2_15_with_keras_2_is_ok() -> None:
    assert_verdict(run("keras", **tf("2.15.1", "tensorflow", dist("keras", "2.15.0"))), "ok", "Keras 2 (TensorFlow 2.15)")


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_legacy_keras_asked_for_without_tf_keras_fails(value: str) -> None:
    check = run("keras", env={"TF_USE_LEGACY_KERAS": value}, **tf("2.18.0", "tensorflow-tpu", dist("keras", "3.6.0")))
    assert_verdict(check, "fail", "TF_USE_LEGACY_KERAS=1 but tf-keras is not installed", fix=("pip install 'tf-keras==2.18.*'",))


def test_tf_keras_of_the_same_minor_is_ok() -> None:
    check = run("keras", **tf("2.21.0", "tensorflow", dist("keras", "3.12.0"), dist("tf-keras", "2.21.0")))
    assert_verdict(check, "ok", "keras 3.12.0 as tf.keras; tf-keras 2.21.0")


@pytest.mark.parametrize(("env", "fix"), [({"TF_USE_LEGACY_KERAS": "1"}, "pip install 'tf-keras==2.21.*'"), ({}, "--force-reinstall keras")])
def test_tf_keras_that_fails_to_import_fails(env: dict[str, str], fix: str) -> None:
    parts = tf("2.21.0", "tensorflow", dist("keras", "3.12.0"))
    parts["import"] = {**parts["import"], "keras_error": "ImportError: Keras cannot be imported.\nCheck that it is installed."}
    assert_verdict(run("keras", env=env, **parts), "fail", "tf.keras fails to import: ImportError: Keras cannot be imported. Check", fix=(fix,))


# --- tensorboard -----------------------------------------------------------------------------------------------


def test_tensorboard_missing_beside_tensorflow_warns_with_its_pin() -> None:
    assert_verdict(run("tensorboard", **tf("2.21.0")), "warn", "not installed", fix=("pip install 'tensorboard==2.21.*'",))


def test_tensorboard_missing_without_tensorflow_is_ok() -> None:
    assert run("tensorboard").status == "ok"


def test_tensorboard_of_another_minor_warns() -> None:
    check = run("tensorboard", **tf("2.18.0", "tensorflow", dist("tensorboard", "2.16.2")))
    assert_verdict(check, "warn", "tensorboard 2.16.2 beside TensorFlow 2.18", fix=("'tensorboard==2.18.*'",))


@pytest.mark.parametrize("board", [dist("tensorboard", "2.18.0"), dist("tb-nightly", "2.19.0a20241201")])
def test_tensorboard_present_is_ok(board: dict[str, Any]) -> None:
    assert_verdict(run("tensorboard", **tf("2.18.0", "tensorflow", board)), "ok", f"{board['name']} {board['version']}")


# --- tpu-chips -------------------------------------------------------------------------------------------------


def test_no_chips_is_ok() -> None:
    assert_verdict(run("tpu-chips", pci=[{"address": "0000:00:05.0", "vendor": "0x10de", "device": "0x2330", "driver": "nvidia"}]), "ok", "no TPU chips")


@pytest.mark.parametrize(("device_id", "name"), [(0x0027, "v2/v3"), (0x005E, "v4"), (0x0062, "v5p"), (0x0063, "v5e")])
def test_chips_tensorflow_runs_on_are_ok(device_id: int, name: str) -> None:
    assert_verdict(run("tpu-chips", **tpu(device_id)), "ok", f"4 TPU chip(s): {name}")


def test_v6e_warns() -> None:
    newest = sw.tensorflow_generations()[0]
    assert_verdict(run("tpu-chips", **tpu(0x006F, 8)), "warn", "8 TPU chip(s): v6e", "reported broken", fix=(f"{newest}-N",))


def test_tpu7x_fails_and_the_fix_names_the_tables_newest_generations_with_tensorflow() -> None:
    newest, next_newest = sw.tensorflow_generations()[:2]
    check = run("tpu-chips", **tpu(0x0076))
    assert_verdict(check, "fail", "TPU7x", "does not support TPU7x", fix=(f"{newest}-N or {next_newest}-N",))


def test_an_unknown_google_device_warns_naming_its_address() -> None:
    assert_verdict(run("tpu-chips", **tpu(0x00FF, 1)), "warn", "1 TPU chip(s): unknown", "0000:00:04.0", fix=("upgrade tpuctl",))


def test_the_worst_known_chip_wins_over_an_unknown_one() -> None:
    parts = tpu(0x0076, 1)
    parts["pci"].append({"address": "0000:00:09.0", "vendor": "0x1ae0", "device": "0x00ff", "driver": None})
    assert_verdict(run("tpu-chips", **parts), "fail", "2 TPU chip(s): TPU7x")


# --- tpu-driver ------------------------------------------------------------------------------------------------


def test_driver_without_chips_is_ok() -> None:
    assert run("tpu-driver").status == "ok"


def test_chip_without_a_bound_driver_fails_naming_it() -> None:
    assert_verdict(run("tpu-driver", **tpu(0x0063, 2, driver=None)), "fail", "no kernel driver bound to 0000:00:04.0, 0000:00:05.0", fix=("restart",))


@pytest.mark.parametrize(("device_id", "kind"), [(0x0063, "/dev/vfio/N"), (0x005E, "/dev/accelN")])
def test_chips_without_device_nodes_fail(device_id: int, kind: str) -> None:
    assert_verdict(run("tpu-driver", **tpu(device_id, nodes=False)), "fail", f"4 chip(s) but no {kind} device nodes", fix=("tpuctl stop-vm NAME",))


@pytest.mark.parametrize(
    ("device_id", "driver", "found"), [(0x0062, "vfio-pci", "4 device node(s) (/dev/vfio/N), driver vfio-pci"), (0x0027, "accel", "(/dev/accelN)")]
)
def test_chips_with_nodes_and_driver_are_ok(device_id: int, driver: str, found: str) -> None:
    assert_verdict(run("tpu-driver", **tpu(device_id, driver=driver)), "ok", found)


# --- tpu-busy --------------------------------------------------------------------------------------------------


def test_busy_without_nodes_is_ok() -> None:
    assert_verdict(run("tpu-busy"), "ok", "nothing to check")


def test_a_process_holding_the_tpu_fails_and_the_fix_kills_every_holder() -> None:
    held = [
        {"pid": 4242, "command": "python train.py --epochs 3", "devices": ["/dev/vfio/0", "/dev/vfio/1"]},
        {"pid": 4343, "command": "jupyter", "devices": ["/dev/vfio/2"]},
    ]
    check = run("tpu-busy", holders={"held": held, "unreadable": 0, "lockfile": True}, **tpu(0x0063))
    assert_verdict(check, "fail", "PID 4242 (python train.py --epochs 3) holds /dev/vfio/0, /dev/vfio/1 and 1 more", fix=("kill 4242 4343",))


def test_a_leftover_lockfile_warns() -> None:
    check = run("tpu-busy", holders={"held": [], "unreadable": 3, "lockfile": True}, **tpu(0x0063))
    assert_verdict(check, "warn", "/tmp/libtpu_lockfile is left", "3 processes of other users not readable", fix=("rm /tmp/libtpu_lockfile",))


def test_free_tpu_is_ok() -> None:
    assert_verdict(run("tpu-busy", **tpu(0x005E)), "ok", "free")


# --- libtpu ----------------------------------------------------------------------------------------------------


def _tpu_tf(version: str, requires: tuple[str, ...], *extra: dict[str, Any], device_id: int = 0x0063) -> dict[str, Any]:
    return {**tpu(device_id), **tf(version, "tensorflow-tpu"), "distributions": [dist("tensorflow-tpu", version, *requires), *extra]}


def test_libtpu_not_needed_without_chips() -> None:
    assert_verdict(run("libtpu", **tf("2.21.0")), "ok", "not needed")


def test_libtpu_other_than_the_pin_in_tensorflow_tpus_requires_fails() -> None:
    check = run("libtpu", **_tpu_tf("2.18.0", ("libtpu==2.18.0", "tensorboard<2.19,>=2.18"), dist("libtpu", "2.17.0")))
    assert_verdict(check, "fail", "libtpu 2.17.0, but tensorflow-tpu 2.18.0 needs libtpu==2.18.0", fix=("pip install 'libtpu==2.18.0' -f", sw.LIBTPU_INDEX))


def test_libtpu_matching_the_pin_is_ok() -> None:
    check = run("libtpu", **_tpu_tf("2.18.0", ("libtpu==2.18.0",), dist("libtpu", "2.18.0")))
    assert_verdict(check, "ok", "libtpu 2.18.0, as tensorflow-tpu 2.18.0 requires")


def test_the_dists_own_requires_wins_over_the_table() -> None:
    check = run("libtpu", **_tpu_tf("2.18.0", ("libtpu ==2.18.1",), dist("libtpu", "2.18.0")))
    assert_verdict(check, "fail", "needs libtpu==2.18.1")


@pytest.mark.parametrize(
    ("version", "libtpu", "status"),
    [("2.20.0", "0.0.10", "fail"), ("2.20.0", "0.0.17", "ok"), ("2.16.1", "2.16.0rc0", "ok"), ("2.19.1", "0.0.10", "ok"), ("2.17.0", "2.17.1", "fail")],
)
def test_the_table_gives_the_pin_when_requires_is_empty(version: str, libtpu: str, status: str) -> None:
    check = run("libtpu", **_tpu_tf(version, (), dist("libtpu", libtpu)))
    wanted = sw.LIBTPU_FOR_TENSORFLOW_TPU[version].removeprefix("libtpu")
    assert_verdict(
        check, status, f"libtpu {libtpu}", *([f"needs libtpu{wanted}"] if status == "fail" else []), fix=(f"'libtpu{wanted}'",) if status == "fail" else ()
    )


def test_tensorflow_tpu_without_libtpu_fails() -> None:
    assert_verdict(run("libtpu", **_tpu_tf("2.17.0", ("libtpu==2.17.0",))), "fail", "no libtpu, but tensorflow-tpu 2.17.0 needs libtpu==2.17.0")


def test_a_libtpu_package_or_the_images_file_is_ok() -> None:
    assert_verdict(run("libtpu", **tpu(0x005E), **tf("2.16.1", "tensorflow", dist("libtpu", "2.16.0rc0"))), "ok", "libtpu 2.16.0rc0")
    assert_verdict(run("libtpu", libtpu_files=["/lib/libtpu.so"], **tpu(0x005E)), "ok", "/lib/libtpu.so (the runtime image's)")


def test_chips_without_any_libtpu_fail() -> None:
    assert_verdict(run("libtpu", **tpu(0x005E)), "fail", "no libtpu", fix=("pip install tensorflow-tpu",))


# --- tpu-build -------------------------------------------------------------------------------------------------


def test_build_without_chips_is_ok() -> None:
    assert run("tpu-build", **tf("2.21.0", "tensorflow-cpu")).status == "ok"


def test_tensorflow_cpu_on_a_tpu_machine_fails() -> None:
    check = run("tpu-build", **tpu(0x005E), **tf("2.18.0", "tensorflow-cpu"))
    assert_verdict(check, "fail", "tensorflow-cpu 2.18.0 cannot use the TPU", fix=("pip uninstall -y tensorflow-cpu && pip install 'tensorflow-tpu==2.20.*'",))


def test_tensorflow_newer_than_the_last_tpu_build_fails() -> None:
    assert_verdict(run("tpu-build", **tpu(0x0063), **tf("2.21.0")), "fail", "tensorflow-tpu stops at 2.20", fix=("'tensorflow-tpu==2.20.*'",))


@pytest.mark.parametrize("device_id", [chip.device_id for chip in sw.CHIPS.values() if chip.pjrt_only])
def test_tensorflow_before_2_15_on_a_pjrt_only_chip_fails(device_id: int) -> None:
    fix = (f"recreate the TPU with runtime {sw.newest_tensorflow_image()}",)
    assert_verdict(run("tpu-build", **tpu(device_id), **tf("2.14.1")), "fail", "need TensorFlow 2.15 or later", fix=fix)


def test_tensorflow_2_15_on_v5e_without_the_pjrt_env_fails_naming_what_is_missing() -> None:
    check = run("tpu-build", **tpu(0x0063), **tf("2.15.0"))
    assert_verdict(
        check,
        "fail",
        "on v5e without its PJRT plugin named",
        fix=("export NEXT_PLUGGABLE_DEVICE_USE_C_API=true TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so",),
    )
    half = run("tpu-build", env={"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true"}, **tpu(0x0062), **tf("2.15.0"))
    assert half.status == "fail" and half.fix.startswith("export TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so (")


def test_tensorflow_2_15_with_the_pjrt_env_or_on_v4_is_ok() -> None:
    assert_verdict(run("tpu-build", env=dict(sw.PJRT_ENV_2_15), **tpu(0x0063), **tf("2.15.0")), "ok", "tensorflow 2.15.0 on v5e")
    assert_verdict(run("tpu-build", **tpu(0x005E), **tf("2.15.0")), "ok", "on v4")


def test_tensorflow_tpu_on_v5p_is_ok() -> None:
    assert_verdict(run("tpu-build", **tpu(0x0062), **tf("2.18.0", "tensorflow-tpu")), "ok", "tensorflow-tpu 2.18.0 on v5p")


# --- jax -------------------------------------------------------------------------------------------------------


def test_jax() -> None:
    jax = [dist("jax", "0.4.35"), dist("jaxlib", "0.4.35")]
    assert_verdict(run("jax", **tpu(0x0063)), "ok", "not installed")
    assert_verdict(run("jax", distributions=jax), "ok", "no TPU here")
    both = {**tf("2.18.0", "tensorflow-tpu", *jax), **tpu(0x0063)}
    assert_verdict(
        run("jax", **both), "warn", "jax 0.4.35 beside tensorflow-tpu 2.18.0: both take the TPU", "The TPU is already in use",
        fix=("pip uninstall -y tensorflow-tpu && pip install tensorflow-cpu", "JAX_PLATFORMS=cpu"),
    )  # fmt: skip
    assert_verdict(run("jax", env={"JAX_PLATFORMS": "cpu"}, **both), "ok", "kept off the TPU")


def test_jax_alone_or_beside_a_tensorflow_without_tpu_support_takes_the_tpu_alone() -> None:
    """Installed together is no finding; a TensorFlow that takes no TPU (tensorflow-cpu) and JAX on one TPU is none."""
    jax = [dist("jax", "0.10.2"), dist("jaxlib", "0.10.2"), dist("libtpu", "0.0.42")]
    assert_verdict(run("jax", distributions=jax, **tpu(0x006F)), "ok", "jax 0.10.2 with no TensorFlow beside it that takes the TPU")
    cpu = run("jax", **tf("2.21.0", "tensorflow-cpu", *jax), **tpu(0x006F))
    assert_verdict(cpu, "ok", "(tensorflow-cpu 2.21.0 has no TPU support)")
    assert_verdict(run("jax", **tf("2.21.0", "tensorflow", *jax), **tpu(0x006F)), "ok", "(tensorflow 2.21.0 has no TPU support)")
    assert_verdict(run("jax", **tf("2.18.0", "tensorflow", *jax), **tpu(0x006F)), "warn", "beside tensorflow 2.18.0: both take the TPU")


# --- runtime-image ---------------------------------------------------------------------------------------------


def _on_tpu_vm(**attributes: str) -> dict[str, Any]:
    return {
        "on_gce": True,
        "metadata": {"reachable": True, "date": None, "local_time": SERVER_TIME, "attributes": {"accelerator-type": "v5litepod-8", **attributes}},
    }


def test_runtime_image_off_a_tpu_vm_is_ok() -> None:
    assert_verdict(run("runtime-image", **tf("2.21.0")), "ok", "not a TPU VM")
    assert_verdict(run("runtime-image", **_on_tpu_vm()), "ok", "does not name its runtime image")


def test_runtime_image_of_the_installed_version_from_the_tpu_api_is_ok() -> None:
    assert_verdict(run("runtime-image", Context(runtime_version="tpu-vm-tf-2.16.1-pod-pjrt"), **tf("2.16.1")), "ok", "tpu-vm-tf-2.16.1-pod-pjrt")


def test_runtime_image_of_another_minor_warns_with_the_images_pin() -> None:
    check = run("runtime-image", Context(runtime_version="tpu-vm-tf-2.16.1-pjrt"), **tf("2.18.0", "tensorflow-tpu"))
    assert_verdict(check, "warn", "is for TensorFlow 2.16, the workers have 2.18", fix=("pip install 'tensorflow-tpu==2.16.1'",))


@pytest.mark.parametrize(
    "attributes",
    [
        {"tpu-env": "ACCELERATOR_TYPE: 'v5litepod-8'\nRUNTIME_VERSION: 'tpu-vm-tf-2.15.0-pjrt'\nWORKER_ID: '0'\n"},
        {"runtime-version": "tpu-vm-tf-2.15.0-pjrt"},
    ],
)
def test_runtime_image_from_the_metadata_server(attributes: dict[str, str]) -> None:
    assert_verdict(run("runtime-image", **_on_tpu_vm(**attributes), **tf("2.16.2")), "warn", "tpu-vm-tf-2.15.0-pjrt is for TensorFlow 2.15")
    assert_verdict(run("runtime-image", **_on_tpu_vm(**attributes), **tf("2.15.1")), "ok", "tpu-vm-tf-2.15.0-pjrt")


def test_tpu_env_names_a_base_image_or_a_container_address() -> None:
    """RUNTIME_VERSION is an image name on most TPU VMs (judged) and a container image's address on some (no name)."""
    base = _on_tpu_vm(**{"tpu-env": "RUNTIME_VERSION: 'tpu-ubuntu2204-base'\n", "accelerator-type": "v4-8"})
    assert_verdict(run("runtime-image", **base, **tf("2.16.1")), "warn", "tpu-ubuntu2204-base has no TensorFlow")
    container = _on_tpu_vm(**{"tpu-env": "RUNTIME_VERSION: 'us-docker.pkg.dev/tpu/runtime:v4'\n", "accelerator-type": "v4-8"})
    assert_verdict(run("runtime-image", **container, **tf("2.16.1")), "ok", "does not name its runtime image")


def test_the_tpu_apis_image_wins_over_the_metadata() -> None:
    check = run("runtime-image", Context(runtime_version="tpu-vm-tf-2.16.1-pjrt"), **_on_tpu_vm(**{"runtime-version": "tpu-vm-tf-2.15.0-pjrt"}), **tf("2.16.1"))
    assert_verdict(check, "ok", "tpu-vm-tf-2.16.1-pjrt")


def test_an_image_without_tensorflow_warns_unless_tensorflow_tpu_comes_from_pip() -> None:
    base = Context(runtime_version="tpu-ubuntu2204-base")
    assert_verdict(
        run("runtime-image", base, **tf("2.16.1")),
        "warn",
        "tpu-ubuntu2204-base has no TensorFlow",
        fix=("pip install tensorflow-tpu", f"--runtime-version {sw.newest_tensorflow_image()}"),
    )
    assert_verdict(run("runtime-image", base, **tf("2.18.0", "tensorflow-tpu")), "ok", "TensorFlow from pip (tensorflow-tpu 2.18.0)")


# --- gpus ------------------------------------------------------------------------------------------------------


def smi_lines(name: str, count: int) -> dict[str, Any]:
    """The probe's nvidia_smi facts for `count` GPUs, a line each as `--query-gpu=index,uuid,name --format=csv,noheader` prints it."""
    return {"found": True, "lines": [f"{index}, GPU-{index:08x}-1b2c-4d5e-8f90-a1b2c3d4e5f6, {name}" for index in range(count)], "cut": False}


def _gpu_machine(seen: int | None, name: str = "tensorflow") -> dict[str, Any]:
    parts = {**tf("2.21.0", name), "nvidia_smi": smi_lines("NVIDIA H100 80GB HBM3", 2)}
    if seen is not None:
        parts["import"] = {**parts["import"], "devices": {"CPU": 1, **({"GPU": seen} if seen else {})}}
    return parts


def test_gpus_tensorflow_does_not_see_fail() -> None:
    assert_verdict(run("gpus", **_gpu_machine(0)), "fail", "nvidia-smi lists 2 GPU(s), TensorFlow sees 0")
    assert run("gpus", **_gpu_machine(0)).fix == "pip install 'tensorflow[and-cuda]'"
    assert run("gpus", **_gpu_machine(1, "tensorflow-cpu")).fix == "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]'"


def test_gpus_all_seen_or_not_asked_are_ok() -> None:
    assert_verdict(run("gpus", **_gpu_machine(2)), "ok", "2 GPU(s), all seen by TensorFlow")
    assert_verdict(run("gpus", **_gpu_machine(None)), "ok", "TensorFlow was not asked")
    assert_verdict(run("gpus"), "ok", "no NVIDIA GPUs")
    assert_verdict(run("gpus", nvidia_smi=smi_lines("?", 0)), "ok", "lists no GPUs")


def test_gpus_without_a_working_driver_warn() -> None:
    on_bus = [{"address": "0000:00:05.0", "vendor": "0x10de", "device": "0x2330", "driver": None}]
    assert_verdict(run("gpus", pci=on_bus), "warn", "1 NVIDIA device(s) on the PCI bus but no nvidia-smi", fix=("driver",))
    failed = run("gpus", nvidia_smi={"found": True, "error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"})
    assert_verdict(failed, "warn", "nvidia-smi failed: NVIDIA-SMI has failed", fix=("nvidia-smi",))


H200S = smi_lines("NVIDIA H200", 2)


def test_gpu_share_warns_when_the_given_workers_outnumber_the_gpus() -> None:
    crowded = run("gpu-share", Context(workers=3, workers_given=True), nvidia_smi=H200S)
    assert_verdict(crowded, "warn", "3 workers per host, 2 GPU(s) (nvidia-smi): workers share cards", fix=("at most 2 workers per host",))
    # The workers' own CUDA_VISIBLE_DEVICES is the pool a launch shares out: one visible card of the two.
    one = run("gpu-share", Context(workers=2, workers_given=True), nvidia_smi=H200S, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert_verdict(one, "warn", "2 workers per host, 1 GPU(s) (CUDA_VISIBLE_DEVICES='1')")


def test_gpu_share_is_ok_when_each_worker_gets_a_card_or_no_count_was_given() -> None:
    assert_verdict(run("gpu-share", Context(workers=2, workers_given=True), nvidia_smi=H200S), "ok", "1 for each of 2 worker(s)")
    # doctor's default of 2 workers sizes the port check; it is not a launch to judge.
    assert_verdict(run("gpu-share", Context(workers=3), nvidia_smi=H200S), "ok", "more than 2 worker(s) per host would share cards")
    assert_verdict(run("gpu-share", Context(workers=8, workers_given=True)), "ok", "no GPU to share out")
    hidden = run("gpu-share", Context(workers=4, workers_given=True), nvidia_smi=H200S, env={"CUDA_VISIBLE_DEVICES": "-1"})
    assert_verdict(hidden, "ok", "no GPU to share out")


# --- ports -----------------------------------------------------------------------------------------------------


def test_ports() -> None:
    fewer = run("ports", ports={"asked": 8, "bound": 5, "error": "[Errno 98] Address already in use", "range": [32768, 60999]})
    assert_verdict(fewer, "fail", "only 5 of 8 free TCP ports could be bound: [Errno 98] Address already in use", fix=("ss -ltnp",))
    assert_verdict(
        run("ports", Context(workers=4), ports={"asked": 4, "bound": 4, "range": [60000, 60009]}), "warn", "has 10 ports", fix=("ip_local_port_range",)
    )
    assert_verdict(run("ports"), "ok", "2 free port(s) for 2 worker(s) (range of 28232)")
    assert run("ports", ports={}).status == "warn"


# --- gcs-credentials -------------------------------------------------------------------------------------------

GS = Context(model_dir="gs://bucket/run-1")


def test_credentials_not_needed_without_a_gs_model_dir() -> None:
    assert run("gcs-credentials").status == "ok"
    assert run("gcs-credentials", Context(model_dir="/tmp/run-1")).status == "ok"


def test_an_unreadable_credentials_file_fails() -> None:
    creds = {"env_file": "/home/u/key.json", "env_file_readable": False, "adc_file": "/home/u/.config/gcloud/application_default_credentials.json"}
    assert_verdict(run("gcs-credentials", GS, credentials=creds), "fail", "GOOGLE_APPLICATION_CREDENTIALS names /home/u/key.json", fix=("unset",))


@pytest.mark.parametrize(
    ("parts", "found"),
    [
        ({"credentials": {"env_file": "/k.json", "env_file_readable": True}}, "GOOGLE_APPLICATION_CREDENTIALS (/k.json)"),
        ({"credentials": {"env_file": None, "adc_file": "/h/.config/gcloud/application_default_credentials.json"}}, "application default credentials"),
        ({"metadata": {"reachable": True, "service_account": "123-compute@developer.gserviceaccount.com"}}, "service account 123-compute@"),
    ],
)
def test_credentials_found_are_ok(parts: dict[str, Any], found: str) -> None:
    assert_verdict(run("gcs-credentials", GS, **parts), "ok", found)


def test_no_credentials_at_all_fail() -> None:
    assert_verdict(run("gcs-credentials", GS), "fail", "no credentials for gs://bucket/run-1", fix=("gcloud auth application-default login",))
    unreachable = run("gcs-credentials", GS, metadata={"reachable": False, "service_account": "sa@p.iam.gserviceaccount.com"})
    assert unreachable.status == "fail"


# --- clock -----------------------------------------------------------------------------------------------------


def _clock(skew: float, date: Any = "") -> Check:
    header = email.utils.formatdate(SERVER_TIME, usegmt=True) if date == "" else date
    return run("clock", metadata={"reachable": True, "date": header, "local_time": SERVER_TIME + skew})


def test_clock() -> None:
    assert_verdict(_clock(0.4), "ok", "in step")
    assert_verdict(_clock(3), "ok", "3s ahead of the metadata server")
    assert_verdict(_clock(20), "warn", "20s ahead of", fix=("chrony",))
    assert_verdict(_clock(-400), "fail", "400s behind the metadata server", fix=("chrony",))
    assert_verdict(_clock(400), "fail", "400s ahead of")


@pytest.mark.parametrize("date", [None, "yesterday", "Mon, 99 Foo 2026 25:61:61 GMT", 1795000000])
def test_clock_without_a_readable_date_is_ok(date: Any) -> None:
    assert_verdict(_clock(900, date), "ok", "gave no time")
    assert_verdict(run("clock"), "ok", "no metadata server")


def test_the_tensorflow_an_import_finds_first_is_the_one_judged() -> None:
    """A PYTHONPATH copy listed before the venv's shadows it: its version is the one the worker runs."""
    shadow = dist("tensorflow", "2.15.1", location="/home/u/pylib")
    parts = {**tf("2.21.0"), "distributions": [shadow, dist("tensorflow", "2.21.0"), dist("keras", "3.12.0")]}
    assert_verdict(run("keras", **parts), "fail", "keras 3.12.0 beside TensorFlow 2.15", fix=("'keras==2.15.*'",))
    assert_verdict(run("tensorflow", **parts), "ok", "tensorflow 2.15.1, tensorflow 2.21.0")


# --- a JAX run's interpreter (--framework jax) --------------------------------------------------------------------

JAX_RUN = Context(framework="jax", script="train.py")
# jax 0.10.2's own requirements as its wheel's metadata writes them (the probe keeps these: probe.kept_requirement).
JAX_0_10_2 = dist("jax", "0.10.2", "jaxlib<=0.10.2,>=0.10.1", 'jaxlib<=0.10.2,>=0.10.2; extra == "tpu"', 'libtpu==0.0.42.*; extra == "tpu"')


def jax_stack(jaxlib: str | None = "0.10.2", *more: dict[str, Any]) -> list[dict[str, Any]]:
    return [JAX_0_10_2, *([dist("jaxlib", jaxlib)] if jaxlib else []), *more]


def test_a_jax_run_is_checked_for_jax_not_tensorflow() -> None:
    names = [c.name for c in run_checks(facts.from_json(answer(python={"version": [3, 14, 0], "executable": "/x/python"})), JAX_RUN)]
    assert names[:3] == ["python", "jax-versions", "keras"] and not {"tensorflow", "import", "tpu-build", "libtpu", "runtime-image"} & set(names)
    assert_verdict(run("python", JAX_RUN, python={"version": [3, 14, 0], "executable": "/x/python"}), "ok", "Python 3.14.0")
    assert run("python", python={"version": [3, 14, 0], "executable": "/x/python"}).status == "fail"  # TensorFlow has no wheel


def test_jaxlib_must_be_the_one_jax_accepts() -> None:
    assert_verdict(run("jax-versions", JAX_RUN, distributions=jax_stack()), "ok", "jax 0.10.2, jaxlib 0.10.2 (jax requires jaxlib<=0.10.2,>=0.10.1)")
    for older_or_newer in ("0.10.0", "0.10.3"):
        assert_verdict(
            run("jax-versions", JAX_RUN, distributions=jax_stack(older_or_newer)), "fail",
            f"jaxlib {older_or_newer}, but jax 0.10.2 requires jaxlib<=0.10.2,>=0.10.1: `import jax` refuses it",
            fix=("pip install 'jaxlib<=0.10.2,>=0.10.1'",),
        )  # fmt: skip
    assert_verdict(run("jax-versions", JAX_RUN, distributions=jax_stack(None)), "fail", "without jaxlib", fix=("pip install 'jaxlib<=0.10.2,>=0.10.1'",))
    assert_verdict(run("jax-versions", JAX_RUN), "fail", "jax is not installed", fix=("pip install 'tpuctl[jax]'", "jax[tpu]"))
    # On a TPU the fix is jax[tpu] at jax's version: it brings the jaxlib and the libtpu that release pins.
    assert_verdict(run("jax-versions", JAX_RUN, distributions=jax_stack("0.10.0"), **tpu(0x006F)), "fail", fix=("pip install 'jax[tpu]==0.10.2'",))


def test_on_a_tpu_libtpu_is_the_one_jax_tpu_pins() -> None:
    v6e = tpu(0x006F)
    pinned = run("jax-versions", JAX_RUN, distributions=jax_stack("0.10.2", dist("libtpu", "0.0.42.1")), **v6e)
    assert_verdict(pinned, "ok", "libtpu 0.0.42.1 as jax[tpu] pins")
    other = run("jax-versions", JAX_RUN, distributions=jax_stack("0.10.2", dist("libtpu", "0.0.40")), **v6e)
    assert_verdict(other, "warn", "libtpu 0.0.40, but jax[tpu] 0.10.2 pins libtpu==0.0.42.*", fix=("pip install 'jax[tpu]==0.10.2'",))
    none = run("jax-versions", JAX_RUN, distributions=jax_stack(), **v6e)
    assert_verdict(none, "fail", "no libtpu: JAX falls back to the CPU", "A Google TPU may be present", fix=("pip install 'jax[tpu]==0.10.2'",))
    images = run("jax-versions", JAX_RUN, distributions=jax_stack(), libtpu_files=["/lib/libtpu.so"], **v6e)
    assert_verdict(images, "warn", "no libtpu package: JAX loads /lib/libtpu.so, not the libtpu==0.0.42.* jax[tpu] 0.10.2 pins")


def test_a_jax_run_needs_keras_3_where_it_uses_keras() -> None:
    assert_verdict(run("keras", JAX_RUN, distributions=[dist("keras", "3.15.1")]), "ok", "keras 3.15.1, with its JAX backend")
    assert_verdict(run("keras", JAX_RUN, distributions=[dist("keras", "2.15.0")]), "fail", "Keras 2 has no JAX backend", fix=("pip install 'keras>=3.6'",))
    assert_verdict(run("keras", JAX_RUN), "warn", "Keras is not installed", fix=("pip install 'tpuctl[jax]'",))


def test_a_chip_tensorflow_is_leaving_points_to_keras_3_on_jax_and_is_a_jax_runs_own() -> None:
    v6e = run("tpu-chips", Context(script="train.py"), **tpu(0x006F, chips=8))
    assert_verdict(v6e, "warn", "v6e", fix=("`tpuctl launch train.py --framework jax --new-tpu v6e-8 --requirements requirements.txt` (docs/jax.md)",))
    named = run("tpu-chips", Context(script="my train.py"), metadata={"reachable": True, "attributes": {"accelerator-type": "v6e-16"}}, **tpu(0x006F))
    assert "`tpuctl launch 'my train.py' --framework jax --new-tpu v6e-16 --requirements requirements.txt`" in named.fix
    tpu7x = run("tpu-chips", Context(), **tpu(0x0076))
    assert_verdict(tpu7x, "fail", "TPU7x", fix=("pip install 'jax[tpu]' 'keras>=3.6' here, then `tpuctl launch train.py --framework jax` (docs/jax.md)",))
    for chip in (0x006F, 0x0076):
        assert_verdict(run("tpu-chips", JAX_RUN, **tpu(chip)), "ok")

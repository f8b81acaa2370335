"""The real probe (tpuctl/doctor/probe.py), run as doctor runs it, against fake machines: a /sys, /dev, /proc
and /tmp under TPUCTL_SYSFS_ROOT for every TPU generation, and a site folder of distributions it reads.

The probe is the one part that meets real machines; its readings (a device id in sysfs, a driver symlink, an
open /dev/vfio/0 in another process's fd table) are what the checks judge, so each tree is read by the
probe itself and judged by the checks. The probes of all trees start at once (one module fixture): each takes
a fraction of a second, and together they run while the tests wait once.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.standins.nvidia_smi import FAKE_SMI
from tpuctl.doctor import facts
from tpuctl.doctor.checks import run_checks
from tpuctl.doctor.local import PROBE, Request, probe_here
from tpuctl.doctor.verdict import Check, Context
from tpuctl.tpu import software as sw

HOLDER_PID = 99_999_999  # above Linux's pid_max: never the probe's own pid, which the probe skips


@dataclass(frozen=True)
class Machine:
    """A fake TPU VM: its chips (device id, driver or None), its device nodes, its processes, its packages."""

    device_id: int
    chips: int = 4
    driver: str | None = "vfio-pci"
    nodes: bool = True
    holder: bool = False
    lockfile: bool = False
    site: str = "tpu-2.18"  # which site folder of distributions (SITES)
    env: tuple[tuple[str, str], ...] = ()
    libtpu_file: bool = False  # the runtime image's libtpu.so, named by TPU_LIBRARY_PATH
    others: bool = False  # an NVIDIA and an Intel function on the bus too


# Distribution metadata as pip leaves it: name, version and the Requires-Dist lines the probe reads pins from.
SITES: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "tpu-2.18": [("tensorflow-tpu", "2.18.0", ("libtpu==2.18.0", "tensorboard<2.19,>=2.18")), ("libtpu", "2.18.0", ())],
    "tpu-2.18-old-libtpu": [("tensorflow-tpu", "2.18.0", ("libtpu==2.18.0",)), ("libtpu", "2.17.0", ())],
    "tf-2.15": [("tensorflow", "2.15.1", ("tensorboard<2.16,>=2.15", "keras<2.16,>=2.15.0")), ("keras", "2.15.0", ())],
    "cpu-2.18": [("tensorflow-cpu", "2.18.0", ())],
}

MACHINES: dict[str, Machine] = {
    "v2/v3": Machine(0x0027, driver="accel"),
    "v4": Machine(0x005E, driver="accel", others=True),
    "v5p": Machine(0x0062, site="tpu-2.18-old-libtpu"),
    "v5e-2.15": Machine(0x0063, site="tf-2.15", libtpu_file=True),
    "v5e-2.15-pjrt": Machine(0x0063, site="tf-2.15", libtpu_file=True, env=tuple(sw.PJRT_ENV_2_15.items()), lockfile=True),
    "v6e": Machine(0x006F, 8),
    "TPU7x": Machine(0x0076),
    "unknown": Machine(0x00FF, 1),
    "no-driver": Machine(0x0063, driver=None),
    "no-nodes": Machine(0x005E, driver="accel", nodes=False, site="cpu-2.18"),
    "held": Machine(0x0063, holder=True),
}


def _site(folder: Path, name: str) -> Path:
    site = folder / "sites" / name
    for dist, version, requires in SITES[name]:
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        (info / "METADATA").write_text("\n".join(lines) + "\n")
        if dist == "libtpu":
            (site / "libtpu").mkdir()
            (site / "libtpu" / "libtpu.so").write_bytes(b"\x7fELF")
    return site


def _tree(root: Path, machine: Machine) -> None:
    """/sys/bus/pci/devices/<address>/{vendor,device,driver}, /dev nodes, /proc/<pid>/fd, /tmp/libtpu_lockfile."""
    functions = [(f"0000:00:{4 + i:02x}.0", "0x1ae0", machine.device_id, machine.driver) for i in range(machine.chips)]
    if machine.others:
        functions += [("0000:00:1e.0", "0x10de", 0x2330, "nvidia"), ("0000:00:1f.0", "0x8086", 0x7111, "ata_piix")]
    for address, vendor, device, driver in functions:
        folder = root / "sys/bus/pci/devices" / address
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(f"0x{device:04x}\n")
        if driver:
            (folder / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
    vfio = (sw.chip(machine.device_id) or sw.CHIPS[0x0063]).nodes == "vfio"
    (root / "dev/vfio").mkdir(parents=True)
    if machine.nodes:
        for i in range(machine.chips):
            (root / ("dev/vfio" if vfio else "dev") / (str(i) if vfio else f"accel{i}")).write_text("")
    if vfio:
        (root / "dev/vfio/vfio").write_text("")  # the container node: not a chip
    proc = root / "proc"
    (proc / "1/fd").mkdir(parents=True)
    (proc / "1/fd/0").symlink_to("/dev/null")  # a process holding nothing of the TPU's
    (proc / "self").mkdir()
    if machine.holder:
        fds = proc / str(HOLDER_PID) / "fd"
        fds.mkdir(parents=True)
        (fds / "3").symlink_to("/dev/vfio/0")
        (fds / "4").symlink_to("/dev/vfio/vfio")
        (proc / str(HOLDER_PID) / "cmdline").write_bytes(b"python3\0train.py\0--tpu\0")
    if machine.lockfile:
        (proc / "12345").mkdir()  # no fd folder: another user's process, not readable
        (root / "tmp").mkdir()
        (root / "tmp/libtpu_lockfile").write_text("")
    (root / "lib").mkdir()
    (root / "lib/libtpu.so").write_bytes(b"\x7fELF")


@dataclass(frozen=True)
class Seen:
    facts: facts.Facts
    checks: dict[str, Check]


def _environment(root: Path, machine: Machine, site: Path, empty: Path) -> dict[str, str]:
    """Only what the machine says: no GCE_METADATA_HOST or TPU_LIBRARY_PATH of the test's, no nvidia-smi on PATH."""
    env = {"PATH": str(empty), "HOME": str(empty), "TPUCTL_SYSFS_ROOT": str(root), "PYTHONPATH": str(site), **dict(machine.env)}
    if machine.libtpu_file:
        env["TPU_LIBRARY_PATH"] = str(root / "lib/libtpu.so")
    return env


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Seen]:
    """Every machine of MACHINES as the probe read it, with the checks' verdicts; the probes run side by side."""
    folder = tmp_path_factory.mktemp("probe")
    sites = {name: _site(folder, name) for name in SITES}
    empty = folder / "empty"
    empty.mkdir()
    started = {}
    for index, (name, machine) in enumerate(MACHINES.items()):
        root = folder / f"root-{index}"
        _tree(root, machine)
        # -S: the site folder is the only source of distributions, whatever the test's own interpreter has
        argv = [sys.executable, "-S", str(PROBE), json.dumps({"import": True, "workers": 2, "paths": [str(root / "sys"), str(root / "nope")]})]
        env = _environment(root, machine, sites[machine.site], empty)
        started[name] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    found = {}
    for name, child in started.items():
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err.decode()
        read = facts.parse(out.decode(), name)
        found[name] = Seen(read, {c.name: c for c in run_checks(read, Context())})
    return found


def _status(seen: Seen) -> dict[str, str]:
    return {name: seen.checks[name].status for name in ("tpu-chips", "tpu-driver", "tpu-busy", "libtpu", "tpu-build")}


def test_every_generation_is_read_from_sysfs_and_judged(seen: dict[str, Seen]) -> None:
    for name, device_id, chip in [("v2/v3", 0x0027, "v2/v3"), ("v4", 0x005E, "v4"), ("v5p", 0x0062, "v5p"), ("v6e", 0x006F, "v6e"), ("TPU7x", 0x0076, "TPU7x")]:
        read = seen[name].facts
        google = [f for f in read.pci if f.vendor == sw.GOOGLE_PCI_VENDOR]
        assert {f.device for f in google} == {device_id}, name
        assert f"TPU chip(s): {chip}" in seen[name].checks["tpu-chips"].found
    assert _status(seen["v2/v3"]) == {"tpu-chips": "ok", "tpu-driver": "ok", "tpu-busy": "ok", "libtpu": "ok", "tpu-build": "ok"}
    assert _status(seen["v6e"])["tpu-chips"] == "warn"
    assert _status(seen["TPU7x"])["tpu-chips"] == "fail"
    assert seen["v6e"].checks["tpu-chips"].found.startswith("8 TPU chip(s)")


def test_accel_generations_expose_accel_nodes_and_the_rest_vfio(seen: dict[str, Seen]) -> None:
    v3, v4, v5p = seen["v2/v3"].facts, seen["v4"].facts, seen["v5p"].facts
    assert v3.accel == ("/dev/accel0", "/dev/accel1", "/dev/accel2", "/dev/accel3") and v3.vfio == ()
    assert {f.driver for f in v4.pci if f.vendor == sw.GOOGLE_PCI_VENDOR} == {"accel"}
    assert v5p.vfio == ("/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/2", "/dev/vfio/3") and v5p.accel == ()  # not /dev/vfio/vfio
    assert seen["v2/v3"].checks["tpu-driver"].found == "4 device node(s) (/dev/accelN), driver accel"
    assert seen["v5p"].checks["tpu-driver"].found == "4 device node(s) (/dev/vfio/N), driver vfio-pci"


def test_only_google_and_nvidia_functions_are_read(seen: dict[str, Seen]) -> None:
    v4 = seen["v4"]
    assert sorted(f.vendor for f in v4.facts.pci) == [0x10DE] + [sw.GOOGLE_PCI_VENDOR] * 4
    assert v4.checks["gpus"].status == "warn" and "1 NVIDIA device(s)" in v4.checks["gpus"].found


def test_an_unknown_google_device_is_named(seen: dict[str, Seen]) -> None:
    check = seen["unknown"].checks["tpu-chips"]
    assert check.status == "warn" and "unknown Google device at 0000:00:04.0" in check.found


def test_a_chip_without_a_driver_symlink_fails_the_driver_check(seen: dict[str, Seen]) -> None:
    assert [f.driver for f in seen["no-driver"].facts.pci] == [None] * 4
    check = seen["no-driver"].checks["tpu-driver"]
    assert check.status == "fail" and "no kernel driver bound to 0000:00:04.0" in check.found


def test_chips_without_device_nodes(seen: dict[str, Seen]) -> None:
    machine = seen["no-nodes"]
    assert machine.facts.accel == () and machine.facts.vfio == ()
    assert machine.checks["tpu-driver"].status == "fail" and "no /dev/accelN device nodes" in machine.checks["tpu-driver"].found
    assert machine.checks["tpu-busy"].status == "ok"  # nothing to hold
    assert machine.checks["tpu-build"].status == "fail" and "tensorflow-cpu 2.18.0 cannot use the TPU" in machine.checks["tpu-build"].found


def test_a_process_with_a_tpu_node_open_is_its_holder(seen: dict[str, Seen]) -> None:
    machine = seen["held"]
    assert [(h.pid, h.command, h.devices) for h in machine.facts.holders] == [(HOLDER_PID, "python3 train.py --tpu", ("/dev/vfio/0",))]
    assert machine.checks["tpu-busy"].status == "fail" and machine.checks["tpu-busy"].fix.startswith(f"kill {HOLDER_PID} ")
    assert not machine.facts.lockfile
    assert seen["v5p"].facts.holders == ()  # /proc/1 holds /dev/null only


def test_a_leftover_lockfile_and_unreadable_processes(seen: dict[str, Seen]) -> None:
    machine = seen["v5e-2.15-pjrt"]
    assert machine.facts.lockfile and machine.facts.unreadable_processes == 1
    check = machine.checks["tpu-busy"]
    assert check.status == "warn" and "1 processes of other users not readable" in check.found and check.fix == "rm /tmp/libtpu_lockfile"


def test_libtpu_pins_are_read_from_the_dists_requires(seen: dict[str, Seen]) -> None:
    good, old = seen["v5e-2.15-pjrt"], seen["v5p"]
    tpu_dist = seen["v2/v3"].facts.dist("tensorflow-tpu")
    assert tpu_dist is not None and "libtpu==2.18.0" in tpu_dist.requires
    assert seen["v2/v3"].checks["libtpu"].found == "libtpu 2.18.0, as tensorflow-tpu 2.18.0 requires"
    assert any(p.endswith("libtpu/libtpu.so") for p in seen["v2/v3"].facts.libtpu_files)  # the package's own .so
    assert old.checks["libtpu"].status == "fail" and "libtpu 2.17.0, but tensorflow-tpu 2.18.0 needs libtpu==2.18.0" in old.checks["libtpu"].found
    assert good.checks["libtpu"].status == "ok" and "(the runtime image's)" in good.checks["libtpu"].found


def test_tensorflow_2_15_on_v5e_needs_the_pjrt_env(seen: dict[str, Seen]) -> None:
    assert seen["v5e-2.15"].checks["tpu-build"].status == "fail"
    assert "NEXT_PLUGGABLE_DEVICE_USE_C_API=true" in seen["v5e-2.15"].checks["tpu-build"].fix
    assert seen["v5e-2.15-pjrt"].facts.env["NEXT_PLUGGABLE_DEVICE_USE_C_API"] == "true"
    assert seen["v5e-2.15-pjrt"].checks["tpu-build"].status == "ok"
    assert seen["v5e-2.15"].checks["keras"].status == "ok"  # keras 2.15 from the site folder


def test_the_probe_says_what_it_could_not_do(seen: dict[str, Seen]) -> None:
    """No TensorFlow module on the path: nothing imported; paths asked about; off GCE, no metadata asked."""
    read = seen["TPU7x"].facts
    assert read.tf_import == {"status": "absent"} and read.tensorflow_package is None
    assert [v for k, v in sorted(read.paths.items())] == [False, True]  # root/nope, root/sys
    assert read.metadata.get("reachable") is False and not read.on_gce
    assert read.nvidia_smi == {"found": False}
    assert read.ports["asked"] == read.ports["bound"] == 2


@pytest.fixture(scope="module")
def here() -> Iterator[facts.Facts]:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TPUCTL_SYSFS_ROOT", raising=False)
        yield probe_here(sys.executable, Request(import_tensorflow=False))


def test_this_machine_through_probe_here(here: facts.Facts) -> None:
    """The probe's own answer on this machine, run as `tpuctl doctor` runs it, parses and says this interpreter."""
    assert here.python == tuple(sys.version_info[:3])
    assert os.path.realpath(here.executable) == os.path.realpath(sys.executable)
    assert here.tf_import.get("status") in ("skipped", "absent")
    checks = run_checks(here, Context())
    assert len(checks) == 17 and next(c for c in checks if c.name == "python").status in ("ok", "warn")


# An nvidia-smi that answers the probe's query as the real one does, for two GPUs.
TWO_GPUS = "".join(f"print('{i}, GPU-{i:08x}-1b2c-4d5e-8f90-a1b2c3d4e5f6, NVIDIA H100 80GB HBM3')\n" for i in range(2))


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a probe that kept all it read would meet MemoryError


SMI_VERDICTS = [
    ("endless", "warn", "nvidia-smi failed: it printed more than 1048576 bytes"),
    ("binary", "warn", "nvidia-smi's output could not be read"),
    ("garbage", "warn", "nvidia-smi's output could not be read"),
    ("two", "ok", "nvidia-smi lists 2 GPU(s)"),
]


def test_only_lines_nvidia_smi_answers_its_query_with_count_as_gpus(tmp_path: Path) -> None:
    """An nvidia-smi that prints without end is stopped at a megabyte (in a probe whose memory is capped); random bytes
    and lines that only look like GPUs are "could not be read", never a count; two real lines are two GPUs."""
    (tmp_path / "root").mkdir()
    for kind, status, found in SMI_VERDICTS:
        tool = tmp_path / kind / "nvidia-smi"
        tool.parent.mkdir()
        tool.write_text(f"#!{sys.executable}\n{TWO_GPUS if kind == 'two' else FAKE_SMI[kind]}")
        tool.chmod(0o755)
        env = {"PATH": str(tool.parent), "HOME": str(tmp_path), "TPUCTL_SYSFS_ROOT": str(tmp_path / "root")}
        argv = [sys.executable, "-S", str(PROBE), json.dumps({"import": False})]
        done = subprocess.run(argv, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=60, preexec_fn=_capped, check=False)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, (kind, done.stderr[-600:])
        read = facts.parse(done.stdout.decode(), kind)
        checks = {c.name: c for c in run_checks(read, Context(workers=4, workers_given=True))}
        assert (checks["gpus"].status, checks["gpus"].found[: len(found)]) == (status, found), (kind, checks["gpus"])
        shared = checks["gpu-share"].found
        assert ("2 GPU(s) (nvidia-smi)" in shared) if kind == "two" else ("GPU(s)" not in shared), (kind, shared)

"""The checks of a TPU machine: its chips on the PCI bus, their driver and device nodes, who holds them, libtpu,
the TensorFlow build and the runtime image (docs/doctor.md names the issue behind each)."""

from __future__ import annotations

import re

from tpuctl.doctor import versions
from tpuctl.doctor.facts import Dist, Facts
from tpuctl.doctor.verdict import Check, Context, ok, tf_dist, tf_minor, tpu_chips
from tpuctl.inputs.errors import one_line
from tpuctl.tpu import software as sw

_RUNTIME_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")  # as the TPU API names runtime versions: no '/' of an address


def check_tpu_chips(facts: Facts, context: Context) -> Check:
    """TPU chips on the PCI bus (Google's vendor 0x1ae0), named by device id: TPU7x has no TensorFlow at all,
    and TensorFlow on v6e is reported broken; both run Keras 3 on JAX, which the fix names as a command. A JAX run's
    chips are all JAX's."""
    chips = tpu_chips(facts)
    if not chips:
        return ok("tpu-chips", "no TPU chips on the PCI bus")
    unknown = [address for address, chip in chips if chip is None]
    known = [chip for _, chip in chips if chip is not None]
    names = ", ".join(sorted({chip.name for chip in known}))
    found = f"{len(chips)} TPU chip(s): {names or 'unknown'}"
    worst = next((c for c in known if c.tensorflow == "fail"), None) or next((c for c in known if c.tensorflow == "warn"), None)
    if worst and context.framework == "tensorflow":
        kinds = " or ".join(f"{name}-N" for name in sw.tensorflow_generations()[:2])
        fix = f"create the TPU as {kinds} for TensorFlow; {_to_jax(facts, worst, len(chips), context)}"
        return Check("tpu-chips", worst.tensorflow, f"{found}: {worst.why}", fix)
    if unknown:
        return Check("tpu-chips", "warn", f"{found}; an unknown Google device at {', '.join(unknown[:4])}", "upgrade tpuctl: this chip is newer than its table")
    return ok("tpu-chips", found)


def _to_jax(facts: Facts, chip: sw.Chip, count: int, context: Context) -> str:
    """The way to Keras 3 on JAX on a chip TensorFlow is leaving: a new TPU VM of this machine's type (its metadata's
    accelerator-type, else the chips seen here), or, for a chip the Cloud TPU API does not make (TPU7x), this machine."""
    if chip.generation is None:
        here = sw.jax_launch(context.script or "train.py", None)
        return f"or port the script to Keras 3 on JAX, pip install 'jax[tpu]' 'keras>=3.6' here, then `{here}` ({sw.JAX_GUIDE})"
    named = _attributes(facts).get("accelerator-type", "").strip()
    accelerator = named if named.startswith(f"{chip.generation}-") and named.isprintable() else f"{chip.generation}-{count}"
    return f"or port the script to Keras 3 on JAX and run `{sw.jax_launch(context.script or 'train.py', accelerator)}` ({sw.JAX_GUIDE})"


def check_tpu_driver(facts: Facts, _: Context) -> Check:
    """A chip is usable only through its device node: /dev/accelN (v2-v4) or /dev/vfio/N (v5e and later), with a
    kernel driver bound; a VM whose driver did not load shows chips and no nodes."""
    chips = [(f, sw.chip(f.device)) for f in facts.pci if f.vendor == sw.GOOGLE_PCI_VENDOR]
    if not chips:
        return ok("tpu-driver", "no TPU chips: nothing to check")
    unbound = [f.address for f, _ in chips if not f.driver]
    if unbound:
        return Check("tpu-driver", "fail", f"no kernel driver bound to {', '.join(unbound[:4])}", "restart the TPU VM (tpuctl stop-vm NAME, tpuctl start NAME)")
    want_vfio = any(chip is not None and chip.nodes == "vfio" for _, chip in chips)
    nodes = facts.vfio if want_vfio else facts.accel
    kind = "/dev/vfio/N" if want_vfio else "/dev/accelN"
    if not nodes:
        return Check("tpu-driver", "fail", f"{len(chips)} chip(s) but no {kind} device nodes", "restart the TPU VM (tpuctl stop-vm NAME, tpuctl start NAME)")
    drivers = ", ".join(sorted({f.driver or "?" for f, _ in chips}))
    return ok("tpu-driver", f"{len(nodes)} device node(s) ({kind}), driver {drivers}")


def check_tpu_busy(facts: Facts, _: Context) -> Check:
    """libtpu takes the whole TPU: a crashed run's leftover process (or a notebook) holds it, and the next import
    hangs or fails with "TPU is already in use" (tensorflow#61293)."""
    if not facts.accel and not facts.vfio:
        return ok("tpu-busy", "no TPU device nodes: nothing to check")
    if facts.holders:
        first = facts.holders[0]
        others = f" and {len(facts.holders) - 1} more" if len(facts.holders) > 1 else ""
        pids = " ".join(str(h.pid) for h in facts.holders)
        return Check(
            "tpu-busy",
            "fail",
            f"PID {first.pid} ({one_line(first.command, 80)}) holds {', '.join(first.devices[:2])}{others}",
            f"kill {pids} (or tpuctl ssh NAME --worker all --cleanup)",
        )
    note = f"; {facts.unreadable_processes} processes of other users not readable (run as root to see them)" if facts.unreadable_processes else ""
    if facts.lockfile:
        return Check("tpu-busy", "warn", f"no process holds the TPU, but /tmp/libtpu_lockfile is left{note}", "rm /tmp/libtpu_lockfile")
    return ok("tpu-busy", f"free{note}")


def check_libtpu(facts: Facts, _: Context) -> Check:
    """libtpu must be the one TensorFlow was built against: tensorflow-tpu pins it exactly, and another version
    breaks TPU detection ("No TPU platform registered", ConfigureDistributedTPU with only CPU registered)."""
    chips = tpu_chips(facts)
    tpu_dist = facts.dist("tensorflow-tpu")
    lib = facts.dist("libtpu") or facts.dist("libtpu-nightly")
    if not chips and tpu_dist is None and lib is None:
        return ok("libtpu", "not needed: no TPU chips")
    if tpu_dist is not None:
        wanted = next((r for r in tpu_dist.requires if versions.split_requirement(r)[0] in ("libtpu", "libtpu-nightly")), None)
        wanted = wanted or sw.LIBTPU_FOR_TENSORFLOW_TPU.get(tpu_dist.version)
        if wanted:
            name, spec = versions.split_requirement(wanted)
            have = facts.dist(name)
            if have is None or not versions.satisfies(have.version, spec):
                shown = have.shown if have else f"no {name}"
                return Check("libtpu", "fail", f"{shown}, but {tpu_dist.shown} needs {name}{spec}", f"pip install '{name}{spec}' -f {sw.LIBTPU_INDEX}")
            return ok("libtpu", f"{have.shown}, as {tpu_dist.shown} requires")
    if lib is not None:
        return ok("libtpu", lib.shown)
    if facts.libtpu_files:
        return ok("libtpu", f"{one_line(facts.libtpu_files[0], 120)} (the runtime image's)")
    return Check(
        "libtpu",
        "fail",
        "TPU chips, but no libtpu (no libtpu package, no /lib/libtpu.so, no TPU_LIBRARY_PATH)",
        f"pip install tensorflow-tpu -f {sw.LIBTPU_INDEX}",
    )


def check_tpu_build(facts: Facts, _: Context) -> Check:
    """On a TPU machine, TensorFlow must be a TPU build: tensorflow-cpu never sees a TPU (Kaggle ships it on TPU
    images on purpose), and tensorflow-tpu stops at 2.20; TensorFlow 2.15 on v5e/v5p needs its PJRT plugin named
    (tensorflow#90807)."""
    chips = [chip for _, chip in tpu_chips(facts) if chip is not None]
    dist = tf_dist(facts)
    if not chips or dist is None:
        return ok("tpu-build", "no TPU chips" if not chips else "no TensorFlow: see tensorflow")
    tf = versions.minor(dist.version)
    newest = f"{sw.NEWEST_TENSORFLOW_TPU[0]}.{sw.NEWEST_TENSORFLOW_TPU[1]}"
    if dist.name.endswith("-cpu"):
        return Check(
            "tpu-build",
            "fail",
            f"{dist.shown} cannot use the TPU",
            f"pip uninstall -y {dist.name} && pip install 'tensorflow-tpu=={newest}.*' -f {sw.LIBTPU_INDEX}",
        )
    if tf and tf > sw.NEWEST_TENSORFLOW_TPU and dist.name != "tensorflow-tpu":
        return Check(
            "tpu-build",
            "fail",
            f"{dist.shown}: tensorflow-tpu stops at {newest}, and {dist.name} has no TPU support",
            f"pip install 'tensorflow-tpu=={newest}.*' -f {sw.LIBTPU_INDEX}",
        )
    pjrt = {chip.name for chip in chips if chip.pjrt_only}
    if tf and tf < (2, 15) and pjrt:
        return Check(
            "tpu-build",
            "fail",
            f"{dist.shown} on {', '.join(sorted(pjrt))}: these chips need TensorFlow 2.15 or later (PJRT)",
            f"recreate the TPU with runtime {sw.newest_tensorflow_image()}",
        )
    if tf == (2, 15) and pjrt:
        missing = {k: v for k, v in sw.PJRT_ENV_2_15.items() if facts.env.get(k) != v}
        if missing:
            exports = " ".join(f"{k}={v}" for k, v in missing.items())
            return Check(
                "tpu-build",
                "fail",
                f"{dist.shown} on {', '.join(sorted(pjrt))} without its PJRT plugin named: 'No TPU platform registered'",
                f"export {exports} (tpuctl launch --env passes them to workers)",
            )
    return ok("tpu-build", f"{dist.shown} on {', '.join(sorted({c.name for c in chips}))}")


def check_runtime_image(facts: Facts, context: Context) -> Check:
    """The TPU VM's runtime image must carry the TensorFlow the workers use: tpu-ubuntu2204-base has none, and an
    image's libtpu matches only its own TensorFlow version."""
    name = context.runtime_version or _image_from_metadata(facts)
    if name is None:
        if facts.metadata.get("reachable") is True and "accelerator-type" in _attributes(facts):
            return ok("runtime-image", "a TPU VM whose metadata does not name its runtime image (tpuctl describe NAME shows it)")
        return ok("runtime-image", "not a TPU VM")
    image = sw.read_image(name)
    tf = tf_minor(facts)
    shown = one_line(name, 80)
    if image is None:
        pip_tpu = facts.dist("tensorflow-tpu")
        if pip_tpu is not None:
            return ok("runtime-image", f"{shown}, TensorFlow from pip ({pip_tpu.shown})")
        return Check(
            "runtime-image",
            "warn",
            f"{shown} has no TensorFlow for the TPU",
            f"pip install tensorflow-tpu -f {sw.LIBTPU_INDEX}, or recreate the TPU VM with a TensorFlow image "
            f"(--runtime-version {sw.newest_tensorflow_image()})",
        )
    if tf is not None and image.tensorflow[:2] != tf:
        return Check(
            "runtime-image",
            "warn",
            f"{shown} is for TensorFlow {image.tensorflow[0]}.{image.tensorflow[1]}, the workers have {tf[0]}.{tf[1]}",
            f"pip install '{(tf_dist(facts) or Dist('tensorflow', '')).name}=={'.'.join(map(str, image.tensorflow))}', "
            "or recreate the TPU VM with the image of your version",
        )
    return ok("runtime-image", shown)


def _attributes(facts: Facts) -> dict[str, str]:
    found = facts.metadata.get("attributes")
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(found, dict) else {}


def _image_from_metadata(facts: Facts) -> str | None:
    """The image a TPU VM names itself: a `runtime-version` attribute, else tpu-env's RUNTIME_VERSION where that is
    an image name (on some VMs it is a container image's address instead, which says nothing of TensorFlow)."""
    attributes = _attributes(facts)
    if "runtime-version" in attributes:
        return attributes["runtime-version"].strip() or None
    for line in attributes.get("tpu-env", "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "RUNTIME_VERSION":
            value = value.strip().strip("'\"")
            return value if _RUNTIME_NAME.fullmatch(value) else None
    return None

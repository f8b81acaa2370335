"""The checks of a JAX run's interpreter (`tpuctl doctor --framework jax`): its Python, jax with the jaxlib and libtpu
jax itself asks for, and Keras 3. They read versions from distribution metadata, as every check does: nothing here
(nor in the probe) imports JAX.

jax's own rule for its runtime is in its metadata: its wheel requires `jaxlib<=X,>=MIN` (MIN is jax/version.py's
_minimum_jaxlib_version, X jax's own version), the same bounds `import jax` enforces in
jax/_src/lib/__init__.py's check_jaxlib_version ("jaxlib is version ..., but this version of jax requires version
>= ...", "jaxlib version ... is newer than and incompatible with jax version ..."); and its `tpu` extra pins the libtpu
the release was made with (`libtpu==0.0.42.*; extra == "tpu"` for jax 0.10.2): `pip install 'jax[tpu]'` installs that
pair, as Google's JAX quickstart for TPU VMs does (https://cloud.google.com/tpu/docs/run-calculation-jax).
"""

from __future__ import annotations

from tpuctl.doctor import versions
from tpuctl.doctor.facts import Dist, Facts
from tpuctl.doctor.verdict import Check, Context, ok, tpu_chips
from tpuctl.inputs.errors import one_line

JAX = "jax"
JAX_HERE = "pip install 'tpuctl[jax]'"  # jax with CPU jaxlib and Keras 3 (pyproject.toml's jax extra)
# jax/_src/xla_bridge.py, when a TPU is on the bus but no TPU backend came up: JAX runs on the CPU instead.
CPU_FALLBACK = "A Google TPU may be present on this machine, but either a TPU-enabled jaxlib or libtpu is not installed"


def check_python(facts: Facts, _: Context) -> Check:
    """The interpreter answers with its version (TensorFlow's Python table is no rule for JAX: pip finds a jax for it
    or says it has none)."""
    if facts.python is None:
        return Check("python", "fail", "the interpreter did not say its version", "check the interpreter given with --python")
    return ok("python", f"Python {'.'.join(map(str, facts.python))} ({one_line(facts.executable, 120)})")


def requirement(jax: Dist, names: tuple[str, ...], extra: str | None) -> tuple[str, str] | None:
    """(project, specifier) of jax's requirement on one of `names`: outside any extra (extra None), or in that extra."""
    for line in jax.requires:
        name, spec = versions.split_requirement(line)
        marker = line.partition(";")[2]
        if name in names and (f'"{extra}"' in marker or f"'{extra}'" in marker if extra else "extra" not in marker):
            return name, spec
    return None


def check_jax_versions(facts: Facts, _: Context) -> Check:
    """jax, the jaxlib it accepts and, on a TPU, the libtpu jax[tpu] pins: one pair jax's import refuses to split, one
    pair it was released with."""
    jax = facts.dist("jax")
    if jax is None:
        return Check("jax-versions", "fail", "jax is not installed", f"{JAX_HERE} (jax[tpu] on a TPU VM: in --requirements)")
    chips = tpu_chips(facts)
    reinstall = f"pip install 'jax[tpu]=={jax.version}'" if chips else None
    lib = facts.dist("jaxlib")
    accepts = requirement(jax, ("jaxlib",), None)
    if lib is None:
        fix = reinstall or f"pip install 'jaxlib{accepts[1] if accepts else ''}'"
        return Check("jax-versions", "fail", f"{jax.shown} without jaxlib: `import jax` fails", fix)
    if accepts is not None and not versions.satisfies(lib.version, accepts[1]):
        return Check(
            "jax-versions",
            "fail",
            f"{lib.shown}, but {jax.shown} requires jaxlib{accepts[1]}: `import jax` refuses it (check_jaxlib_version)",
            reinstall or f"pip install 'jaxlib{accepts[1]}'",
        )
    found = f"{jax.shown}, {lib.shown}" + (f" (jax requires jaxlib{accepts[1]})" if accepts else "")
    if not chips:
        return ok("jax-versions", found)
    return _libtpu(facts, jax, found, reinstall or "")


def _libtpu(facts: Facts, jax: Dist, found: str, reinstall: str) -> Check:
    """On a TPU: the libtpu JAX loads (the libtpu package, else TPU_LIBRARY_PATH: jax/_src/cloud_tpu_init.py's
    get_tpu_library_path) against the one jax[tpu] pins."""
    pin = requirement(jax, ("libtpu", "libtpu-nightly"), "tpu")
    pinned = f"{pin[0]}{pin[1]}" if pin else "its libtpu"
    have = facts.dist("libtpu") or facts.dist("libtpu-nightly")
    if have is None:
        elsewhere = facts.env.get("TPU_LIBRARY_PATH") or (facts.libtpu_files[0] if facts.libtpu_files else None)
        if elsewhere:
            loads = f"{found}; no libtpu package: JAX loads {one_line(elsewhere, 120)}, not the {pinned} jax[tpu] {jax.version} pins"
            return Check("jax-versions", "warn", loads, reinstall)
        return Check("jax-versions", "fail", f"{found}, TPU chips, but no libtpu: JAX falls back to the CPU ({CPU_FALLBACK!r})", reinstall)
    if pin is not None and (have.name != pin[0] or not versions.satisfies(have.version, pin[1])):
        return Check("jax-versions", "warn", f"{found}; {have.shown}, but jax[tpu] {jax.version} pins {pinned}: not the pair jax was released with", reinstall)
    return ok("jax-versions", f"{found}, {have.shown}" + (" as jax[tpu] pins" if pin else ""))


def check_keras(facts: Facts, _: Context) -> Check:
    """Keras 3 is the Keras with backends, JAX's among them (https://keras.io/getting_started/); Keras 2 is TensorFlow's
    alone. A plain JAX script needs no Keras at all."""
    keras = facts.dist("keras")
    if keras is None:
        missing = "Keras is not installed: a Keras 3 script on JAX needs it (a plain JAX script does not)"
        return Check("keras", "warn", missing, f"{JAX_HERE} (keras in --requirements on a TPU VM)")
    major = versions.release(keras.version)
    if major is not None and major[0] < 3:
        return Check("keras", "fail", f"{keras.shown}: Keras 2 has no JAX backend", "pip install 'keras>=3.6'")
    return ok("keras", f"{keras.shown}, with its JAX backend")

"""Several hosts at once: every host's checks grouped where they agree, and the checks only a group can fail.

A slice trains only if every host can: one host with another TensorFlow, Keras or libtpu makes the
collectives disagree or the import differ, and that host must be named. So identical results are
printed once with the hosts they hold for, and a result only some hosts have names those hosts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tpuctl.doctor.checks import run_checks
from tpuctl.doctor.facts import Facts
from tpuctl.doctor.verdict import Check, Context
from tpuctl.inputs.errors import one_line

# What must be the same on every host (a collective between two TensorFlow versions, or two libtpus, fails).
SAME: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TensorFlow", ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-gpu", "tf-nightly")),
    ("Keras", ("keras",)),
    ("tf-keras", ("tf-keras",)),
    ("libtpu", ("libtpu", "libtpu-nightly")),
    ("JAX", ("jax",)),
    ("jaxlib", ("jaxlib",)),
)


@dataclass(frozen=True)
class HostAnswer:
    """One host's probe: its facts, or why there are none (ssh could not connect, the probe failed)."""

    host: str
    facts: Facts | None
    error: str | None = None


@dataclass(frozen=True)
class Row:
    """One line of the report: a check's result and the hosts it holds for (empty: this machine alone)."""

    check: Check
    hosts: tuple[str, ...] = ()


def grouped(answers: list[HostAnswer], context: Context, script_dir: str | None = None) -> list[Row]:
    """Every check on every host that answered, identical results merged, then the cross-host checks."""
    checked = [(a.host, run_checks(a.facts, context)) for a in answers if a.facts is not None]
    rows: list[Row] = []
    if checked:
        for index in range(len(checked[0][1])):
            groups: dict[Check, list[str]] = {}
            for host, checks in checked:
                groups.setdefault(checks[index], []).append(host)
            order = {"fail": 0, "warn": 1, "ok": 2}
            for check, hosts in sorted(groups.items(), key=lambda item: (order[item[0].status], -len(item[1]))):
                rows.append(Row(check, tuple(hosts)))
    rows.append(Row(reachable(answers), tuple(a.host for a in answers)))
    rows += [Row(check, tuple(a.host for a in answers)) for check in same_versions(answers)]
    if script_dir is not None:
        rows.append(Row(script_present(answers, script_dir), tuple(a.host for a in answers)))
    return rows


def reachable(answers: list[HostAnswer]) -> Check:
    failed = [a for a in answers if a.facts is None]
    if not failed:
        return Check("hosts", "ok", f"all {len(answers)} host(s) answered")
    first = failed[0]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return Check(
        "hosts",
        "fail",
        f"{len(failed)} of {len(answers)} host(s) gave no answer: {first.host}: {one_line(first.error or '?', 160)}{more}",
        "check that ssh HOST works (user, key, ProxyJump), and that --python exists there",
    )


def _version(facts: Facts, names: tuple[str, ...]) -> str:
    found = [d.shown for d in facts.dists if d.name in names]
    return ", ".join(found) or "none"


def same_versions(answers: list[HostAnswer]) -> list[Check]:
    """One check per thing that must match: Python, then each package family; the odd hosts out named."""
    present = [a for a in answers if a.facts is not None]
    if len(present) < 2:
        return []
    readings: list[tuple[str, dict[str, str]]] = [
        ("same-python", {a.host: ".".join(map(str, a.facts.python)) if a.facts and a.facts.python else "?" for a in present}),
        *((f"same-{label.lower()}", {a.host: _version(a.facts, names) for a in present if a.facts}) for label, names in SAME),
    ]
    checks = []
    for name, by_host in readings:
        counts = Counter(by_host.values())
        if len(counts) == 1:
            checks.append(Check(name, "ok", f"{next(iter(counts))} on every host"))
            continue
        usual = counts.most_common(1)[0][0]
        odd = [f"{host}: {value}" for host, value in by_host.items() if value != usual]
        checks.append(
            Check(
                name,
                "fail",
                f"{usual} on {counts[usual]} host(s), but " + "; ".join(odd[:4]) + (" ..." if len(odd) > 4 else ""),
                "install the same versions everywhere: pip freeze on one host, pip install -r on the others",
            )
        )
    return checks


def script_present(answers: list[HostAnswer], folder: str) -> Check:
    """The script's folder as the workers will look for it (launch without --sync copies nothing)."""
    missing = [a.host for a in answers if a.facts is not None and not a.facts.paths.get(folder, False)]
    if not missing:
        return Check("script-dir", "ok", f"{one_line(folder, 120)} on every host")
    return Check(
        "script-dir",
        "warn",
        f"{one_line(folder, 120)} missing on {', '.join(missing[:6])}",
        "launch with --sync (copies the script's folder), or --remote-dir where it is",
    )

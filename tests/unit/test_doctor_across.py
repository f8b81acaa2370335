"""Several hosts' probes at once (tpuctl/doctor/across.py): identical results printed once with all their hosts,
a host that differs named, and the checks only a group can fail.

A slice trains only if every host can, and one host with another TensorFlow, Keras, tf-keras or libtpu makes
the collectives disagree; the user must read which host and which version. Facts are built from probe-shaped
answers through `facts.from_json`, as the ssh path reads them.
"""

from __future__ import annotations

from typing import Any

import pytest

from tpuctl.doctor import facts
from tpuctl.doctor.across import HostAnswer, Row, grouped
from tpuctl.doctor.checks import CHECKS
from tpuctl.doctor.verdict import Context

HOSTS = ("10.0.0.2", "10.0.0.3", "10.0.0.4")
SCRIPT_DIR = "/home/u/train"
BASE = {"tensorflow-tpu": "2.18.0", "libtpu": "2.18.0", "keras": "3.6.0", "tf-keras": "2.18.0", "tensorboard": "2.18.0"}


def host(name: str, python: tuple[int, int, int] = (3, 10, 12), script_dir: bool = True, **versions: str | None) -> HostAnswer:
    """A v5e TPU VM worker's probe answer; `versions` change (None: remove) the installed distributions."""
    installed = {k: v for k, v in {**BASE, **versions}.items() if v is not None}
    raw: dict[str, Any] = {
        "hostname": f"t1v-{name}",
        "python": {"version": list(python), "executable": "/usr/bin/python3"},
        "distributions": [{"name": n, "version": v, "location": "/usr/lib/python3/dist-packages", "requires": []} for n, v in installed.items()],
        "tensorflow_package": "/usr/lib/python3/dist-packages/tensorflow",
        "pci": [{"address": f"0000:00:0{4 + i}.0", "vendor": "0x1ae0", "device": "0x0063", "driver": "vfio-pci"} for i in range(4)],
        "dev": {"accel": [], "vfio": [f"/dev/vfio/{i}" for i in range(4)]},
        "holders": {"held": [], "unreadable": 0, "lockfile": False},
        "ports": {"asked": 2, "bound": 2, "range": [32768, 60999]},
        "paths": {SCRIPT_DIR: script_dir},
        "import": {"status": "ok", "version": installed.get("tensorflow-tpu"), "seconds": 6.0},
    }
    return HostAnswer(name, facts.from_json(raw))


def rows_named(rows: list[Row], name: str) -> list[Row]:
    return [row for row in rows if row.check.name == name]


def test_identical_hosts_give_one_row_per_check_with_every_host() -> None:
    rows = grouped([host(h) for h in HOSTS], Context(), SCRIPT_DIR)
    names = [row.check.name for row in rows]
    assert len(names) == len(set(names)) == len(CHECKS) + 1 + 7 + 1  # the checks, hosts, same-*, script-dir
    assert all(row.hosts == HOSTS for row in rows)
    assert [(row.check.name, row.check.status) for row in rows[len(CHECKS) :]] == [
        ("hosts", "ok"),
        ("same-python", "ok"),
        ("same-tensorflow", "ok"),
        ("same-keras", "ok"),
        ("same-tf-keras", "ok"),
        ("same-libtpu", "ok"),
        ("same-jax", "ok"),
        ("same-jaxlib", "ok"),
        ("script-dir", "ok"),
    ]
    assert rows_named(rows, "same-tensorflow")[0].check.found == "tensorflow-tpu 2.18.0 on every host"
    assert rows_named(rows, "hosts")[0].check.found == "all 3 host(s) answered"


def test_a_host_that_differs_gets_its_own_row_first() -> None:
    answers = [host(HOSTS[0]), host(HOSTS[1], libtpu="2.17.0"), host(HOSTS[2])]
    libtpu = rows_named(grouped(answers, Context()), "libtpu")
    assert [(row.check.status, row.hosts) for row in libtpu] == [("fail", (HOSTS[1],)), ("ok", (HOSTS[0], HOSTS[2]))]
    assert "libtpu 2.17.0" in libtpu[0].check.found


@pytest.mark.parametrize(
    ("check", "change", "usual", "odd"),
    [
        ("same-python", {"python": (3, 11, 4)}, "3.10.12", "3.11.4"),
        ("same-tensorflow", {"tensorflow-tpu": "2.17.1"}, "tensorflow-tpu 2.18.0", "tensorflow-tpu 2.17.1"),
        ("same-keras", {"keras": "3.8.0"}, "keras 3.6.0", "keras 3.8.0"),
        ("same-tf-keras", {"tf-keras": None}, "tf-keras 2.18.0", "none"),
        ("same-libtpu", {"libtpu": "0.0.10"}, "libtpu 2.18.0", "libtpu 0.0.10"),
    ],
)
def test_one_host_with_another_version_fails_naming_it_and_its_version(check: str, change: dict[str, Any], usual: str, odd: str) -> None:
    answers = [host(HOSTS[0]), host(HOSTS[1]), host(HOSTS[2], **change)]
    rows = grouped(answers, Context())
    [row] = rows_named(rows, check)
    assert row.check.status == "fail"
    assert row.check.found == f"{usual} on 2 host(s), but {HOSTS[2]}: {odd}"
    assert "pip freeze" in row.check.fix
    others = [r.check for r in rows if r.check.name.startswith("same-") and r.check.name != check]
    assert all(c.status == "ok" for c in others), others


def test_a_second_tensorflow_distribution_on_one_host_shows_both() -> None:
    rows = grouped([host(HOSTS[0]), host(HOSTS[1], tensorflow="2.18.0")], Context())
    assert rows_named(rows, "same-tensorflow")[0].check.found.endswith(f"{HOSTS[1]}: tensorflow-tpu 2.18.0, tensorflow 2.18.0")


def test_hosts_that_gave_no_answer_fail_with_their_error_and_the_rest_are_still_checked() -> None:
    refused = HostAnswer("10.0.0.9", None, "ssh: connect to host 10.0.0.9 port 22: Connection refused\r\n\x1b[2J")
    answers = [host(HOSTS[0]), refused, host(HOSTS[1]), HostAnswer("10.0.0.10", None, None)]
    rows = grouped(answers, Context(), SCRIPT_DIR)
    [hosts] = rows_named(rows, "hosts")
    assert hosts.check.status == "fail"
    assert hosts.check.found == "2 of 4 host(s) gave no answer: 10.0.0.9: ssh: connect to host 10.0.0.9 port 22: Connection refused \\x1b[2J (and 1 more)"
    assert "ssh HOST" in hosts.check.fix
    assert rows_named(rows, "python")[0].hosts == (HOSTS[0], HOSTS[1])  # only the hosts that answered
    assert rows_named(rows, "same-tensorflow")[0].check.status == "ok"
    assert rows_named(rows, "script-dir")[0].check.status == "ok"


def test_no_host_answered() -> None:
    rows = grouped([HostAnswer("a", None, "Permission denied (publickey)")], Context(), SCRIPT_DIR)
    assert [(row.check.name, row.check.status) for row in rows] == [("hosts", "fail"), ("script-dir", "ok")]
    assert rows[0].check.found == "1 of 1 host(s) gave no answer: a: Permission denied (publickey)"


def test_one_host_alone_has_nothing_to_compare() -> None:
    rows = grouped([host(HOSTS[0])], Context())
    assert not [row for row in rows if row.check.name.startswith("same-")]


def test_the_scripts_folder_missing_on_one_host_warns_naming_it() -> None:
    rows = grouped([host(HOSTS[0]), host(HOSTS[1], script_dir=False), host(HOSTS[2])], Context(), SCRIPT_DIR)
    [row] = rows_named(rows, "script-dir")
    assert row.check.status == "warn"
    assert row.check.found == f"{SCRIPT_DIR} missing on {HOSTS[1]}"
    assert "--sync" in row.check.fix
    assert not rows_named(grouped([host(HOSTS[0])], Context()), "script-dir")  # no script: no such row

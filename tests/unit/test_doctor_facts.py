"""The probe's answer read back (tpuctl/doctor/facts.py) and the version reading the checks compare by
(tpuctl/doctor/versions.py), under hostile input.

A probe's answer comes from another machine over ssh and from whatever the workers' interpreter prints
(a sitecustomize, a broken site-packages), so it is untrusted: reading it gives Facts or one TpuctlError
(exit 1, one line), never a traceback, and what the checks then print about it is one printable line each,
whatever escape sequences the answer carried. Versions and specifiers come from distributions' metadata,
which anyone can write: reading them never raises.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuctl.doctor import facts, versions
from tpuctl.doctor.checks import run_checks
from tpuctl.doctor.verdict import Context
from tpuctl.inputs.errors import FAILED, TpuctlError

EXAMPLES = int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
NASTY = ["\x1b[2J\x1b[H", "\n", "\r", "\x00", "\u2028", "\u202e", "\x7f", "\t", "é", "😀", "", " "]

# A full answer, every part of it filled, as a TPU VM's probe prints it: the template hostile values go into.
FULL: dict[str, Any] = {
    "format": 1,
    "hostname": "t1v-n-0",
    "python": {"version": [3, 10, 12], "executable": "/usr/bin/python3", "implementation": "cpython", "prefix": "/usr"},
    "distributions": [
        {"name": "tensorflow-tpu", "version": "2.18.0", "location": "/usr/lib/python3/dist-packages", "requires": ["libtpu==2.18.0"]},
        {"name": "libtpu", "version": "2.17.0", "location": "/usr/lib/python3/dist-packages", "requires": []},
        {"name": "keras", "version": "3.6.0", "location": "/usr/lib/python3/dist-packages", "requires": []},
        {"name": "jax", "version": "0.4.35", "location": "/usr/lib/python3/dist-packages", "requires": []},
    ],
    "tensorflow_package": "/usr/lib/python3/dist-packages/tensorflow",
    "env": {"TF_USE_LEGACY_KERAS": "1", "JAX_PLATFORMS": "tpu"},
    "on_gce": True,
    "pci": [
        {"address": "0000:00:04.0", "vendor": "0x1ae0", "device": "0x006f", "driver": None},
        {"address": "0000:00:05.0", "vendor": "0x10de", "device": "0x2330", "driver": "nvidia"},
    ],
    "dev": {"accel": ["/dev/accel0"], "vfio": ["/dev/vfio/0"]},
    "holders": {"held": [{"pid": 7, "command": "python train.py", "devices": ["/dev/vfio/0"]}], "unreadable": 2, "lockfile": True},
    "libtpu_files": ["/lib/libtpu.so"],
    "ports": {"asked": 4, "bound": 3, "error": "[Errno 98] Address already in use", "range": [60000, 60001]},
    "credentials": {"env_file": "/k.json", "env_file_readable": False, "adc_file": "/adc.json"},
    "paths": {"/home/u/train": True},
    "metadata": {
        "reachable": True,
        "date": "Fri, 27 Nov 2026 21:37:44 GMT",
        "local_time": 1795815000.5,
        "attributes": {"accelerator-type": "v6e-8", "tpu-env": "RUNTIME_VERSION: 'tpu-vm-tf-2.15.0-pjrt'", "runtime-version": "tpu-vm-tf-2.16.1"},
        "service_account": "sa@p.iam.gserviceaccount.com",
    },
    "nvidia_smi": {"found": True, "lines": ["0, GPU-5c2a3f5e-1b2c-4d5e-8f90-a1b2c3d4e5f6, NVIDIA H100"], "cut": False, "error": None},
    "import": {"status": "crash", "signal": 11, "seconds": 3.5, "stage": "import", "message": "Segmentation fault", "devices": {"GPU": 0}},
}
CONTEXTS = [Context(), Context(model_dir="gs://b/run", workers=4096, runtime_version="tpu-vm-tf-2.16.1-pjrt"), Context(runtime_version="tpu-ubuntu2204-base")]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the template a value sits: each key, list item and leaf (so whole parts are replaced too)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


PATHS = _paths(FULL)
TEXT = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(NASTY) | st.text(max_size=4), max_size=8).map("".join))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**300), max_value=10**300) | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _replaced(replacements: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
    """The template with those values put in, shorter paths first; a path an earlier value took away is skipped."""
    raw = copy.deepcopy(FULL)
    for path, value in sorted(replacements.items(), key=lambda item: len(item[0])):
        target: Any = raw
        try:
            for step in path[:-1]:
                target = target[step]
            if isinstance(target, dict) or (isinstance(target, list) and isinstance(path[-1], int) and path[-1] < len(target)):
                target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    return raw


def assert_printable(read: facts.Facts) -> None:
    """What every check says about these facts: one printable line each, under every context."""
    for context in CONTEXTS:
        for check in run_checks(read, context):
            assert check.status in ("ok", "warn", "fail")
            for line in (check.found, check.fix):
                assert line.isprintable(), check  # no newline, no escape sequence, no bidi override


def assert_one_line_error(output: str) -> TpuctlError:
    with pytest.raises(TpuctlError) as raised:
        facts.parse(output, "worker-3")
    assert raised.value.exit_code == FAILED
    assert str(raised.value).isprintable() and str(raised.value).startswith("worker-3: the doctor's probe gave no answer")
    return raised.value


@pytest.mark.fuzz
@FUZZ
@given(replacements=st.dictionaries(st.sampled_from(PATHS), JSON, max_size=6), noise=st.lists(TEXT, max_size=3))
def test_any_json_in_any_field_gives_facts_whose_checks_print_one_line(replacements: dict[tuple[Any, ...], Any], noise: list[str]) -> None:
    output = "\n".join(noise) + "\n" + facts.MARK + json.dumps(_replaced(replacements)) + "\n"
    try:
        read = facts.parse(output, "worker-3")
    except TpuctlError as err:  # a noise line that is itself a marker line may take the answer's place
        assert err.exit_code == FAILED and str(err).isprintable()
        return
    assert_printable(read)


@pytest.mark.fuzz
@FUZZ
@given(raw=JSON)
def test_any_json_after_the_marker_gives_facts_or_one_error(raw: Any) -> None:
    output = facts.MARK + json.dumps(raw)
    if not isinstance(raw, dict):
        assert_one_line_error(output)
        return
    assert_printable(facts.parse(output, "worker-3"))


@pytest.mark.fuzz
@FUZZ
@given(output=st.text(max_size=300))
def test_any_output_gives_facts_or_one_error(output: str) -> None:
    try:
        read = facts.parse(output, "worker-3")
    except TpuctlError as err:
        assert err.exit_code == FAILED and str(err).isprintable()
        return
    assert_printable(read)


def test_the_full_answer_reads_every_part() -> None:
    """The template itself: every field read, so the fuzzing above replaces values the checks really use."""
    read = facts.parse("sitecustomize loaded\n" + facts.MARK + json.dumps(FULL), "w")
    assert read.python == (3, 10, 12) and read.on_gce and read.lockfile and read.unreadable_processes == 2
    assert [d.shown for d in read.dists] == ["tensorflow-tpu 2.18.0", "libtpu 2.17.0", "keras 3.6.0", "jax 0.4.35"]
    assert read.dists[0].requires == ("libtpu==2.18.0",)
    assert [(f.vendor, f.device, f.driver) for f in read.pci] == [(0x1AE0, 0x006F, None), (0x10DE, 0x2330, "nvidia")]
    assert read.holders[0].pid == 7 and read.holders[0].devices == ("/dev/vfio/0",)
    assert read.accel == ("/dev/accel0",) and read.vfio == ("/dev/vfio/0",) and read.paths == {"/home/u/train": True}
    statuses = {c.name: c.status for c in run_checks(read, CONTEXTS[1])}
    assert statuses["tpu-chips"] == statuses["jax"] == "warn" and statuses["libtpu"] == statuses["import"] == statuses["clock"] == "fail"


@pytest.mark.parametrize(
    "output",
    [
        "",
        "   \n\n",
        'Traceback (most recent call last):\n  File "<string>", line 1\nSyntaxError: invalid syntax\n',
        facts.MARK + '{"hostname": "w", "python": {"version": [3, 11',  # cut off mid-answer
        facts.MARK + "[1, 2, 3]",
        facts.MARK + "null",
        facts.MARK + "[" * 100_000 + "]" * 100_000,  # nested past the JSON reader's recursion limit
        facts.MARK + '{"n": 1' + "0" * 5000 + "}",  # past Python's int digit limit
        "tpuctl-doctor" + json.dumps(FULL),  # no space after the marker
        " " + facts.MARK + json.dumps(FULL),  # not at the start of a line
        facts.MARK + json.dumps(FULL) + "x" * (facts.MAX_ANSWER + 1),  # the answer line pushed out of the window read
        "\x1b[2J" + "bad\x00output\n",
    ],
)
def test_no_answer_is_one_error_line(output: str) -> None:
    error = assert_one_line_error(output)
    assert "\x1b" not in str(error) and "\n" not in str(error)


def test_garbage_lines_before_the_marker_and_the_last_marker_line_wins() -> None:
    first = json.dumps({**FULL, "hostname": "first"})
    output = "Welcome!\n\x1b[1mnoise\x1b[0m\n" + facts.MARK + first + "\nmore noise\n" + facts.MARK + json.dumps({**FULL, "hostname": "last"}) + "\n"
    assert facts.parse(output, "w").hostname == "last"


@pytest.mark.parametrize("size", [10_000, 25_000])
def test_huge_strings_in_every_text_field_are_cut(size: int) -> None:
    big = "A" * size
    raw = copy.deepcopy(FULL)
    raw["hostname"] = raw["python"]["executable"] = raw["tensorflow_package"] = big
    raw["distributions"][0].update(version="2.18.0" + big, location=big, requires=[big] * 30)
    raw["pci"][0]["driver"] = big
    raw["holders"]["held"][0]["command"] = big
    raw["env"] = {"TF_USE_LEGACY_KERAS": big}
    raw["import"]["message"] = big
    read = facts.parse(facts.MARK + json.dumps(raw), "w")
    assert len(read.hostname) <= 255 and len(read.executable) <= 1000 and len(read.dists[0].version) <= 100
    assert len(read.dists[0].requires) <= 20 and all(len(r) <= 400 for r in read.dists[0].requires)
    assert max(len(c.found) + len(c.fix) for c in run_checks(read, Context())) < 2000
    assert_printable(read)


@pytest.mark.parametrize(
    ("part", "value"),
    [
        ("ports", {"asked": 2, "bound": float("inf"), "range": [1, 60000]}),
        ("ports", {"asked": float("inf"), "bound": 1}),
        ("ports", {"asked": float("nan"), "bound": float("nan")}),
        ("import", {"status": "crash", "signal": 10**400, "seconds": -1e308}),
        ("import", {"status": "ok", "seconds": float("inf"), "devices": {"GPU": "2"}}),
        ("metadata", {"reachable": True, "local_time": float("-inf"), "date": "Fri, 27 Nov 2026 21:37:44 GMT"}),
        ("metadata", {"reachable": True, "local_time": 1e308, "date": "Mon, 01 Jan 0001 00:00:00 -2359"}),
        ("python", {"version": [3, True, 1.5]}),
        (
            "distributions",
            [
                {"name": "tensorflow\x1b[2J", "version": "2.18.0"},
                {"name": "tensorflow", "version": "2.21.0\x1b[2J"},
                {"name": "keras", "version": "3.0\n1"},
                "x",
                None,
            ],
        ),
        ("pci", [{"vendor": "0x1ae0", "device": "0x0063", "address": "\x1b]0;pwned\x07", "driver": "\x1b[31m"}, {"vendor": "zz", "device": 5}]),
        ("holders", {"held": [{"pid": 1, "devices": ["/dev/vfio/0\x1b[2J"], "command": "a\nb"}], "unreadable": "many"}),
        ("dev", {"accel": ["\x1b[2J", 5], "vfio": "nope"}),
    ],
)
def test_wrong_numbers_and_escapes_read_as_absent(part: str, value: Any) -> None:
    """Found by this file: Infinity, NaN and a 400-digit integer (all valid to Python's JSON reader) crashed
    the ports, import and gpus checks; a string GPU count raised TypeError; a version or a device path with an
    escape sequence reached the terminal bare."""
    output = facts.MARK + json.dumps({**FULL, part: value})
    read = facts.parse(output, "w")
    assert_printable(read)


def test_control_characters_never_survive_into_names_versions_or_device_paths() -> None:
    raw = copy.deepcopy(FULL)
    raw["distributions"].append({"name": "tensorflow", "version": "2.18.0\x1b[2J", "location": "/x"})
    raw["dev"]["vfio"].append("/dev/vfio/1\n")
    read = facts.from_json(raw)
    assert [d.name for d in read.dists] == ["tensorflow-tpu", "libtpu", "keras", "jax"]
    assert read.vfio == ("/dev/vfio/0",)


# --- versions -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "name", "specifier"),
    [
        ("libtpu ==2.16.0rc0", "libtpu", "==2.16.0rc0"),
        ("libtpu~=0.0.14", "libtpu", "~=0.0.14"),
        ("tensorboard <2.17,>=2.16", "tensorboard", "<2.17,>=2.16"),
        ("tensorboard (<2.16,>=2.15)", "tensorboard", "<2.16,>=2.15"),
        ("keras>=3.12.0", "keras", ">=3.12.0"),
        ("tensorflow<2.22,>=2.21", "tensorflow", "<2.22,>=2.21"),
        ("tf-keras==2.21.*", "tf-keras", "==2.21.*"),
        ("tf_keras==2.21.*", "tf-keras", "==2.21.*"),
        ("libtpu[extra]==2.18.0 ; python_version >= '3.9'", "libtpu", "==2.18.0"),
        ("Keras", "keras", ""),
    ],
)
def test_split_requirement(requirement: str, name: str, specifier: str) -> None:
    assert versions.split_requirement(requirement) == (name, specifier)


@pytest.mark.parametrize(
    ("version", "specifier", "holds"),
    [
        ("2.16.0rc0", "==2.16.0rc0", True),
        ("2.16.0", "==2.16.0rc0", True),  # pre-releases compare by their release part
        ("2.17.0", "==2.16.0rc0", False),
        ("0.0.14", "~=0.0.14", True),
        ("0.0.17", "~=0.0.14", True),
        ("0.1.0", "~=0.0.14", False),
        ("0.0.10", "~=0.0.14", False),
        ("2.16.2", "<2.17,>=2.16", True),
        ("2.17.0", "<2.17,>=2.16", False),
        ("2.15.9", "<2.17,>=2.16", False),
        ("3.12.0", ">=3.12.0", True),
        ("3.11.3", ">=3.12.0", False),
        ("2.21.0", "<2.22,>=2.21", True),
        ("2.21.3", "==2.21.*", True),
        ("2.20.1", "==2.21.*", False),
        ("2.20.1", "!=2.21.*", True),
        ("2.21", "==2.21.0", True),
        ("2.18.0", "!=2.18.0", False),
        ("2.18.0", ">2.18", False),
        ("2.18.1", "<=2.18", False),
        ("nightly", "==2.18.0", True),  # no version to compare: no finding
        ("2.18.0", "==nope", True),  # a clause that cannot be read: no finding
    ],
)
def test_satisfies(version: str, specifier: str, holds: bool) -> None:
    assert versions.satisfies(version, specifier) is holds


@pytest.mark.parametrize(
    ("version", "release", "minor"),
    [("2.18.0rc1", (2, 18, 0), (2, 18)), ("v3", (3,), (3, 0)), ("2.19.0a20241201", (2, 19, 0), (2, 19)), ("", None, None), ("nightly", None, None)],
)
def test_release_and_minor(version: str, release: tuple[int, ...] | None, minor: tuple[int, int] | None) -> None:
    assert versions.release(version) == release and versions.minor(version) == minor


@pytest.mark.fuzz
@FUZZ
@given(
    version=TEXT | st.from_regex(r"[0-9.]{0,12}[a-z*]{0,3}[0-9.*]{0,6}", fullmatch=True),
    specifier=TEXT | st.from_regex(r"(\s?(==|~=|!=|<=|>=|<|>|===)\s?[0-9.*a-z]{0,10},?){0,3}", fullmatch=True),
)
def test_versions_never_raise(version: str, specifier: str) -> None:
    assert isinstance(versions.satisfies(version, specifier), bool)
    numbers = versions.release(version)
    assert numbers is None or all(0 <= n < 10**9 for n in numbers)
    assert versions.minor(version) is None or len(versions.minor(version) or ()) == 2
    name, spec = versions.split_requirement(specifier + version)
    assert isinstance(name, str) and isinstance(spec, str)


def test_huge_version_numbers_are_read_without_the_int_digit_limit() -> None:
    assert versions.release("9" * 10_000) == (999_999_999,)
    assert versions.satisfies("1" * 10_000, "==" + "2" * 10_000) is True  # a clause past 60 characters is not read

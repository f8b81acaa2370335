"""Every parser of user data under hypothesis: a result or one expected error, never a traceback or a hang.

By default each parser gets a few dozen examples, so `make test` stays fast. The long run
(issue 12: at least 10,000 examples per parser) is the same tests with more examples:

    TPUCTL_FUZZ_EXAMPLES=10000 TPUCTL_FUZZ_REPORT=fuzz.json pytest -m fuzz tests/unit/test_fuzz_parsers.py

Each example runs under a time limit (a hang fails the test); TPUCTL_FUZZ_REPORT collects
examples per parser and the slowest example, the figures docs/hardening.md records.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import string
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuctl.cli import main
from tpuctl.cloud.nodes import nodespec
from tpuctl.cluster import hosts, worker_contract
from tpuctl.cluster import tf_config as cluster
from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import parse_env
from tpuctl.launch.launch_options import CONFIG_KEYS
from tpuctl.settings import cloud as cloud_settings
from tpuctl.settings import files as config
from tpuctl.ssh.command import check_workers
from tpuctl.ssh.connection import Connection

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "40"))
LIMIT_S = float(os.environ.get("TPUCTL_FUZZ_LIMIT_S", "30"))  # a hang is forever; a busy 2-core machine is slow
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
COUNTS: dict[str, dict[str, float]] = {}


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"one example ran past {LIMIT_S:g} s")


@contextlib.contextmanager
def example(parser: str) -> Iterator[None]:
    """One example of `parser`: timed, counted, stopped by SIGALRM if it hangs."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    start = time.perf_counter()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        entry = COUNTS.setdefault(parser, {"examples": 0, "slowest_s": 0.0, "seconds": 0.0})
        took = time.perf_counter() - start
        entry["examples"] += 1
        entry["seconds"] += took
        entry["slowest_s"] = max(entry["slowest_s"], took)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    target = os.environ.get("TPUCTL_FUZZ_REPORT")
    if target:
        old = json.loads(Path(target).read_text()) if Path(target).exists() else {}
        Path(target).write_text(json.dumps({**old, **COUNTS}, indent=2, sort_keys=True))


def expect(call: Callable[[], Any], *errors: type[BaseException]) -> Any:
    """The call's result, or None when it raised one of the errors the parser documents."""
    try:
        return call()
    except (TpuctlError, *errors) as err:
        if isinstance(err, TpuctlError):
            assert err.exit_code in (1, 2)
            assert "\n" not in err.message
        return None


# Hostile pieces every strategy mixes in.
NASTY = [
    "", " ", "\x00", "nan", "inf", "-inf", "1e300", "-1", "0", "²", "\u0661\u0662", "\u0663", "1_000", "0x10", "9" * 5000, "\x1b[2J",
    "\n", "\ud800", "\udcff", "ﬁ", "[", "]", "{", "}", ":", ",", "=", "#", "\\", '"', "'", "slots=", "localhost", "::1", "[::1]",
]
nasty = st.sampled_from(NASTY)
pieces = st.one_of(nasty, st.text(max_size=12), st.integers().map(str), st.floats().map(repr))
hostile_text = st.lists(pieces, max_size=8).map("".join)
deep = st.tuples(st.sampled_from(["[", "{\"a\": ", "{a = ", "[[", "a."]), st.integers(0, 30_000)).map(lambda t: t[0] * t[1])
json_keys = st.one_of(hostile_text, st.sampled_from(["cluster", "task", "type", "index", "worker", "chief", "ps", "name", "labels"]))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(json_keys, inner, max_size=4)),
    max_leaves=20,
)


# --- TF_CONFIG --------------------------------------------------------------------------


def _tf_configs() -> st.SearchStrategy[str]:
    addresses = st.lists(st.one_of(hostile_text, st.sampled_from(["a:1", "10.0.0.1:2222", "[::1]:80", "h:0", "h:65536"])), max_size=4)
    roles = st.sampled_from(["chief", "worker", "ps", "evaluator", "x"])
    task = st.fixed_dictionaries({"type": st.one_of(nasty, roles), "index": st.one_of(st.integers(), st.floats(), nasty)})
    shaped = st.fixed_dictionaries(
        {"cluster": st.dictionaries(roles, st.one_of(addresses, json_values), max_size=4), "task": st.one_of(json_values, task)}
    ).map(json.dumps)
    return st.one_of(shaped, json_values.map(json.dumps), hostile_text, deep)


@FUZZ
@given(_tf_configs())
def test_tf_config(text: str) -> None:
    with example("TF_CONFIG (cluster.parse_tf_config)"):
        expect(lambda: cluster.parse_tf_config(text))


# --- hosts ------------------------------------------------------------------------------

host_items = st.one_of(hostile_text, st.sampled_from(["h", "h:22", "h:4", "[::1]:22", "1.2.3.4", "h:999999999", "h:²"]))


@FUZZ
@given(st.lists(host_items, max_size=6).map(",".join))
def test_hosts_option(value: str) -> None:
    with example("--hosts (hosts.parse_hosts, parse_slot_hosts)"):
        expect(lambda: hosts.parse_hosts(value))
        expect(lambda: hosts.parse_slot_hosts(value))


@FUZZ
@given(st.lists(st.one_of(host_items, st.tuples(host_items, st.one_of(nasty, st.integers().map(str))).map(" slots=".join)), max_size=8).map("\n".join))
def test_hostfile(text: str) -> None:
    with example("hostfile (hosts.parse_hostfile)"):
        expect(lambda: hosts.parse_hostfile(text))
        expect(lambda: hosts.parse_hostfile(text, ports=False))


# --- config files -----------------------------------------------------------------------

_FILES = Path(tempfile.mkdtemp(prefix="tpuctl-fuzz-"))
keys = st.one_of(st.sampled_from([*CONFIG_KEYS, *(s.key for s in cloud_settings.SETTINGS)]), hostile_text)
toml_values = st.one_of(st.integers().map(str), st.floats().map(repr), st.sampled_from(["true", "false"]), hostile_text.map(json.dumps), deep, hostile_text)
headers = st.sampled_from(["[launch]", "[cloud]", "[x]", "", "[[launch]]"])
toml_files = st.one_of(
    st.lists(st.tuples(headers, keys, toml_values).map(lambda t: f"{t[0]}\n{t[1]} = {t[2]}"), max_size=5).map("\n".join),
    hostile_text,
    deep,
)


@FUZZ
@given(toml_files)
def test_config_files(text: str) -> None:
    path = _FILES / "config.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    saved = os.environ.get("TPUCTL_CONFIG")
    os.environ["TPUCTL_CONFIG"] = str(path)
    try:
        with example("config files (config.read_file, section_defaults, settings.resolve)"):
            expect(lambda: config.read_file(path))
            expect(lambda: config.section_defaults("launch", CONFIG_KEYS))
            expect(lambda: cloud_settings.resolve())
    finally:
        os.environ.pop("TPUCTL_CONFIG") if saved is None else os.environ.__setitem__("TPUCTL_CONFIG", saved)


# --- saved node specs, labels, --env, --ssh-option, --worker, the worker contract ------------


@FUZZ
@given(
    st.one_of(
        json_values.map(json.dumps),
        hostile_text,
        deep,
        st.fixed_dictionaries(
            {"name": json_values, "project": json_values, "zone": json_values, "runtime_version": json_values},
            optional={"labels": json_values, "spot": json_values},
        ).map(json.dumps),
    )
)
def test_saved_node_spec(text: str) -> None:
    with example("saved node specs (NodeSpec.from_json)"):
        expect(lambda: nodespec.NodeSpec.from_json(text, "spec.json"))


@FUZZ
@given(st.lists(st.one_of(hostile_text, st.sampled_from(["a=b", "team=ml,env=", "k=v,k=w"])), max_size=4).map(tuple))
def test_labels(values: tuple[str, ...]) -> None:
    with example("--labels (nodespec.parse_labels)"):
        expect(lambda: nodespec.parse_labels(values))


@FUZZ
@given(st.lists(st.one_of(hostile_text, st.tuples(hostile_text, hostile_text).map("=".join)), max_size=4).map(tuple))
def test_env_values(values: tuple[str, ...]) -> None:
    with example("--env NAME=VALUE (options.parse_env)"):
        expect(lambda: parse_env(values))


@FUZZ
@given(st.lists(st.one_of(hostile_text, st.tuples(st.sampled_from(["ProxyJump", "Port", ""]), hostile_text).map("=".join)), max_size=4).map(tuple))
def test_ssh_options(values: tuple[str, ...]) -> None:
    with example("--ssh-option (Connection.ssh_options)"):
        expect(lambda: Connection(ssh_option=values).ssh_options())


@FUZZ
@given(st.one_of(st.lists(st.one_of(nasty, st.integers().map(str), st.text(string.digits, max_size=6)), max_size=4).map(",".join), hostile_text))
def test_ssh_worker(value: str) -> None:
    with example("ssh --worker (command.check_workers)"):
        expect(lambda: check_workers(value))


@FUZZ
@given(hostile_text, hostile_text)
def test_worker_contract_numbers(devices: str, timeout: str) -> None:
    with example("worker contract numbers (simulate_devices, tpu_timeout)"):
        count = expect(lambda: worker_contract.simulate_devices({worker_contract.SIMULATE_DEVICES: devices}))
        assert count is None or 0 <= count < 10**6
        seconds = expect(lambda: worker_contract.tpu_timeout({worker_contract.TPU_TIMEOUT: timeout}))
        assert seconds is None or math.isfinite(seconds)


@FUZZ
@given(st.one_of(hostile_text, st.integers().map(str)))
def test_whole_numbers(text: str) -> None:
    with example("whole numbers (inputs.whole_number)"):
        value = expect(lambda: inputs.whole_number(text, "--n", maximum=10**6))
        assert value is None or 0 <= value <= 10**6


# --- numeric options, through the CLI -------------------------------------------------------

NUMERIC = [
    ["tf-config", "--workers"], ["tf-config", "--workers", "2", "--ps"], ["tf-config", "--workers", "2", "--base-port"],
    ["launch", "train.py", "--dry-run", "--workers"], ["launch", "train.py", "--dry-run", "--max-restarts"],
    ["launch", "train.py", "--dry-run", "--start-timeout"], ["launch", "train.py", "--dry-run", "--tpu-timeout"],
    ["launch", "train.py", "--dry-run", "--simulate-devices"], ["launch", "train.py", "--dry-run", "--ps"],
    ["launch", "train.py", "--dry-run", "--hosts", "a,b", "--fanout"],
]
numbers = st.one_of(nasty, st.integers().map(str), st.floats().map(repr), st.text(string.digits + ".-+e_", max_size=12), hostile_text)


@FUZZ
@given(st.sampled_from(NUMERIC), numbers)
def test_numeric_options(prefix: list[str], value: str) -> None:
    (_FILES / "train.py").write_text("pass\n")
    here = os.getcwd()
    os.chdir(_FILES)
    try:
        with example("numeric CLI options (tf-config, launch)"), CliRunner().isolation() as (_, err, _):
            try:
                main([*prefix, value])
                code = 0
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
    finally:
        os.chdir(here)
    assert code in (0, 2), (prefix, value, err.getvalue())
    if code == 0:  # accepted: then it was a finite number
        assert math.isfinite(float(value.strip())), (prefix, value)
    else:
        assert len(err.getvalue().decode(errors="replace").strip().splitlines()) == 1


@pytest.mark.parametrize("raw", ["²", "\u0661\u0662", "9" * 5000])
def test_simulate_devices_that_is_no_ascii_number_is_one_error(raw: str) -> None:
    with pytest.raises(TpuctlError, match="not a whole number"):
        worker_contract.simulate_devices({worker_contract.SIMULATE_DEVICES: raw})


@pytest.mark.parametrize("raw", ["nan", "inf", "-1", "0", "1e300"])
def test_tpu_timeout_that_is_no_finite_positive_number_is_one_error(raw: str) -> None:
    with pytest.raises(TpuctlError, match="not a number of seconds"):
        worker_contract.tpu_timeout({worker_contract.TPU_TIMEOUT: raw})

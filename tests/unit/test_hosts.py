"""Host lists and hostfiles: strict parsing, errors that name the entry or line."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuctl.cluster.hosts import (
    HostEntry,
    expand_addresses,
    format_address,
    parse_host,
    parse_hostfile,
    parse_hosts,
    parse_slot_hosts,
    read_hostfile,
)
from tpuctl.inputs.errors import TpuctlError


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("localhost", HostEntry("localhost")),
        ("localhost:2222", HostEntry("localhost", 2222)),
        ("worker-1.example.com:1", HostEntry("worker-1.example.com", 1)),
        ("tpu_vm_0:65535", HostEntry("tpu_vm_0", 65535)),
        ("10.0.0.7:8470", HostEntry("10.0.0.7", 8470)),
        ("[::1]", HostEntry("::1")),
        ("[::1]:2222", HostEntry("::1", 2222)),
        ("[fe80::1:2]:80", HostEntry("fe80::1:2", 80)),
    ],
)
def test_parse_host_accepts(text: str, entry: HostEntry) -> None:
    assert parse_host(text) == entry


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty host"),
        (":2222", "empty host name"),
        ("host:", "empty port"),
        ("host:0", "port 0 out of range 1-65535"),
        ("host:65536", "port 65536 out of range 1-65535"),
        ("host:123456", "port '123456' is not a number"),
        ("host:http", "port 'http' is not a number"),
        ("host:-1", "port '-1' is not a number"),
        ("host:²", "port '²' is not a number"),
        ("::1:2222", "IPv6 addresses go in brackets"),
        ("[::1", "missing ']'"),
        ("[nope]:1", "'nope' is not an IPv6 address"),
        ("[::1]2222", "expected ':port' after ']'"),
        ("grpc://host:1", "IPv6 addresses go in brackets"),
        ("bad host", "invalid host name 'bad host'"),
        ("-lead", "invalid host name '-lead'"),
        ("a..b", "invalid host name 'a..b'"),
        ("1.2.3.999", "invalid IPv4 address '1.2.3.999'"),
        ("ex\u00e4mple", "invalid host name"),
    ],
)
def test_parse_host_rejects(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(problem)):
        parse_host(text)


def test_parse_hosts_keeps_order_and_strips_spaces() -> None:
    assert parse_hosts(" a:1 , b ,[::1]:3") == [HostEntry("a", 1), HostEntry("b"), HostEntry("::1", 3)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--hosts: no hosts given"),
        ("  ", "--hosts: no hosts given"),
        ("a,,b", "--hosts entry 2 '': empty host"),
        ("a,b,", "--hosts entry 3 '': empty host"),
        ("a:1,b:99999", "--hosts entry 2 'b:99999': port 99999 out of range 1-65535"),
        ("a:1,b:x", "--hosts entry 2 'b:x': port 'x' is not a number 1-65535"),
        ("a,b,A", "--hosts entry 3: duplicate host A (also --hosts entry 1)"),
        ("a:1,b,a:1", "--hosts entry 3: duplicate host a:1 (also --hosts entry 1)"),
        ("[::1]:5,[0::1]:5", "--hosts entry 2: duplicate host [0::1]:5 (also --hosts entry 1)"),
    ],
)
def test_parse_hosts_errors_name_the_entry(value: str, message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_hosts(value)
    assert caught.value.message == message


def test_same_host_on_other_ports_is_not_a_duplicate() -> None:
    assert len(parse_hosts("a:1,a:2,a")) == 3


HOSTFILE = """\
# DeepSpeed/horovod style
worker-0 slots=2
worker-1           # one slot by default

worker-2:3000 slots=3   # ports 3000-3002
[::1]:4000
"""


def test_parse_hostfile() -> None:
    assert parse_hostfile(HOSTFILE) == [
        HostEntry("worker-0", None, 2),
        HostEntry("worker-1", None, 1),
        HostEntry("worker-2", 3000, 3),
        HostEntry("::1", 4000, 1),
    ]


def test_parse_hostfile_tolerates_crlf_and_tabs() -> None:
    assert parse_hostfile("a\tslots=2\r\nb\r\n") == [HostEntry("a", None, 2), HostEntry("b")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "hostfile: no hosts"),
        ("# only a comment\n\n", "hostfile: no hosts"),
        ("a\nb slots=0\n", "hostfile line 2: slots='0' is not a positive integer"),
        ("a slots=-1", "hostfile line 1: slots='-1' is not a positive integer"),
        ("a slots=1.5", "hostfile line 1: slots='1.5' is not a positive integer"),
        ("a slots=", "hostfile line 1: slots='' is not a positive integer"),
        ("a slots=1 slots=2", "hostfile line 1: slots given twice"),
        ("a max_slots=4", "hostfile line 1: unexpected 'max_slots=4' (expected slots=N)"),
        ("a slots 4", "hostfile line 1: unexpected 'slots' (expected slots=N)"),
        ("\n\na:70000", "hostfile line 3: port 70000 out of range 1-65535"),
        ("::1 slots=2", "hostfile line 1: IPv6 addresses go in brackets, e.g. [::1]:2222"),
        ("slots=2", "hostfile line 1: invalid host name 'slots=2'"),
        ("a slots=2\n# b\nb\nA slots=1", "hostfile line 4: duplicate host A (also hostfile line 1)"),
    ],
)
def test_parse_hostfile_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_hostfile(text)
    assert caught.value.message == message


def test_read_hostfile_names_the_file_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("a slots=2\nb slots=x\n")
    with pytest.raises(TpuctlError, match=f"^{path} line 2: slots='x'"):
        read_hostfile(path)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p / "missing", "cannot read hostfile {path}: No such file or directory"),
        (lambda p: p, "cannot read hostfile {path}: not a regular file"),
        (lambda p: _write_bytes(p / "latin1", b"h\xf6st\n"), "hostfile {path} is not UTF-8 text"),
        # /dev/zero and a FIFO (refused as not regular files) are left to test_hostile_cli, whose
        # memory cap and alarm turn a regression into a finding rather than an OOM kill or a hang.
        (lambda p: _write_bytes(p / "big", b"h slots=1\n" * 200_000), "hostfile {path} is larger than"),
    ],
)
def test_unreadable_hostfile_is_bad_input(tmp_path: Path, make: Callable[[Path], Path], reason: str) -> None:
    path = make(tmp_path)
    with pytest.raises(TpuctlError) as caught:
        read_hostfile(path)
    assert caught.value.message.startswith(reason.format(path=path))
    assert caught.value.exit_code == 2


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_expand_addresses_fills_slots_on_consecutive_ports() -> None:
    entries = parse_hostfile(HOSTFILE)
    assert expand_addresses(entries, 2222) == [
        "worker-0:2222",
        "worker-0:2223",
        "worker-1:2222",
        "worker-2:3000",
        "worker-2:3001",
        "worker-2:3002",
        "[::1]:4000",
    ]


def test_expand_addresses_refuses_ports_past_65535() -> None:
    with pytest.raises(TpuctlError, match=r"^h: 3 task\(s\) from port 65534 need ports up to 65536, past 65535"):
        expand_addresses([HostEntry("h", None, 3)], 65534)
    assert expand_addresses([HostEntry("h", 65534, 2)], 1) == ["h:65534", "h:65535"]


def test_format_address_brackets_ipv6() -> None:
    assert format_address("::1", 1) == "[::1]:1"
    assert format_address("10.0.0.1", 1) == "10.0.0.1:1"


# -- properties ---------------------------------------------------------------

_hostnames = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z][a-z0-9-]{0,5}[a-z0-9])?", fullmatch=True)
_hosts = st.one_of(_hostnames, st.ip_addresses().map(str))
_entries = st.builds(HostEntry, _hosts, st.none() | st.integers(1, 65535), st.integers(1, 64))


@given(st.text())
def test_parse_hosts_raises_only_tpuctl_errors(text: str) -> None:
    with contextlib.suppress(TpuctlError):
        parse_hosts(text)


@given(st.text())
def test_parse_hostfile_raises_only_tpuctl_errors(text: str) -> None:
    with contextlib.suppress(TpuctlError):
        parse_hostfile(text)


@given(
    st.lists(st.sampled_from(["a", "b:1", "[::1]", " slots=", "2", "0", "#", "\n", " ", ":", "x=1", "\r"])).map("".join)
)
def test_parse_hostfile_near_misses_raise_only_tpuctl_errors(text: str) -> None:
    try:
        parse_hostfile(text)
    except TpuctlError as err:
        assert "\n" not in err.message


@settings(max_examples=40)
@given(st.lists(_entries, min_size=1, max_size=8, unique_by=lambda e: e.key()))
def test_hostfile_round_trip(entries: list[HostEntry]) -> None:
    lines = [f"{_render(e)} slots={e.slots}" for e in entries]
    assert parse_hostfile("\n".join(lines)) == entries


@settings(max_examples=40)
@given(st.lists(_entries.map(lambda e: HostEntry(e.host, e.port)), min_size=1, max_size=8, unique_by=lambda e: e.key()))
def test_hosts_round_trip(entries: list[HostEntry]) -> None:
    assert parse_hosts(",".join(_render(e) for e in entries)) == entries


def _render(entry: HostEntry) -> str:
    if entry.port is not None:
        return format_address(entry.host, entry.port)
    return f"[{entry.host}]" if ":" in entry.host else entry.host


# -- launch --hosts: HOST[:SLOTS] -----------------------------------------------


@pytest.mark.parametrize(
    ("value", "entries"),
    [
        ("a", [HostEntry("a")]),
        ("a:4, b ,[::1]:2", [HostEntry("a", None, 4), HostEntry("b"), HostEntry("::1", None, 2)]),
        ("10.0.0.7:8,10.0.0.8", [HostEntry("10.0.0.7", None, 8), HostEntry("10.0.0.8")]),
    ],
)
def test_parse_slot_hosts_reads_slots_not_ports(value: str, entries: list[HostEntry]) -> None:
    assert parse_slot_hosts(value) == entries


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--hosts: no hosts given"),
        ("a,,b", "--hosts entry 2 '': empty host"),
        ("a:0", "--hosts entry 1 'a:0': slots '0' is not a positive integer"),
        ("a:x", "--hosts entry 1 'a:x': slots 'x' is not a positive integer"),
        ("a:", "--hosts entry 1 'a:': slots '' is not a positive integer"),
        ("a:2222222222", "--hosts entry 1 'a:2222222222': slots '2222222222' is not a positive integer"),
        ("::1:2", "--hosts entry 1 '::1:2': IPv6 addresses go in brackets, e.g. [::1]:2"),
        ("[::1]2", "--hosts entry 1 '[::1]2': expected ':slots' after ']'"),
        ("a:2,b,A:3", "--hosts entry 3: duplicate host A (also --hosts entry 1)"),
    ],
)
def test_parse_slot_hosts_errors_name_the_entry(value: str, message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_slot_hosts(value)
    assert caught.value.message == message


def test_ssh_hostfile_refuses_ports_naming_the_line() -> None:
    with pytest.raises(TpuctlError) as caught:
        parse_hostfile("a slots=2\nb:2222\n", ports=False)
    assert caught.value.message == "hostfile line 2: 'b:2222' has a port, but ports are chosen on each host at launch"
    assert parse_hostfile("a slots=2\nb\n", ports=False) == [HostEntry("a", None, 2), HostEntry("b")]


@given(st.text())
def test_parse_slot_hosts_raises_only_one_line_tpuctl_errors(text: str) -> None:
    try:
        parse_slot_hosts(text)
    except TpuctlError as err:
        assert "\n" not in err.message


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(_entries.map(lambda e: HostEntry(e.host, None, e.slots)), st.booleans()),
        min_size=1,
        max_size=8,
        unique_by=lambda pair: pair[0].key(),
    )
)
def test_slot_hosts_round_trip(pairs: list[tuple[HostEntry, bool]]) -> None:
    # `host` alone is one slot; `host:1` says the same thing explicitly
    text = ",".join(_render(e) + ("" if e.slots == 1 and bare else f":{e.slots}") for e, bare in pairs)
    entries = [e for e, _ in pairs]
    assert parse_slot_hosts(text) == entries
    # the same list as a hostfile means the same hosts and slots
    assert parse_hostfile("\n".join(f"{_render(e)} slots={e.slots}" for e in entries), ports=False) == entries

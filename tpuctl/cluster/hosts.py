"""Host lists: `--hosts h1:p1,h2` values and DeepSpeed/horovod-style hostfiles.

A hostfile has one `host[:port] [slots=N]` entry per line; `#` starts a comment.
Two readings of a comma-separated list exist: `tf-config --hosts h1:2222` names
task addresses (the number is a PORT), while `launch --hosts h1:4` names ssh
hosts (the number is SLOTS, processes on that host; ports are chosen there).
Parsing is strict because a silently skipped or merged line means a worker that
never starts, and TensorFlow then waits forever for it (see FIELD-NOTES.md).
Every problem is reported with the entry or line it came from.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.parse import read_small_text

MAX_PORT = 65535
# The most tasks (processes) one cluster may have, and so the most slots a host list may
# offer. The largest single TPU slice TensorFlow can drive is a v5p 16x16x24: 1536 hosts,
# one task each (TensorFlow has no multislice); MultiWorkerMirrored jobs run in the tens to
# hundreds of workers. 4096 leaves headroom above both, while every worker's TF_CONFIG
# (which lists every task) stays under Linux's 128 KiB limit for one environment variable
# (MAX_ARG_STRLEN) with loopback addresses. Beyond it lies a typo (`host:999999999`) that
# would otherwise expand into billions of addresses before anything is checked.
MAX_TASKS = 4096

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
_PORT = re.compile(r"[0-9]{1,5}")
_SLOTS = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class HostEntry:
    """One host of a host list: `port` None means "use the base port"; `slots` tasks run there."""

    host: str
    port: int | None = None
    slots: int = 1

    def key(self) -> tuple[str, int | None]:
        """Identity for duplicate detection: `LOCALHOST` is `localhost`, `[0::1]` is `[::1]`."""
        return _host_key(self.host), self.port

    def addresses(self, base_port: int) -> list[str]:
        """One `host:port` per slot, on consecutive ports from the entry's port (or base_port)."""
        first = base_port if self.port is None else self.port
        last = first + self.slots - 1
        if last > MAX_PORT:
            raise TpuctlError(
                f"{self.host}: {self.slots} task(s) from port {first} need ports up to {last}, past {MAX_PORT}",
                hint="use a lower port",
            )
        return [format_address(self.host, port) for port in range(first, last + 1)]


def format_address(host: str, port: int) -> str:
    """`host:port`, with IPv6 hosts in brackets as gRPC (and so TF_CONFIG) expects."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host_key(host: str) -> str:
    """Normalised host: IP addresses in canonical form, names lower-cased."""
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host.lower()


def parse_host(text: str) -> HostEntry:
    """Parse `host`, `host:port`, `[v6]` or `[v6]:port`.

    Raises ValueError naming the problem only; callers add where it came from.
    """
    host, suffix = _split_host(text, "port", "[::1]:2222")
    return HostEntry(host, None if suffix is None else _parse_port(suffix))


def parse_slot_host(text: str) -> HostEntry:
    """Parse `host`, `host:slots`, `[v6]` or `[v6]:slots` (an ssh host and how many processes it runs).

    Raises ValueError naming the problem only; callers add where it came from.
    """
    host, suffix = _split_host(text, "slots", "[::1]:2")
    return HostEntry(host, None, 1 if suffix is None else _parse_slots(suffix, "slots "))


def _split_host(text: str, what: str, example: str) -> tuple[str, str | None]:
    """A checked host name or IP, and the text after its ':' (None when there is no ':')."""
    if not text:
        raise ValueError("empty host")
    if text.startswith("["):
        return _split_bracketed(text, what)
    if text.count(":") > 1:
        raise ValueError(f"IPv6 addresses go in brackets, e.g. {example}")
    host, colon, suffix = text.partition(":")
    _check_hostname(host)
    return host, suffix if colon else None


def _split_bracketed(text: str, what: str) -> tuple[str, str | None]:
    end = text.find("]")
    if end < 0:
        raise ValueError("missing ']' after the IPv6 address")
    host, rest = text[1:end], text[end + 1 :]
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IPv6 address") from None
    if not rest:
        return host, None
    if not rest.startswith(":"):
        raise ValueError(f"expected ':{what}' after ']'")
    return host, rest[1:]


def _check_hostname(host: str) -> None:
    if not host:
        raise ValueError("empty host name")
    if not _HOSTNAME.fullmatch(host):
        raise ValueError(f"invalid host name {host!r}")
    if all(label.isdigit() for label in host.split(".")):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"invalid IPv4 address {host!r}") from None


def _parse_port(text: str) -> int:
    if not text:
        raise ValueError("empty port")
    if not _PORT.fullmatch(text):
        raise ValueError(f"port {text!r} is not a number 1-{MAX_PORT}")
    port = int(text)
    if not 1 <= port <= MAX_PORT:
        raise ValueError(f"port {port} out of range 1-{MAX_PORT}")
    return port


def _parse_slots(text: str, label: str = "slots=") -> int:
    if not _SLOTS.fullmatch(text) or int(text) < 1:
        raise ValueError(f"{label}{text!r} is not a positive integer")
    if int(text) > MAX_TASKS:
        raise ValueError(f"{label}{text} is more than the {MAX_TASKS} tasks a cluster may have")
    return int(text)


def _check_total(entries: Sequence[HostEntry], source: str) -> None:
    """All slots together: past MAX_TASKS no cluster can use them, and expanding them would be the hang."""
    total = sum(entry.slots for entry in entries)
    if total > MAX_TASKS:
        raise TpuctlError(f"{source}: {total} slots in all, more than the {MAX_TASKS} tasks a cluster may have")


def parse_hosts(value: str, *, source: str = "--hosts") -> list[HostEntry]:
    """Parse a comma-separated `host[:port]` list (one slot each), e.g. a `--hosts` value."""
    return _parse_list(value, source, parse_host, "e.g. host1:2222,host2:2222")


def parse_slot_hosts(value: str, *, source: str = "--hosts") -> list[HostEntry]:
    """Parse a comma-separated `host[:slots]` list, e.g. `launch --hosts h1,h2:4` (ssh hosts, not ports)."""
    return _parse_list(value, source, parse_slot_host, "e.g. host1,host2 or host1:4,host2:4 (host:SLOTS)")


def _parse_list(value: str, source: str, parse_entry: Callable[[str], HostEntry], example: str) -> list[HostEntry]:
    """A comma-separated list, each entry read by `parse_entry` (its ValueError names the entry), checked as a whole."""
    if not value.strip():
        raise TpuctlError(f"{source}: no hosts given", hint=example)
    entries = []
    for number, item in enumerate((part.strip() for part in value.split(",")), start=1):
        try:
            entries.append(parse_entry(item))
        except ValueError as err:
            raise TpuctlError(f"{source} entry {number} {item!r}: {err}") from None
    _reject_duplicates(entries, f"{source} entry", range(1, len(entries) + 1))
    _check_total(entries, source)
    return entries


def parse_hostfile(text: str, *, source: str = "hostfile", ports: bool = True) -> list[HostEntry]:
    """Parse hostfile text: `host[:port] [slots=N]` lines, `#` comments, blank lines.

    With `ports=False` (ssh hosts, whose task ports are chosen on each host) a
    `host:port` line is refused rather than silently ignored.
    """
    entries: list[HostEntry] = []
    numbers: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            entry = _parse_hostfile_line(fields)
        except ValueError as err:
            raise TpuctlError(f"{source} line {number}: {err}") from None
        if not ports and entry.port is not None:
            raise TpuctlError(
                f"{source} line {number}: {fields[0]!r} has a port, but ports are chosen on each host at launch",
                hint="give the ssh port in --ssh-config or --ssh-option Port=N",
            )
        entries.append(entry)
        numbers.append(number)
    if not entries:
        raise TpuctlError(f"{source}: no hosts", hint="one 'host slots=N' per line")
    _reject_duplicates(entries, f"{source} line", numbers)
    _check_total(entries, source)
    return entries


def _parse_hostfile_line(fields: list[str]) -> HostEntry:
    entry = parse_host(fields[0])
    slots: int | None = None
    for option in fields[1:]:
        name, equals, value = option.partition("=")
        if name != "slots" or not equals:
            raise ValueError(f"unexpected {option!r} (expected slots=N)")
        if slots is not None:
            raise ValueError("slots given twice")
        slots = _parse_slots(value)
    return HostEntry(entry.host, entry.port, 1 if slots is None else slots)


def _reject_duplicates(entries: Sequence[HostEntry], label: str, numbers: Iterable[int]) -> None:
    """The same host (and port) twice is a typo, never two machines."""
    seen: dict[tuple[str, int | None], int] = {}
    for entry, number in zip(entries, numbers, strict=True):
        first = seen.setdefault(entry.key(), number)
        if first != number:
            raise TpuctlError(f"{label} {number}: duplicate host {_describe(entry)} (also {label} {first})")


def _describe(entry: HostEntry) -> str:
    return entry.host if entry.port is None else format_address(entry.host, entry.port)


def read_hostfile(path: str | os.PathLike[str], *, ports: bool = True) -> list[HostEntry]:
    """Read and parse a hostfile; an unreadable file is bad input, not a crash.

    Read through read_small_text: /dev/zero would fill memory and a FIFO would block forever."""
    text = read_small_text(Path(path), "hostfile")
    if text is None:
        raise TpuctlError(f"cannot read hostfile {os.fspath(path)}: No such file or directory")
    return parse_hostfile(text, source=os.fspath(path), ports=ports)


def expand_addresses(entries: Iterable[HostEntry], base_port: int) -> list[str]:
    """All task addresses of a host list, in order: each entry's slots on consecutive ports."""
    return [address for entry in entries for address in entry.addresses(base_port)]

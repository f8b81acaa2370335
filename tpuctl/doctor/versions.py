"""Version numbers and the requirement specifiers distributions carry (`libtpu==2.18.0`, `tensorboard~=2.19.0`).

The CLI must not need `packaging` (not a dependency), and doctor compares only
release numbers of the few packages it knows, so a small reading of PEP 440's
operators is enough: pre-releases compare by their release part.
"""

from __future__ import annotations

import re

_RELEASE = re.compile(r"\s*v?(\d{1,9}(?:\.\d{1,9}){0,5})")
_CLAUSE = re.compile(r"\s*(===|==|!=|~=|>=|<=|>|<)\s*([0-9][0-9A-Za-z.*+!-]{0,60})\s*")


def release(version: str) -> tuple[int, ...] | None:
    """(2, 18, 0) for "2.18.0rc1"; None for what is no version at all."""
    found = _RELEASE.match(version)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def minor(version: str) -> tuple[int, int] | None:
    numbers = release(version)
    return (numbers[0], numbers[1] if len(numbers) > 1 else 0) if numbers else None


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    size = max(len(a), len(b))
    return a + (0,) * (size - len(a)), b + (0,) * (size - len(b))


def _holds(version: tuple[int, ...], operator: str, wanted: str) -> bool:
    star = wanted.endswith(".*")
    target = release(wanted.removesuffix(".*"))
    if target is None:
        return True  # a clause this cannot read does not make a finding
    if star:
        same = version[: len(target)] == target
        return same if operator == "==" else not same if operator == "!=" else True
    mine, theirs = _padded(version, target)
    if operator == "~=":
        prefix = target[:-1] if len(target) > 1 else target
        return mine >= theirs and version[: len(prefix)] == prefix
    return {
        "==": mine == theirs,
        "===": mine == theirs,
        "!=": mine != theirs,
        ">=": mine >= theirs,
        "<=": mine <= theirs,
        ">": mine > theirs,
        "<": mine < theirs,
    }[operator]


def split_requirement(requirement: str) -> tuple[str, str]:
    """("libtpu", "==2.18.0") for "libtpu ==2.18.0; python_version>'3'" (the marker is dropped)."""
    body = requirement.split(";", 1)[0].strip()
    found = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^)]*)\)?", body)
    if not found:
        return body, ""
    return found.group(1).lower().replace("_", "-"), found.group(2).strip()


def satisfies(version: str, specifier: str) -> bool:
    """Does `version` meet every clause of `specifier` (">=2.16,<2.17")? Unreadable input is no finding: True."""
    numbers = release(version)
    if numbers is None:
        return True
    for clause in filter(None, (part.strip() for part in specifier.split(","))):
        found = _CLAUSE.fullmatch(clause)
        if found and not _holds(numbers, found.group(1), found.group(2)):
            return False
    return True

"""tpuctl's modules that run on a host as source (`python -S -c SOURCE`), as they are sent.

The host needs nothing of tpuctl for them: cache.py (finding the host's copy of the runtime) ahead of
install.py (writing that copy), of the profile capture's starter (profile.py), or of the launch's agent
(tpuctl/backends/ssh/session.py's agent_source).
"""

from __future__ import annotations

from pathlib import Path


def shipped_lines(module: Path) -> list[str]:
    """A module as it is sent, on a host's command line (every worker's, for the agent), so kept short:
    no comment or blank lines, one space per indentation level (it holds no multi-line string)."""
    text = module.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [" " * ((len(line) - len(line.lstrip())) // 4) + line.lstrip() for line in lines]


def install_source() -> str:
    """The runtime installer, sent only to a host whose cache lacks this runtime: cache.py, then install.py."""
    return "\n".join(shipped_lines(Path(__file__).with_name("cache.py")) + shipped_lines(Path(__file__).with_name("install.py"))) + "\n"


def cache_source() -> str:
    """cache.py as it is sent, for a program that finds the host's copy of the runtime (the agent, ssh/profile.py)."""
    return "\n".join(shipped_lines(Path(__file__).with_name("cache.py"))) + "\n"

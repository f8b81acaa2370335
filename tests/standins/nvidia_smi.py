"""Stand-in `nvidia-smi` tools: one that answers tpuctl's query as the real one does (issue 34), and ones that print
without end, binary or garbage (issue 46): what a hostile or broken driver tool may do to the commands that read it."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tpuctl.devices.gpus import GROWTH

GPU_LINE = "0, NVIDIA H100 80GB HBM3, 81559"  # what the real one answers `devices`' query, once
FAKE_SMI = {
    "endless": f"import sys\nline = b'{GPU_LINE}\\n' * 4096\nwhile True:\n    sys.stdout.buffer.write(line)\n",
    "binary": "import os, sys\nsys.stdout.buffer.write(os.urandom(1 << 18))\n",
    "garbage": "print('NVIDIA H100 80GB HBM3')\nprint('NVIDIA H100 80GB HBM3')\n",  # a GPU's name, no query's answer
}


def fake_smi(folder: Path, kind: str) -> Path:
    """A folder holding an `nvidia-smi` that prints FAKE_SMI[kind], for PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!{sys.executable}\n{FAKE_SMI[kind]}")
    tool.chmod(0o755)
    return folder


def fake_nvidia_smi(folder: Path, gpus: int, *, exit_code: int = 0) -> Path:
    """An `nvidia-smi` in `folder` that lists `gpus` H200s as the real one answers tpuctl's query (or fails)."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    lines = "".join(f"echo '{index}, NVIDIA H200, 143771'\n" for index in range(gpus))
    failure = "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\n" if exit_code else ""
    tool.write_text(f"#!/bin/sh\n{lines}{failure}exit {exit_code}\n", encoding="utf-8")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def launch_env(tmp_path: Path, gpus: int) -> dict[str, str]:
    bin_dir = fake_nvidia_smi(tmp_path / "bin", gpus).parent
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", GROWTH)}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}

"""Stand-in `nvidia-smi` tools that print without end, binary or garbage (issue 46): what a hostile or broken
driver tool may do to the commands that read it."""

from __future__ import annotations

import sys
from pathlib import Path

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

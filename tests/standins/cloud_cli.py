"""The real CLI in a process of its own against the Google stand-in, as the cloud command tests run it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import run_tpuctl
from tests.standins.fixtures import standin_env
from tests.standins.google_apis import GoogleStandin

ZONE = "us-central2-b"  # tpuctl's default zone
OTHER_ZONE = "us-west4-a"  # not the default zone: every later look-up must find it from the saved spec


class Cli:
    """Runs tpuctl against the stand-in (TPUCTL_ZONE `zone`, else no zone in any config) and keeps every output, to
    scan for secrets at the end; a traceback fails the test whatever the exit status."""

    def __init__(self, g: GoogleStandin, tmp_path: Path, zone: str | None = None) -> None:
        env = standin_env(g, tmp_path)
        self.env = env if zone is None else {**env, "TPUCTL_ZONE": zone}
        self.cwd = tmp_path
        self.home = Path(env["HOME"])
        self.outputs: list[str] = []

    def __call__(self, *args: str, code: int = 0, **extra: str) -> subprocess.CompletedProcess[str]:
        result = run_tpuctl(*args, env={**self.env, **extra}, cwd=self.cwd, timeout=120)
        self.outputs += [result.stdout, result.stderr]
        assert result.returncode == code, f"tpuctl {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr
        return result

    def spec_file(self, name: str, zone: str = OTHER_ZONE) -> Path:
        return self.home / ".local" / "share" / "tpuctl" / "nodes" / "tpuctl-test" / zone / f"{name}.json"

    def memory(self) -> list[dict[str, object]]:
        path = self.home / ".local" / "state" / "tpuctl" / "stockouts.json"
        return json.loads(path.read_text()) if path.exists() else []


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line; progress lines (on stderr, when piped) may come before it, a traceback never."""
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    assert [line for line in lines if line.startswith("Error:")] == lines[-1:], result.stderr
    return lines[-1]

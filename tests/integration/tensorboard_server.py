"""TensorBoard's own server in a process of its own on a loopback port, with the tpuctl plugin among its plugins.

TensorBoard finds dynamic plugins through the `tensorboard_plugins` entry points of installed distributions
(tensorboard/default.py's get_dynamic_plugins). The test venv is an editable install whose metadata may predate
the entry point, so the server is started through `program.TensorBoard(plugins=default.get_plugins() + [Loader])`,
the same list `tensorboard` builds plus the loader the entry point names (test_tensorboard_plugin.py checks that
pyproject declares it). The process is a session of its own, ended with its group.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

_WRAPPER = (
    "import sys\n"
    "from tensorboard import default, program\n"
    "from tpuctl.tensorboard_plugin.plugin import Loader\n"
    "plugins = default.get_plugins()\n"
    "plugins += [] if Loader in plugins else [Loader]\n"
    "board = program.TensorBoard(plugins=plugins)\n"
    "board.configure(argv=[''] + sys.argv[1:])\n"
    "sys.exit(board.main())\n"
)
START_TIMEOUT_S = 180.0  # xprof's loader imports TensorFlow as TensorBoard starts: ~10 s alone, a minute on a busy 2-core machine


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str) -> tuple[int, bytes, str]:
        """GET `path` (relative to the server's root): status, body, content type."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as reply:
                body = reply.read()
                if reply.headers.get("Content-Encoding") == "gzip":  # xprof's routes gzip whatever the request accepts
                    body = gzip.decompress(body)
                return reply.status, body, reply.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "")

    def json(self, path: str) -> Any:
        status, body, kind = self.get(path)
        assert status == 200 and kind.startswith("application/json"), (status, kind, body[:300], self.log.read_text()[-2000:])
        return json.loads(body)


def _free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = int(probe.getsockname()[1])
    probe.close()
    return port


@contextmanager
def tensorboard(logdir: str, log: Path, env: dict[str, str] | None = None, flag: str = "--logdir") -> Iterator[Server]:
    """TensorBoard on `logdir`, given as `flag` (--logdir, or --logdir_spec with NAME:DIR pairs)."""
    port = _free_port()
    argv = [sys.executable, "-c", _WRAPPER, flag, logdir, "--host", "127.0.0.1", "--port", str(port), "--load_fast", "false"]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, f"TensorBoard ended with {process.returncode}: {log.read_text()[-3000:]}"
            try:
                if server.get("/data/plugins_listing")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"TensorBoard did not answer in {START_TIMEOUT_S} s: {log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)

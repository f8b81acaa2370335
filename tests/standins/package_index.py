"""A package index as pip reads one: PEP 503's "simple" repository API over HTTP, from a folder of real wheels.

Why: what resolves and installs a launch's --requirements on its hosts is real pip, and it must meet an index's
own contract, not a mock of pip. It follows PEP 503 (https://peps.python.org/pep-0503/):

* ``GET /simple/`` lists every project, one anchor each; ``GET /simple/<name>/`` lists the project's files, each an
  anchor whose text is the file name and whose URL ends in ``#sha256=<hex>``; a project is found under its
  normalised name (``re.sub(r"[-_.]+", "-", name).lower()``), and another spelling is a 301 to that one;
* ``data-requires-python`` carries a file's Requires-Python (PEP 503, as PEP 345's field), HTML-escaped;
* an unknown project is 404; a folder asked for without its trailing slash is a 301 to the slash form;
* a file is served at the URL its anchor gives.

With ``credentials=("user", "password")`` every request needs them as HTTP Basic auth (what pip sends for
``--index-url https://user:password@host/simple``), else 401 with a ``WWW-Authenticate`` challenge.

The wheels are made in the test session (tests/standins/tiny_wheels.py: real wheels, their metadata as pip reads it).
``publish()`` adds a file while the index serves (a new release mid-run), ``stop()`` takes it down (a host that
must install without it), ``asked`` counts each project's page requests (one resolution asks once).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import shutil
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.standins.tiny_wheels import make_wheel


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Source:
    """A tiny package: its name and version, what it requires, its Requires-Python, and the module it installs
    (which holds VERSION, what a script checks on a host)."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    requires_python: str | None = None
    script: str | None = None  # a console script `NAME = module:main`, to prove a moved venv's scripts still run

    @property
    def module(self) -> str:
        return normalise(self.name).replace("-", "_")

    def files(self) -> dict[str, str | bytes]:
        """What the wheel installs, by path: the module."""
        return {f"{self.module}/__init__.py": f"VERSION = {self.version!r}\n\ndef main():\n    print({self.name!r}, VERSION)\n"}

    def wheel(self, folder: Path) -> Path:
        scripts = {self.script: f"{self.module}:main"} if self.script else None
        return make_wheel(folder, self.name, self.version, self.files(), self.requires, requires_python=self.requires_python, scripts=scripts)


def build_wheels(sources: Iterable[Source], root: Path) -> list[Path]:
    """Every source's wheel, in `root`/wheels."""
    return sorted(source.wheel(root / "wheels") for source in sources)


# The tests' packages: two versions of one, a chain of dependencies, a pin that conflicts with a newer line, a
# console script (a venv moved into place must still run it), a package with a wheel for Windows alone, and a later
# release of the first, published while a launch runs.
PACKAGES = (
    Source("tpuctl-test-alpha", "1.0"),
    Source("tpuctl-test-alpha", "2.0"),
    Source("tpuctl-test-beta", "1.0", ("tpuctl-test-alpha>=1.0",), script="tpuctl-test-beta"),
    Source("tpuctl-test-gamma", "1.0", ("tpuctl-test-beta",)),
    Source("tpuctl-test-pinned", "1.0", ("tpuctl-test-alpha<2",)),
    Source("tpuctl-test-winonly", "1.0"),
)
LATER = Source("tpuctl-test-alpha", "3.0")


@dataclass(frozen=True)
class Wheels:
    """The tests' wheels, built once a session: what an index serves at first, and the release published later."""

    served: tuple[Path, ...]
    later: Path

    def folder(self, root: Path) -> Path:
        """A fresh folder for an index of its own (one a test may publish into), holding what is served at first."""
        root.mkdir(parents=True, exist_ok=True)
        for path in self.served:
            shutil.copyfile(path, root / path.name)
        return root


def wheel_set(root: Path) -> Wheels:
    built = build_wheels([*PACKAGES, LATER], root)
    later = next(path for path in built if path.name.startswith("tpuctl_test_alpha-3.0-"))
    served = [path for path in built if path != later and "winonly" not in path.name]
    windows = retagged(next(path for path in built if "winonly" in path.name), "win_amd64", root)
    return Wheels(tuple([*served, windows]), later)


def retagged(wheel: Path, platform: str, folder: Path) -> Path:
    """A copy of a wheel whose file name says another platform (`win_amd64`): pip reads a wheel's tags from its file
    name, so no Linux host finds a wheel of it for its platform, as with a package built only for Windows."""
    name, version, *_ = wheel.name[: -len(".whl")].split("-")
    copy = folder / f"{name}-{version}-py3-none-{platform}.whl"
    shutil.copyfile(wheel, copy)
    return copy


class PackageIndex:
    """The index: serves `folder`'s files (wheels, sdists) under /simple/. A context manager."""

    def __init__(self, folder: Path, credentials: tuple[str, str] | None = None) -> None:
        self.folder = folder
        self.credentials = credentials
        self.asked: Counter[str] = Counter()  # project page requests, by normalised name
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._then: tuple[Path, int] | None = None  # published once that many more files have been served
        self.port = 0

    @property
    def url(self) -> str:
        """The index's URL as pip takes it (--index-url), with the credentials where it needs them."""
        auth = f"{self.credentials[0]}:{self.credentials[1]}@" if self.credentials else ""
        return f"http://{auth}127.0.0.1:{self.port}/simple/"

    def publish(self, path: Path) -> None:
        """A new file on the index, served from the next request on."""
        shutil.copyfile(path, self.folder / path.name)

    def publish_after_downloads(self, path: Path, count: int) -> None:
        """`path` published as soon as the index has served `count` more files (a resolution's dry run downloads each
        wheel it chose): a new release that lands once a launch has resolved, before its hosts install (the fan-out a
        per-host `pip install -r` would meet it in)."""
        self._then = (path, count)

    def files(self, project: str) -> list[Path]:
        with self._lock:
            return sorted(p for p in self.folder.iterdir() if p.is_file() and normalise(_project_of(p.name)) == project)

    def projects(self) -> list[str]:
        return sorted({normalise(_project_of(p.name)) for p in self.folder.iterdir() if p.is_file()})

    def start(self) -> PackageIndex:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                index._answer(self)

        # A fixed port across stop() and start(): a host that reads the index after it is stopped is refused there.
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> PackageIndex:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        if self.credentials is not None and not self._authorised(request.headers.get("Authorization", "")):
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="index"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        path = request.path.split("?", 1)[0].split("#", 1)[0]
        if path == "/simple":
            return _redirect(request, "/simple/")
        if path == "/simple/":
            links = "".join(f'<a href="/simple/{name}/">{html.escape(name)}</a>\n' for name in self.projects())
            return _page(request, links)
        if path.startswith("/simple/"):
            name = path[len("/simple/") :].rstrip("/")
            if normalise(name) != name:
                return _redirect(request, f"/simple/{normalise(name)}/")
            if not path.endswith("/"):
                return _redirect(request, path + "/")
            files = self.files(name)
            if not files:
                return _status(request, 404)
            with self._lock:
                self.asked[name] += 1
            return _page(request, "".join(_anchor(path) for path in files))
        if path.startswith("/files/"):
            target = self.folder / path[len("/files/") :]
            if target.parent != self.folder or not target.is_file():
                return _status(request, 404)
            data = target.read_bytes()
            request.send_response(200)
            request.send_header("Content-Type", "application/octet-stream")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
            with self._lock:
                then = None
                if self._then is not None:
                    path, left = self._then
                    self._then = (path, left - 1) if left > 1 else None
                    then = path if left <= 1 else None
            if then is not None:
                self.publish(then)
            return None
        return _status(request, 404)

    def _authorised(self, header: str) -> bool:
        assert self.credentials is not None
        expected = base64.b64encode(f"{self.credentials[0]}:{self.credentials[1]}".encode()).decode()
        return header == f"Basic {expected}"


def _project_of(filename: str) -> str:
    """A distribution file's project name: a wheel's first dash-separated part; an sdist's name before its version."""
    if filename.endswith(".whl"):
        return filename.split("-", 1)[0]
    return filename.rsplit("-", 1)[0]


def _requires_python(path: Path) -> str | None:
    """A wheel's Requires-Python, read from its METADATA (PEP 345), for the anchor's data-requires-python."""
    if not path.name.endswith(".whl"):
        return None
    import zipfile

    with zipfile.ZipFile(path) as wheel:
        meta = next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
        for line in wheel.read(meta).decode().splitlines():
            if line.startswith("Requires-Python:"):
                return line.split(":", 1)[1].strip()
    return None


def _anchor(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    requires = _requires_python(path)
    attribute = f' data-requires-python="{html.escape(requires)}"' if requires else ""
    return f'<a href="/files/{path.name}#sha256={digest}"{attribute}>{html.escape(path.name)}</a>\n'


def _page(request: BaseHTTPRequestHandler, body: str) -> None:
    data = f"<!DOCTYPE html>\n<html><body>\n{body}</body></html>\n".encode()
    request.send_response(200)
    request.send_header("Content-Type", "text/html; charset=utf-8")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def _redirect(request: BaseHTTPRequestHandler, location: str) -> None:
    request.send_response(301)
    request.send_header("Location", location)
    request.send_header("Content-Length", "0")
    request.end_headers()


def _status(request: BaseHTTPRequestHandler, status: int) -> None:
    request.send_response(status)
    request.send_header("Content-Length", "0")
    request.end_headers()

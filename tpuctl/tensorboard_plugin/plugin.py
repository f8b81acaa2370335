"""The tpuctl tab: the plugin TensorBoard loads through the `tensorboard_plugins` entry point (pyproject.toml).

TensorBoard's dynamic plugins (tensorboard/plugins/base_plugin.py, backend/application.py) are served in an
iframe whose page imports the module named by `es_module_path` from the plugin's routes and calls its render():
so this module serves static/index.js and three JSON routes, `schema` (the run view's words the page draws by:
runs/view_schema.py), `runs` (the listing) and `view?run=KEY` (one checked view). A route never answers with a
traceback: whatever a run's files hold, the page gets JSON with either the data or a `message`, one line it shows as
text.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any

from tensorboard.backend import http_util
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tpuctl.inputs.errors import one_line
from tpuctl.runs import view_schema
from tpuctl.tensorboard_plugin import checking, finding

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

PLUGIN_NAME = "tpuctl"
_STATIC = {"/index.js": "application/javascript", "/style.css": "text/css"}
_log = logging.getLogger(__name__)


class Plugin(base_plugin.TBPlugin):  # type: ignore[misc]  # tensorboard ships no types
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._logdir = str(context.logdir or "")
        # TensorBoard sets context.logdir from --logdir alone (backend/application.py); under --logdir_spec it is empty
        # and the folders are in the flags, named as TensorBoard's own parser reads them (data_ingester.py).
        spec = "" if self._logdir else str(getattr(getattr(context, "flags", None), "logdir_spec", "") or "")
        self._shown = self._logdir or spec
        self._listing = finding.Listing(data_ingester._parse_event_files_spec(spec) if spec else self._logdir)

    def get_plugin_apps(self) -> dict[str, WSGIApplication]:
        apps = {path: _wsgi(functools.partial(self._static, path)) for path in _STATIC}
        return {**apps, "/schema": _wsgi(self._schema), "/runs": _wsgi(self._runs), "/view": _wsgi(self._view)}

    def is_active(self) -> bool:
        """Whether the logdir holds a run view; answered from the listing's cache (TensorBoard asks on every page load)."""
        return self._listing.active()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="tpuctl", disable_reload=True)

    def _static(self, route: str, request: wrappers.Request) -> wrappers.Response:
        """The file the route names. TensorBoard routes a path with a slash more (`/index.js/`) to the same route
        (application.py, _clean_path), so the file is the route's, never read from the request's path."""
        body = resources.files(__package__).joinpath("static").joinpath(route.lstrip("/")).read_bytes()
        return _respond(request, body, _STATIC[route])

    def _schema(self, request: wrappers.Request) -> wrappers.Response:
        return _json(request, view_schema.page_words())

    def _runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = self._listing.runs()
        listed = [{"key": run.key, "run_id": run.run_id} for run in runs]
        return _json(request, {"logdir": self._shown, "runs": listed, "message": self._listing.error})

    def _view(self, request: wrappers.Request) -> wrappers.Response:
        key = request.args.get("run", "")
        found = self._listing.get(key)
        if found is None:
            return _json(request, {"message": f"no run {one_line(key, 120)!r} under this logdir (the list is refreshed every few seconds)"})
        try:
            shown = checking.view(finding.read(found.where), logdir=self._logdir)
        except finding.Unreadable as e:
            return _json(request, {"message": f"{found.key}: {e}"})
        except Exception as e:  # noqa: BLE001 - the bucket's client (network, credentials) or a file that changed under us: one line, never a 500
            _log.warning("tpuctl: cannot read %s", found.where, exc_info=True)
            return _json(request, {"message": f"{found.key}: cannot read view.json: " + one_line(str(e) or type(e).__name__, 200)})
        return _json(request, {"key": found.key, "view": shown})


class Loader(base_plugin.TBLoader):  # type: ignore[misc]
    """What the entry point names: TensorBoard calls load() with its context as it starts."""

    def load(self, context: base_plugin.TBContext) -> Plugin:
        return Plugin(context)


def _wsgi(handle: Callable[[wrappers.Request], wrappers.Response]) -> WSGIApplication:
    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        response: Iterable[bytes] = handle(wrappers.Request(environ))(environ, start_response)
        return response

    return app


def _respond(request: wrappers.Request, body: bytes | str, content_type: str) -> wrappers.Response:
    """TensorBoard's own response: its security headers (CSP, nosniff) and gzip where the browser takes it."""
    response: wrappers.Response = http_util.Respond(request, body, content_type)
    return response


def _json(request: wrappers.Request, body: dict[str, Any]) -> wrappers.Response:
    return _respond(request, json.dumps(body, allow_nan=False), "application/json")

"""Vertex AI CustomJobs and Cloud Logging's entries:list, over REST with google-auth.

Four calls each are all a managed launch needs (create, get, cancel; list
entries), so no client library: google-cloud-aiplatform costs seconds of import
for what `requests` and AuthorizedSession do here (benchmarks/README.md).
The regional endpoint (https://REGION-aiplatform.googleapis.com) can be
replaced by the `vertex-endpoint` setting, which is how tests reach a local
stand-in; Logging's by `logging-endpoint`.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from tpuctl.cloud.auth.credentials import Identity
from tpuctl.cloud.plumbing import retry
from tpuctl.cloud.plumbing.api_errors import Where, explain, explained, is_api_failure
from tpuctl.cloud.plumbing.rest import RestApi
from tpuctl.endings import INTERRUPTED
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line

# JobState (vertex-ai/docs/reference/rest/v1/JobState): where a job's life ends, and the launch's exit status for each.
TERMINAL = {
    "JOB_STATE_SUCCEEDED": 0,
    "JOB_STATE_FAILED": FAILED,
    "JOB_STATE_CANCELLED": INTERRUPTED,
    "JOB_STATE_EXPIRED": FAILED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": FAILED,
}
_JOB_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/customJobs/[0-9]+\Z")
PAGE_SIZE = 1000
SERVICE = "aiplatform.googleapis.com"
ROLE = "roles/aiplatform.user"
RUN_LABEL = "tpuctl-run"  # every CustomJob tpuctl submits carries its run id here (tpuctl/backends/vertex/job_body.py)
CREATE_ATTEMPTS = 4
# Cloud Logging takes entries in out of timestamp order across replicas: each query looks back this far,
# and entries already shown are recognised by their insertId.
LATE_S = 60
SHOWN_KEPT = 100_000  # insertIds remembered: far more than one LATE_S window of a job's lines
LOG_PAGES = 20  # a poll reads at most 20,000 entries; a job writing more than that between polls is read on at the next
_STAMP = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]{1,9}))?Z\Z")


def regional_endpoint(region: str) -> str:
    return f"https://{region}-aiplatform.googleapis.com"


@dataclass(frozen=True)
class LogLine:
    timestamp: str
    task: str  # workerpool0-0, ...; "" where the entry names none
    text: str
    severity: str


class VertexJobs:
    def __init__(self, identity: Identity, endpoint: str, project: str, region: str) -> None:
        self.api = RestApi(identity, endpoint)
        self.project = project
        self.parent = f"projects/{project}/locations/{region}"

    def _call(self, action: str, permission: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        where = Where(action, self.project, permission=permission, service=SERVICE, role=ROLE)
        return explained(lambda: self.api.call(method, path, body), where)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST the job once per try: creating has no request id, so after a transient failure (the job may exist,
        its reply lost) the job is looked for by the run's label before it is sent again, never twice blindly."""
        where = Where("create a Vertex AI CustomJob", self.project, permission="aiplatform.customJobs.create", service=SERVICE, role=ROLE)
        path = f"v1/{self.parent}/customJobs"
        job: dict[str, Any] | None = None
        for attempt in range(CREATE_ATTEMPTS):
            try:
                job = self.api.call_once("POST", path, body)
                break
            except Exception as exc:
                if not retry.is_transient(exc) or attempt == CREATE_ATTEMPTS - 1:
                    if is_api_failure(exc):
                        raise explain(exc, where) from None
                    raise
            time.sleep(retry.backoff(attempt))
            job = self._labelled(body)
            if job is not None:
                break
        assert job is not None
        name = job.get("name")
        if not isinstance(name, str) or not _JOB_NAME.match(name):
            raise TpuctlError(f"Vertex AI answered the job's creation without a job name ({one_line(str(name), 80)})", exit_code=FAILED)
        return job

    def _labelled(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The job this launch created, if a create whose reply was lost did create it."""
        run = (body.get("labels") or {}).get(RUN_LABEL)
        if not run:
            return None
        query = urlencode({"filter": f'labels.{RUN_LABEL}="{run}"'})
        found = self._call("look for the submitted CustomJob", "aiplatform.customJobs.list", "GET", f"v1/{self.parent}/customJobs?{query}")
        jobs = [job for job in found.get("customJobs") or [] if isinstance(job, dict)]
        return jobs[0] if jobs else None

    def get(self, name: str) -> dict[str, Any]:
        return self._call(f"read CustomJob {job_id(name)}", "aiplatform.customJobs.get", "GET", f"v1/{name}")

    def cancel(self, name: str) -> None:
        self._call(f"cancel CustomJob {job_id(name)}", "aiplatform.customJobs.cancel", "POST", f"v1/{name}:cancel", {})


def job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


class JobLogs:
    """A job's log entries, in time order, each shown once.

    Each query asks again for the last LATE_S seconds before the newest entry seen, because Logging
    takes entries in out of order across replicas; entries already shown are known by insertId.
    """

    def __init__(self, identity: Identity, endpoint: str, project: str, job: str) -> None:
        self.api = RestApi(identity, endpoint)
        self.project = project
        self.job = job_id(job)
        self._newest = ""
        self._shown: set[str] = set()
        self._order: deque[str] = deque()

    def filter(self) -> str:
        text = f'resource.type="ml_job" AND resource.labels.job_id="{self.job}"'
        since = _earlier(self._newest, LATE_S)
        return text + (f' AND timestamp>="{since}"' if since else "")

    def new_lines(self) -> list[LogLine]:
        """The entries not shown yet, at most LOG_PAGES pages of them: the next poll goes on from the newest one read."""
        found: list[LogLine] = []
        body: dict[str, Any] = {"resourceNames": [f"projects/{self.project}"], "filter": self.filter(), "orderBy": "timestamp asc", "pageSize": PAGE_SIZE}
        where = Where("read the job's logs", self.project, permission="logging.logEntries.list", service="logging.googleapis.com", role="roles/logging.viewer")
        try:
            for reply in retry.pages(lambda token: self._page({**body, "pageToken": token} if token else body, where), self.api.endpoint, LOG_PAGES):
                for entry in reply.get("entries") or []:
                    line = self._line(entry)
                    if line is not None:
                        found.append(line)
        except retry.Endless:
            pass  # a poll's share read; the next poll asks again from the newest entry seen (or, paged in a circle, anew)
        return found

    def _page(self, body: dict[str, Any], where: Where) -> dict[str, Any]:
        return explained(lambda: self.api.call("POST", "v2/entries:list", body), where)

    def _line(self, entry: Any) -> LogLine | None:
        if not isinstance(entry, dict):
            return None
        stamp = str(entry.get("timestamp", ""))
        key = str(entry.get("insertId", "")) or f"{stamp} {_task(entry)} {_text(entry)}"
        if key in self._shown:
            return None
        self._shown.add(key)
        self._order.append(key)
        if len(self._order) > SHOWN_KEPT:
            self._shown.discard(self._order.popleft())
        if instant(stamp) > instant(self._newest):
            self._newest = stamp
        return LogLine(stamp, _task(entry), _text(entry), str(entry.get("severity", "")))


def _earlier(stamp: str, seconds: int) -> str:
    """`stamp` moved back by `seconds`, as RFC 3339 UTC; "" where there is no usable stamp yet."""
    match = _STAMP.match(stamp)
    if match is None:
        return ""
    moved = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S") - timedelta(seconds=seconds)
    return moved.strftime("%Y-%m-%dT%H:%M:%S") + "Z"


def instant(stamp: str) -> tuple[str, int]:
    """An RFC 3339 UTC timestamp as (seconds part, nanoseconds), so "…:00.5Z" and "…:00.500Z" compare equal.

    Logging writes UTC with a Z and from 0 to 9 fractional digits; anything else sorts first."""
    match = _STAMP.match(stamp)
    if match is None:
        return ("", 0)
    return (match[1], int((match[2] or "").ljust(9, "0")[:9] or 0))


def _task(entry: dict[str, Any]) -> str:
    for holder in (entry.get("labels"), (entry.get("resource") or {}).get("labels")):
        if isinstance(holder, dict):
            for key in ("ml.googleapis.com/task_name", "task_name"):
                if isinstance(holder.get(key), str):
                    return str(holder[key])
    return ""


def _text(entry: dict[str, Any]) -> str:
    if isinstance(entry.get("textPayload"), str):
        return str(entry["textPayload"])
    payload = entry.get("jsonPayload")
    if isinstance(payload, dict) and isinstance(payload.get("message"), str):
        return str(payload["message"])
    return ""

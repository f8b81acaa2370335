"""What a launch asks of its hosts' environment (--requirements, --setup, --index-url), known before any host is
reached: what a dry run shows, and the digests the hosts find a built environment by.

The index URL may carry credentials (`https://user:TOKEN@host/simple`): it reaches pip on the first host in the
environment of its process (never a command line), and everything tpuctl prints, logs or records shows it with its
user information hidden (`shown_index`), text relayed from a host included (`scrub`).
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuctl.inputs.redact import url_credentials_hidden

if TYPE_CHECKING:
    from tpuctl.inputs.requirements import Requirements
    from tpuctl.launch.job import Job

ENVS_HOME = "~/.cache/tpuctl/envs/"  # as people read it; each host resolves it (XDG_CACHE_HOME, else ~/.cache)
WHEELS_HOME = "~/.cache/tpuctl/wheels/"
BUCKET_FOLDER = "tpuctl/wheels/"  # in the run's bucket: gs://BUCKET/tpuctl/wheels/LOCK/, shared by every run there
FORMAT = "1"  # the request digest's own version: a change in how environments are built makes every one anew


@dataclass(frozen=True)
class EnvSpec:
    requirements: str | None  # the file as the user named it
    pip_text: str  # its requirements as the hosts' pip gets them ("" without a file)
    setup: str | None
    index_url: str | None
    replace_tensorflow: bool
    tpu: bool  # the hosts are a TPU VM's: a lock that would replace its TensorFlow is refused
    bucket: str | None  # the run's bucket (a gs:// model dir's), where the wheels are kept for every host
    lines: tuple[tuple[str, int], ...] = ()  # (normalized project name, its line in the file) of each requirement
    framework: str = "tensorflow"  # the run's (job.framework): on a TPU VM, what a lock may not bring follows it (inputs/requirements.py)

    @classmethod
    def of_job(cls, job: Job, reqs: Requirements | None, *, tpu: bool) -> EnvSpec | None:
        """The job's environment (`reqs`: its --requirements, read and checked as the launch prepared), or None where
        it asks for none (no --requirements and no --setup): the workers then run with the hosts' Python as it is."""
        if reqs is None and job.setup is None:
            return None
        pip_text = reqs.pip_text() if reqs is not None else ""
        model_dir = job.model_dir or ""
        bucket = model_dir[len("gs://") :].partition("/")[0] if model_dir.startswith("gs://") else None
        lines = tuple((line.name, line.line) for line in reqs.lines) if reqs is not None else ()
        return cls(job.requirements, pip_text, job.setup, job.index_url, job.replace_tensorflow, tpu, bucket or None, lines, job.framework)

    def request(self, python: str) -> str:
        """The digest a host files its environment for this request under: the requirements as pip reads them, the
        index (credentials and all: only their hash leaves), the Python the hosts were asked to use. The same
        request finds the environment built last time, without a resolution (the warm path)."""
        parts = [FORMAT, self.pip_text, self.index_url or "", python]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]

    @property
    def setup_hash(self) -> str:
        return hashlib.sha256((self.setup or "").encode()).hexdigest()[:16] if self.setup else ""

    @property
    def shown_index(self) -> str:
        return url_credentials_hidden(self.index_url) if self.index_url else "the hosts' pip configuration, else PyPI"

    def scrub(self, text: str) -> str:
        """Text from a host (pip's words, a path) with the index URL's credentials hidden, even where pip quoted them
        in pieces (the user name or the password alone)."""
        text = url_credentials_hidden(text)
        if self.index_url:
            userinfo = urllib.parse.urlsplit(self.index_url).netloc.rpartition("@")[0]
            for secret in sorted({userinfo, *userinfo.split(":", 1)}, key=len, reverse=True):
                if len(secret) >= 4:
                    text = text.replace(secret, url_credentials_hidden(f"x://{secret}@")[4:-1])
        return text

    def lines_named_in(self, text: str) -> str:
        """The file's lines whose project pip's words name (" (requirements.txt:2, 5)"), "" where they name none: pip
        names a requirement as the hosts got it, which is the file's line without its comment and options."""
        words = {re.sub(r"[-_.]+", "-", word).lower() for word in re.split(r"[^A-Za-z0-9._-]+", text)}
        numbers = [str(number) for name, number in self.lines if name in words]
        return f" ({self.requirements}:{', '.join(numbers)})" if numbers else ""

    def wheels_home(self, lock_digest: str = "<LOCK-HASH>") -> str:
        """Where the wheels are kept for every host: the run's bucket, else the first host (and this machine)."""
        if self.bucket:
            return f"gs://{self.bucket}/{BUCKET_FOLDER}{lock_digest}/"
        return f"{WHEELS_HOME}{lock_digest}/ on the first host, and in this machine's cache"

    def describe(self) -> dict[str, Any]:
        """The dry run's environment step: what is known before any host is reached."""
        digest = hashlib.sha256(self.pip_text.encode()).hexdigest() if self.requirements else None
        return {
            "requirements": self.requirements,
            "requirements_digest": digest,
            "requirements_lines": len(self.pip_text.splitlines()),
            "setup": self.setup,
            "index_url": self.shown_index,
            "env": f"{ENVS_HOME}<KEY>/",
            "wheels": self.wheels_home(),
            "copies": not self.bucket,  # hosts of one Python get the environment one of them built (copies.py)
            "replace_tensorflow": self.replace_tensorflow,
            "tpu": self.tpu,
            "framework": self.framework,
        }


def render(described: dict[str, Any]) -> list[str]:
    """The dry run's lines for the environment step (its `describe()`)."""
    lines = []
    if described["requirements"]:
        lines.append(
            f"environment: {described['requirements']} ({described['requirements_lines']} requirement(s), sha256 "
            f"{described['requirements_digest'][:12]}…) resolved once on the first host from {described['index_url']}, "
            "with only wheels, over the hosts' Python with its site-packages visible"
        )
        lines.append(
            f"environment: each host's venv in {described['env']} (KEY: the lock and the host's Python), reused when built; "
            f"the wheels kept in {described['wheels']}, "
            + (
                "one host of each Python installing exactly them with no index, the others of that Python getting a copy of its environment"
                if described["copies"]
                else "every host installing exactly them from there with no index"
            )
        )
        if described["tpu"] and not described["replace_tensorflow"]:
            refused = "a TPU build of TensorFlow (it would fight JAX for the TPU)" if described.get("framework") == "jax" else "TensorFlow, libtpu or jaxlib"
            lines.append(f"environment: a lock that adds or replaces {refused} is refused before anything is installed")
    if described["setup"]:
        lines.append(f"environment: --setup {described['setup']!r} once per host and environment, the environment's bin first on PATH")
    return lines

"""The TensorFlow, Keras and tf-keras an interpreter has, read from the installed distributions' metadata.

Never imported: the CLI never imports TensorFlow (seconds and ~600 MB), and an installed distribution's
metadata says its version in milliseconds. This interpreter is read in-process; another (`--python`, a
rehearsal's environment) by one short query of its own, bounded.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata

from tpuctl.endings import exit_words
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.safety import reaper

# The names TensorFlow's builds are published under on PyPI (pypi.org/project/<name>): one of them is "TensorFlow".
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-macos", "tensorflow-intel", "tf-nightly", "tf-nightly-cpu")
KERAS, TF_KERAS = "keras", "tf-keras"
DISTRIBUTIONS = (*TENSORFLOW_DISTRIBUTIONS, KERAS, TF_KERAS)
QUERY_TIMEOUT_S = 20.0  # an interpreter that cannot start in this is itself the finding (preflight's rule)
# Python 3.8/3.9's importlib.metadata finds a distribution by its own spelling: tf-keras installs as tf_keras.
_QUERY = (
    "import importlib.metadata as m, json\n"
    "found = {}\n"
    f"for name in {DISTRIBUTIONS!r}:\n"
    "    for spelling in (name, name.replace('-', '_')):\n"
    "        try:\n"
    "            found[name] = m.version(spelling)\n"
    "            break\n"
    "        except m.PackageNotFoundError:\n"
    "            pass\n"
    "print(json.dumps(found))\n"
)
_VERSION = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})(?:\.([0-9]{1,4}))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """X.Y.Z of a version as metadata writes it (2.21.0, 2.16.0rc0, 2.22.0.dev20251001): its release numbers."""
    found = _VERSION.match(text or "")
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)


@dataclass(frozen=True)
class Installed:
    """What an interpreter has of TensorFlow and Keras: each distribution found, by name, with its version."""

    python: str
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def tensorflow(self) -> str | None:
        return next((self.versions[name] for name in TENSORFLOW_DISTRIBUTIONS if name in self.versions), None)

    @property
    def tensorflow_version(self) -> tuple[int, int, int] | None:
        return parse_version(self.tensorflow)

    @property
    def keras(self) -> str | None:
        return self.versions.get(KERAS)

    @property
    def tf_keras(self) -> str | None:
        return self.versions.get(TF_KERAS)

    def describe(self) -> str:
        """"TensorFlow 2.21.0 with Keras 3.15.1 and tf-keras 2.21.0", or "no TensorFlow"."""
        if self.tensorflow is None:
            return "no TensorFlow"
        keras = [f"Keras {self.keras}"] if self.keras else []
        keras += [f"tf-keras {self.tf_keras}"] if self.tf_keras else []
        return f"TensorFlow {self.tensorflow}" + (f" with {' and '.join(keras)}" if keras else "")


def this_interpreter() -> Installed:
    """This interpreter's, in-process."""
    found = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return Installed(sys.executable, found)


def of_interpreter(python: str) -> Installed:
    """Another interpreter's, by one query of its own metadata; this one's in-process. A query that cannot run is a
    one-line error naming the interpreter."""
    if python == sys.executable:
        return this_interpreter()
    try:
        done = reaper.run([python, "-c", _QUERY], timeout=QUERY_TIMEOUT_S, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    except subprocess.TimeoutExpired:
        raise TpuctlError(f"{python} did not answer within {QUERY_TIMEOUT_S:g}s which TensorFlow it has") from None
    except OSError as err:
        raise TpuctlError(f"cannot run {python}: {err.strerror or err}") from None
    try:
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        said = one_line(done.stderr.decode("utf-8", "replace"), last=True) or exit_words(done.returncode)
        raise TpuctlError(f"cannot read which TensorFlow {python} has: {said}")
    return Installed(python, {name: found[name] for name in DISTRIBUTIONS if name in found})

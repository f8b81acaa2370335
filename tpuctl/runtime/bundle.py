"""`python -m tpuctl.runtime.bundle SCRIPT [ARGS...]`: a Vertex job's entry into a staged bundle.

Vertex pip-installs the bundle tpuctl staged (tpuctl/backends/vertex/staging.py), which
puts the script's folder in site-packages as the package `tpuctl_job`. This
finds that folder without importing it (nothing of the user's runs before the script),
makes it the working directory, as the folder was on the launching machine,
and hands over to the runtime as `python -m tpuctl.runtime SCRIPT` would.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from tpuctl.inputs.errors import USAGE
from tpuctl.runtime import bootstrap

PACKAGE = "tpuctl_job"


def main() -> None:
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        print(f"tpuctl: error: the staged package {PACKAGE} is not installed here", file=sys.stderr, flush=True)
        sys.exit(USAGE)
    os.chdir(locations[0])
    bootstrap.main(sys.argv[1:])


if __name__ == "__main__":
    main()

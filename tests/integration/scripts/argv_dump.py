"""Writes the argv it received, as JSON, to $ARGV_OUT/<worker index>.json."""
import json
import os
import sys

with open(os.path.join(os.environ["ARGV_OUT"], os.environ["TPUCTL_WORKER_INDEX"] + ".json"), "w", encoding="utf-8") as f:
    json.dump({"argv": sys.argv, "env": {k: v for k, v in os.environ.items() if k.startswith(("TPUCTL_", "TF_CONFIG"))}}, f)

"""The multi-worker tutorials' first lines: the worker's place read straight from TF_CONFIG."""
import json
import os

tf_config = json.loads(os.environ["TF_CONFIG"])
print("workers:", len(tf_config["cluster"]["worker"]), flush=True)

"""The launch flow: a Job, the backend that runs it (runner.py, registry.py, prepare.py, execute.py), the machine made for
it where the backend names a provisioner (provisioning.py: --new-tpu's own TPU VM), and its Outcome.

How the layers stack and where a launch goes from flag to worker: docs/architecture.md.
"""

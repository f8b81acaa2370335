"""The launch flow: a Job, the backend that runs it (runner.py, registry.py, prepare.py, execute.py), and its Outcome.

How the layers stack and where a launch goes from flag to worker: docs/architecture.md.
"""

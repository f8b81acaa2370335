"""`tpuctl doctor`: can this machine (and every worker host) run TensorFlow on its accelerator?

A probe (probe.py) runs in the workers' interpreter and gathers facts; the
checks (checks.py) judge them here, each from a failure users really hit
(docs/doctor.md names the issue behind each); across.py compares hosts.
"""

"""One package per launch backend; each one's `runner` module is its entry (tpuctl/launch/registry.py)."""

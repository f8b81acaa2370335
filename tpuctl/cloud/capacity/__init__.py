"""Where a TPU type can be had and what it costs: list prices, quotas, the per-zone offers (`tpuctl offers`), the
hunt that creates over ranked candidates until one holds, where a lost node comes back, and a run's own VM (its
provisioner, which tells what happens to the VM as typed events)."""

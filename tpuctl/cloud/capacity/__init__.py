"""What a project can get where: per-zone offers of a TPU type, its quota, the bucket's distance (`tpuctl offers`)."""

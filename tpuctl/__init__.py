"""tpuctl: run TensorFlow training on N workers, locally, on TPU VMs or GPU hosts."""

__version__ = "0.1.0"

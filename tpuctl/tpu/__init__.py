"""The TPU facts: every TPU generation's names, chips, hosts and topologies (accelerators), and its software side
(PCI ids, the TensorFlow runtime images, libtpu pins, Python ranges). Every backend, `create`, `devices`, `doctor`
and `--rehearse` ask these two tables; no other module names a TPU type.
"""

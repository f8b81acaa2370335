"""The cluster a launch describes: TF_CONFIG and cluster shapes (`tf_config`, the one source of truth for roles),
host lists and hostfiles (`hosts`), and the environment contract between a launch and its workers
(`worker_contract`). Pure data and validation: no I/O beyond reading a hostfile, no TensorFlow.
"""

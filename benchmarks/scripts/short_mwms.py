"""A short multi-worker TensorFlow job: the same work under either launcher.

Tutorial style: the script builds MultiWorkerMirroredStrategy itself from
TF_CONFIG. Under `tpuctl launch` the runtime sees that in the source and builds
none, so this construction is the one that runs and both launchers do the same
work: import TensorFlow, join the cluster (two workers in the benchmark's pair), one all-reduce, exit.
"""

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
print(f"replicas={strategy.num_replicas_in_sync} sum={float(total)}")

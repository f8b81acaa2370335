"""A TF 2.4-era multi-worker script: the experimental strategy name, deprecated since."""
import tensorflow as tf

strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
print("replicas:", strategy.num_replicas_in_sync)

"""The smallest TensorFlow worker: importing TF and running one op is what prints its start-up chatter."""

import tensorflow as tf

print("constant:", int(tf.constant(3) + 4), flush=True)

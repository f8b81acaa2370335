"""Two MultiWorkerMirroredStrategy workers; the chief is done first (as when it skips evaluation)."""
import json
import os
import time

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
value = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
print("sum:", float(value))
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    time.sleep(15)
print("done")

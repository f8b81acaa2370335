"""Two-worker custom training loop, the multi-worker tutorial's shape, that runs long enough to be frozen.

Each worker writes its pid to $PID_DIR/<index> first, so a test can stop one of them.
"""
import json
import os
import time

import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
with open(os.path.join(os.environ["PID_DIR"], str(index)), "w") as out:
    out.write(str(os.getpid()))

strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step():
    return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.ones([4])))


for n in range(600):
    step()
    print("step", n, flush=True)
    time.sleep(0.1)

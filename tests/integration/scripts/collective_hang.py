"""Worker 1 stalls in its input pipeline while worker 0 waits for it inside an all-reduce.

The kind of hang --hang-timeout is for (tests/integration/test_hangs.py): no
error anywhere, one worker stuck in the script's own code, the other blocked in
TensorFlow's C++ collective, which holds no Python frame of the script's at the
top. Run under `tpuctl launch --workers 2`, whose strategy the script picks up.
"""

import os
import time

import tensorflow as tf

strategy = tf.distribute.get_strategy()


def wait_for_batch() -> None:
    time.sleep(600)  # a data loader that never delivers


@tf.function
def train_step() -> tf.Tensor:
    return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))


print(f"replicas in sync: {strategy.num_replicas_in_sync}", flush=True)
if os.environ["TPUCTL_WORKER_INDEX"] == "1":
    wait_for_batch()
strategy.run(train_step)

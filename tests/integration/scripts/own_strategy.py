"""TensorFlow's multi-worker tutorial shape: the script builds its own strategy from TF_CONFIG."""
import json
import os

import numpy as np
import tensorflow as tf

import tpuctl.runtime

tf_config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=1, verbose=0)
same = tpuctl.runtime.strategy() is strategy
print(f"task {tf_config['task']['index']}: own strategy replicas {strategy.num_replicas_in_sync}, shared {same}", flush=True)

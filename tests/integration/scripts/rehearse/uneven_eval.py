"""Keras fit on a TPU in the style of TensorFlow's "Use TPUs" guide, then an evaluation one example at a time
(batch(1, drop_remainder=True)): a global batch of 1 over the TPU's replicas, which TPUStrategy pads."""

import json

import numpy as np
import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)

rng = np.random.default_rng(0)
x = rng.random((256, 4), dtype=np.float32)
y = (x.sum(axis=1) > 2).astype(np.int64)
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(8 * strategy.num_replicas_in_sync, drop_remainder=True)
test = tf.data.Dataset.from_tensor_slices((x[:12], y[:12])).batch(1, drop_remainder=True)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["sparse_categorical_accuracy"])
model.fit(train, epochs=1, verbose=2)
loss, accuracy = model.evaluate(test, verbose=2)
print(json.dumps({"script": "uneven_eval", "loss": float(loss), "accuracy": float(accuracy)}))

"""Keras fit under ParameterServerStrategy: the chief coordinates, workers and ps serve."""

import numpy as np
import tensorflow as tf

from tpuctl import runtime

strategy = runtime.strategy()
features = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
labels = (features.sum(axis=1) > 0).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(8)

model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy")
history = model.fit(dataset, epochs=2, steps_per_epoch=5, verbose=0)
variable_device = model.weights[0].device
print(f"ps training done: loss {history.history['loss'][-1]:.3f}, first variable on {variable_device}")

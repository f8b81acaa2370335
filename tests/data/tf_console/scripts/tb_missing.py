"""Keras' TensorBoard callback where the tensorboard package is not importable."""
import sys

sys.modules["tensorboard"] = None  # as on an install of tensorflow-cpu 2.21 alone
import numpy as np
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.random.rand(32, 4), np.random.rand(32, 1), epochs=1, verbose=2,
          callbacks=[tf.keras.callbacks.TensorBoard(log_dir=sys.argv[1])])

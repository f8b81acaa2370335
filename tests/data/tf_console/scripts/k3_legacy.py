"""A TF 2.x-era script that asks for the legacy optimizer."""
import numpy as np
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.01), loss="mse")
model.fit(np.random.rand(32, 4), np.random.rand(32, 1), epochs=1, verbose=2)

"""Keras classification where one label is past the last class (sparse labels, as in the tutorials)."""
import numpy as np
import tensorflow as tf

x = np.random.rand(64, 8).astype("float32")
y = np.random.randint(0, 10, size=(64,))
y[37] = 12  # one label outside [0, 10)

model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(
    optimizer="adam",
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(x, y, batch_size=16, epochs=2)

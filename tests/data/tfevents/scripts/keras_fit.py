"""A small fit with Keras' TensorBoard callback, per batch and per epoch, with weight histograms.

`keras` is whichever Keras `tf.keras` is: Keras 3 on TF 2.21, tf-keras with
TF_USE_LEGACY_KERAS=1, Keras 2 on TF 2.15. Data are generated, not downloaded."""

import sys

import numpy as np
import tensorflow as tf

keras = tf.keras
rng = np.random.default_rng(0)
x = rng.normal(size=(40, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
board = keras.callbacks.TensorBoard(log_dir=sys.argv[1], update_freq=1, histogram_freq=1)
model.fit(x, y, epochs=2, batch_size=10, validation_split=0.25, verbose=0, callbacks=[board])

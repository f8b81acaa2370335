"""Transfer learning with a TF Hub feature vector, as TensorFlow's hub tutorials write it: a frozen
hub.KerasLayer first in a tf.keras.Sequential, a new classification head, compile and fit.
argv[1] is the model handle (a SavedModel directory)."""

import sys

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub

feature_extractor_layer = hub.KerasLayer(sys.argv[1], input_shape=(4,), trainable=False)
model = tf.keras.Sequential([feature_extractor_layer, tf.keras.layers.Dense(2)])
model.compile(
    optimizer=tf.keras.optimizers.Adam(),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["acc"],
)
history = model.fit(np.random.rand(64, 4).astype("float32"), np.random.randint(0, 2, 64), epochs=2, batch_size=16, verbose=2)
print("hub fit done:", type(model).__module__.split(".")[0], len(history.history["loss"]), "epochs")

"""TF Hub's transfer-learning pattern (hub.KerasLayer first in a tf.keras.Sequential) on a SavedModel it writes."""
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub


class FeatureVector(tf.Module):
    def __init__(self):
        super().__init__()
        self.kernel = tf.Variable(tf.random.normal([4, 8]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, images):
        return tf.nn.relu(tf.matmul(images, self.kernel))


handle = tempfile.mkdtemp()
tf.saved_model.save(FeatureVector(), handle)
model = tf.keras.Sequential([hub.KerasLayer(handle, input_shape=(4,), trainable=False), tf.keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(np.random.rand(32, 4).astype("float32"), np.random.randint(0, 2, 32), epochs=1, verbose=2)

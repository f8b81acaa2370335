"""Writes argv[1]: a small feature-vector SavedModel (TF2 SavedModel, the format hub.KerasLayer loads)."""

import sys

import tensorflow as tf


class FeatureVector(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kernel = tf.Variable(tf.random.normal([4, 8]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(tf.matmul(images, self.kernel))


tf.saved_model.save(FeatureVector(), sys.argv[1])

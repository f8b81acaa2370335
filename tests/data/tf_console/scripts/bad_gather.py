"""An embedding lookup with an id past the vocabulary, inside a tf.function."""
import numpy as np
import tensorflow as tf

embedding = tf.Variable(tf.random.normal([10, 4]))


@tf.function
def lookup(ids):
    return tf.reduce_sum(tf.gather(embedding, ids))


print(float(lookup(tf.constant([1, 2, 3]))))
print(float(lookup(tf.constant(np.array([1, 12, 3])))))

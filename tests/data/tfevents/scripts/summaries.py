"""Scalars as TensorFlow's guides write them: tf.summary.scalar eagerly and in a tf.function
loop, with a histogram, an image and a text summary between them, a tag too long for one short
record, a non-ASCII tag, and steps from 0 (not written) to 2**40."""

import sys

import tensorflow as tf

writer = tf.summary.create_file_writer(sys.argv[1])
with writer.as_default():
    for step in (0, 1, 2, 127, 128, 300_000, 2**40):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
        tf.summary.scalar("accuracy", min(step, 100) / 100, step=step)
    tf.summary.histogram("weights", tf.random.stateless_normal([16], seed=[1, 2]), step=3)
    tf.summary.image("samples", tf.zeros([1, 2, 2, 1]), step=3)
    tf.summary.text("notes", "a text summary between scalars", step=3)
    tf.summary.scalar("a/rather/long/name/scope/for/a/metric/whose/record/is/longer/than/the/one/byte/length/of/a/short/record/loss", 0.5, step=4)
    tf.summary.scalar("損失", 0.75, step=4)
    tf.summary.scalar("loss", 0.25, step=5)


@tf.function
def train(steps: tf.Tensor) -> None:
    with writer.as_default():
        for step in tf.range(10, 10 + steps):
            tf.summary.scalar("loss", 1.0 / tf.cast(step, tf.float32), step=step)


train(tf.constant(4, tf.int64))
writer.close()

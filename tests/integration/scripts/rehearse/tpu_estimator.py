"""A TPUEstimator training script as the TensorFlow 1.x Cloud TPU guides wrote them (run on TensorFlow 2.15 with
tensorflow-estimator): absl flags, tf.compat.v1 with TF1 behaviour, the TPU found by TPUClusterResolver(tpu='')
as on a TPU VM or Colab, a model_fn whose optimizer is wrapped in CrossShardOptimizer, TPUConfig(iterations_per_loop),
a RunConfig given the resolver, TPUEstimator(use_tpu=True) with global batch sizes, then train(max_steps) and evaluate.
Generated data, nothing downloaded. Nothing here knows about tpuctl.

Ends with one JSON line: what it trained and evaluated.
"""

import json
import os

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

tf.disable_v2_behavior()  # TF1 code on TF2, as the migration guide says to run it unchanged

FLAGS = flags.FLAGS
flags.DEFINE_string("tpu", "", "The Cloud TPU: a name, a grpc:// address, or '' for the TPU VM or Colab TPU this runs on.")
flags.DEFINE_string("model_dir", None, "Where checkpoints and summaries go (default: $TPUCTL_MODEL_DIR).")
flags.DEFINE_integer("train_batch_size", 64, "Global training batch size, split across the TPU cores.")
flags.DEFINE_integer("eval_batch_size", 64, "Global evaluation batch size.")
flags.DEFINE_integer("train_steps", 20, "Training steps.")
flags.DEFINE_integer("eval_steps", 2, "Evaluation steps.")
flags.DEFINE_integer("iterations_per_loop", 10, "Steps per TPU training loop (one Session.run).")

FEATURES, CLASSES = 16, 4
SEEN = {"input_fn": set(), "model_fn": set()}


def make_input_fn(training):
    def input_fn(params):
        batch_size = params["batch_size"]  # TPUEstimator's: per host on a TPU
        SEEN["input_fn"].add(batch_size)
        rng = np.random.RandomState(1 if training else 2)
        x = rng.normal(size=(1024, FEATURES)).astype(np.float32)
        y = np.argmax(x[:, :CLASSES], axis=1).astype(np.int32)
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if training:
            dataset = dataset.shuffle(1024)
        dataset = dataset.repeat()
        # TPUs need static shapes: every batch full.
        return dataset.batch(batch_size, drop_remainder=True).prefetch(2)

    return input_fn


def metric_fn(labels, logits):
    predictions = tf.argmax(logits, axis=1)
    return {"accuracy": tf.metrics.accuracy(labels=labels, predictions=predictions)}


def model_fn(features, labels, mode, params):
    SEEN["model_fn"].add(params["batch_size"])  # per core on a TPU
    hidden = tf.layers.dense(features, 32, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, CLASSES)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.1)
    optimizer = tf.tpu.CrossShardOptimizer(optimizer)  # sums the gradients of every TPU core
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)


def main(argv):
    del argv
    tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=FLAGS.tpu)
    run_config = tf.estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver,
        model_dir=FLAGS.model_dir or os.environ["TPUCTL_MODEL_DIR"],
        save_checkpoints_steps=FLAGS.iterations_per_loop,
        tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=FLAGS.iterations_per_loop),
    )
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=run_config,
        use_tpu=True,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
    )
    estimator.train(input_fn=make_input_fn(training=True), max_steps=FLAGS.train_steps)
    result = estimator.evaluate(input_fn=make_input_fn(training=False), steps=FLAGS.eval_steps)
    print(json.dumps({
        "script": "tpu_estimator",
        "master": tpu_cluster_resolver.master(),
        "global_step": int(result["global_step"]),
        "accuracy": float(result["accuracy"]),
        "loss": float(result["loss"]),
        "input_fn_batch": sorted(SEEN["input_fn"]),
        "model_fn_batch": sorted(SEEN["model_fn"]),
        "latest_checkpoint": estimator.latest_checkpoint(),
    }), flush=True)


if __name__ == "__main__":
    app.run(main)

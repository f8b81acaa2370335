"""tensorflow/tpu's ResNet training as models/official/resnet/resnet_main.py and imagenet_input.py write it (run on
TensorFlow 2.15 with tensorflow-estimator): absl flags, TF1 behaviour, TPUClusterResolver(tpu=''), a RunConfig with
TPUConfig(iterations_per_loop, num_shards, PER_HOST_V2), TPUEstimator(use_tpu=True) with global batch sizes, the
null input pipeline imagenet_input.py builds without a data_dir, and its "double transpose": with transpose_input,
input_fn transposes each image batch to HWCN and flattens it to one dimension (set_shapes: `tf.reshape(images, [-1])`),
and model_fn works the image size out of the shapes and turns the batch back to NHWC. The ResNet-50 itself is a small
convolutional net here; nothing else differs. Nothing here knows about tpuctl.

Trains, then evaluates (resnet_main.py's train_and_eval, once). Ends with one JSON line: the global step it trained
to and the batch its input_fn was given each time.
"""

import functools
import json

import tensorflow.compat.v1 as tf
from absl import app, flags
from tensorflow.compat.v1 import estimator as tf_estimator

tf.disable_v2_behavior()

FLAGS = flags.FLAGS
flags.DEFINE_string("tpu", "", "The Cloud TPU to use for training.")
flags.DEFINE_string("model_dir", None, "Where checkpoints and summaries go.")
flags.DEFINE_integer("train_batch_size", 12, "Global batch size for training.")
flags.DEFINE_integer("eval_batch_size", 12, "Global batch size for evaluation.")
flags.DEFINE_integer("train_steps", 2, "Training steps.")
flags.DEFINE_integer("eval_steps", 1, "Evaluation steps.")
flags.DEFINE_integer("iterations_per_loop", 2, "Steps per TPU training loop.")
flags.DEFINE_integer("num_cores", 8, "Number of TPU cores.")
flags.DEFINE_integer("image_size", 16, "Image height and width.")
flags.DEFINE_bool("transpose_input", True, "Use TPU double transpose optimization")

MEAN_RGB = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STDDEV_RGB = [0.229 * 255, 0.224 * 255, 0.225 * 255]
SEEN = {"input_fn_batch": []}


class ImageNetInput:
    """imagenet_input.ImageNetInput without a data_dir: a null pipeline of black images and blank labels."""

    def __init__(self, is_training, transpose_input, image_size):
        self.is_training = is_training
        self.transpose_input = transpose_input
        self.image_size = image_size

    def set_shapes(self, batch_size, images, labels):
        """Statically set the batch_size dimension."""
        if self.transpose_input:
            images.set_shape(images.get_shape().merge_with(tf.TensorShape([None, None, None, batch_size])))
            images = tf.reshape(images, [-1])
            labels.set_shape(labels.get_shape().merge_with(tf.TensorShape([batch_size])))
        else:
            images.set_shape(images.get_shape().merge_with(tf.TensorShape([batch_size, None, None, None])))
            labels.set_shape(labels.get_shape().merge_with(tf.TensorShape([batch_size])))
        return images, labels

    def dataset_parser(self, value):
        return value, tf.constant(0, tf.int32)

    def _get_null_input(self, data):
        del data
        return tf.zeros([self.image_size, self.image_size, 3], tf.float32)

    def make_source_dataset(self, index, num_hosts):
        return tf.data.Dataset.range(1).repeat().map(self._get_null_input)

    def input_fn(self, params):
        batch_size = params["batch_size"]
        SEEN["input_fn_batch"].append(batch_size)
        if "context" in params:
            current_host = params["context"].current_input_fn_deployment()[1]
            num_hosts = params["context"].num_hosts
        else:
            current_host = 0
            num_hosts = 1
        dataset = self.make_source_dataset(current_host, num_hosts)
        dataset = dataset.apply(
            tf.data.experimental.map_and_batch(self.dataset_parser, batch_size=batch_size, num_parallel_batches=8, drop_remainder=True)
        )
        if self.transpose_input:
            dataset = dataset.map(lambda images, labels: (tf.transpose(images, [1, 2, 3, 0]), labels), num_parallel_calls=8)
        dataset = dataset.map(functools.partial(self.set_shapes, batch_size))
        return dataset.prefetch(tf.data.experimental.AUTOTUNE)


def resnet_model_fn(features, labels, mode, params):
    if params["transpose_input"] and mode != tf_estimator.ModeKeys.PREDICT:
        image_size = tf.sqrt(tf.shape(features)[0] / (3 * tf.shape(labels)[0]))
        features = tf.reshape(features, [image_size, image_size, 3, -1])
        features = tf.transpose(features, [3, 0, 1, 2])  # HWCN to NHWC
    features -= tf.constant(MEAN_RGB, shape=[1, 1, 3], dtype=features.dtype)
    features /= tf.constant(STDDEV_RGB, shape=[1, 1, 3], dtype=features.dtype)
    net = tf.layers.conv2d(features, 8, 3, strides=2, activation=tf.nn.relu)
    logits = tf.layers.dense(tf.reduce_mean(net, axis=[1, 2]), 10)
    one_hot_labels = tf.one_hot(labels, 10)
    loss = tf.losses.softmax_cross_entropy(logits=logits, onehot_labels=one_hot_labels)
    optimizer = tf.train.MomentumOptimizer(learning_rate=0.1, momentum=0.9, use_nesterov=True)
    optimizer = tf.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.train.get_global_step())
    return tf_estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)


def main(unused_argv):
    tpu_cluster_resolver = tf.distribute.cluster_resolver.TPUClusterResolver(FLAGS.tpu)
    config = tf_estimator.tpu.RunConfig(
        cluster=tpu_cluster_resolver,
        model_dir=FLAGS.model_dir,
        save_checkpoints_steps=max(5000, FLAGS.iterations_per_loop),
        tpu_config=tf_estimator.tpu.TPUConfig(
            iterations_per_loop=FLAGS.iterations_per_loop,
            num_shards=FLAGS.num_cores,
            per_host_input_for_training=tf_estimator.tpu.InputPipelineConfig.PER_HOST_V2,
        ),
    )
    resnet_classifier = tf_estimator.tpu.TPUEstimator(
        use_tpu=True,
        model_fn=resnet_model_fn,
        config=config,
        params={"transpose_input": FLAGS.transpose_input},
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
    )
    imagenet_train, imagenet_eval = [
        ImageNetInput(is_training=is_training, transpose_input=FLAGS.transpose_input, image_size=FLAGS.image_size)
        for is_training in [True, False]
    ]
    resnet_classifier.train(input_fn=imagenet_train.input_fn, max_steps=FLAGS.train_steps)
    eval_results = resnet_classifier.evaluate(input_fn=imagenet_eval.input_fn, steps=FLAGS.eval_steps)
    print(json.dumps({
        "script": "resnet_transpose",
        "global_step": int(eval_results["global_step"]),
        "input_fn_batch": SEEN["input_fn_batch"],
    }), flush=True)


if __name__ == "__main__":
    app.run(main)

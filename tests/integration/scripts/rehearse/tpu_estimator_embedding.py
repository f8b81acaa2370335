"""TPU embeddings through TPUEstimator, as the TensorFlow 1.x TPU embedding guides wrote them (run on TensorFlow
2.15 with tensorflow-estimator): a categorical feature in tf.tpu.experimental.embedding_column, an
EmbeddingConfigSpec with Adagrad for the table, TPUEstimator(use_tpu=True) on the TPU found by
TPUClusterResolver(tpu=''), train(max_steps). Generated data, nothing downloaded. Nothing here knows about tpuctl.

Ends with one JSON line: the step it trained to.
"""

import json
import os

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()

VOCABULARY, BATCH = 100, 64
ids_column = tf.feature_column.categorical_column_with_identity("item_id", num_buckets=VOCABULARY)
item_embedding = tf.tpu.experimental.embedding_column(ids_column, dimension=8, combiner="mean")


def input_fn(params):
    rng = np.random.RandomState(0)
    ids = rng.randint(0, VOCABULARY, size=(1024, 1)).astype(np.int64)
    labels = (ids[:, 0] % 2).astype(np.int32)
    dataset = tf.data.Dataset.from_tensor_slices(({"item_id": ids}, labels)).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    embedded = tf.feature_column.input_layer(features, [item_embedding])
    logits = tf.layers.dense(embedded, 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    optimizer = tf.tpu.CrossShardOptimizer(tf.train.AdagradOptimizer(learning_rate=0.1))
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)


resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
run_config = tf.estimator.tpu.RunConfig(
    cluster=resolver,
    model_dir=os.environ["TPUCTL_MODEL_DIR"],
    tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=5),
)
estimator = tf.estimator.tpu.TPUEstimator(
    model_fn=model_fn,
    config=run_config,
    use_tpu=True,
    train_batch_size=BATCH,
    embedding_config_spec=tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=[item_embedding],
        optimization_parameters=tf.tpu.experimental.AdagradParameters(learning_rate=0.1),
    ),
)
estimator.train(input_fn=input_fn, max_steps=10)
print(json.dumps({"script": "tpu_estimator_embedding", "global_step": int(estimator.get_variable_value("global_step"))}), flush=True)

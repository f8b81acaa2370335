"""TPU embeddings the way tensorflow-recommenders' layer picks them (tfrs/layers/embedding/tpu_embedding_layer.py):
under a TPUStrategy it reads `strategy.extended.tpu_hardware_feature.embedding_feature` and builds the mid-level API
for that hardware: TPUEmbeddingV0 on a TPU without an embedding accelerator (lookups in the step, on the
TensorCores), TPUEmbedding on a V1 accelerator (enqueue before the step, dequeue and apply_gradients in it),
TPUEmbeddingV2 on a V2 one. The layer below is that choice and those calls, reduced to what this model uses;
the training loop is the one TPUEmbeddingV0's own documentation writes (tf.tpu.experimental.embedding). Run
with tf.keras being tf-keras, as tensorflow-recommenders needs. Nothing here knows about tpuctl.

Ends with one JSON line: the mid-level API the layer chose, and which of its tables training moved.
"""

import json

import tensorflow as tf

EmbeddingFeature = tf.tpu.experimental.HardwareFeature.EmbeddingFeature
STEPS, PER_REPLICA_BATCH, USERS, ITEMS = 4, 8, 64, 32

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync


class TPUEmbedding(tf.keras.layers.Layer):
    """tfrs.layers.embedding.TPUEmbedding's choice of mid-level API, and its calls into it."""

    def __init__(self, feature_config, optimizer):
        super().__init__()
        self._feature_config = feature_config
        self._strategy = tf.distribute.get_strategy()
        self._using_tpu = isinstance(self._strategy, (tf.distribute.experimental.TPUStrategy, tf.distribute.TPUStrategy))
        self._embedding_feature = self._strategy.extended.tpu_hardware_feature.embedding_feature if self._using_tpu else None
        if not self._using_tpu or self._embedding_feature is None:
            self._tpu_embedding = tf.tpu.experimental.embedding.TPUEmbeddingForServing(feature_config, optimizer)
        elif self._embedding_feature == EmbeddingFeature.UNSUPPORTED:
            self._tpu_embedding = tf.tpu.experimental.embedding.TPUEmbeddingV0(feature_config, optimizer)
        elif self._embedding_feature == EmbeddingFeature.V1:
            self._tpu_embedding = tf.tpu.experimental.embedding.TPUEmbedding(feature_config, optimizer)
        else:
            self._tpu_embedding = tf.tpu.experimental.embedding.TPUEmbeddingV2(feature_config, optimizer)

    def build(self, input_shape):
        super().build(input_shape)
        if self._embedding_feature in (EmbeddingFeature.V1, EmbeddingFeature.V2):
            self._tpu_embedding.build(per_replica_input_shapes=input_shape)
            self._dummy = self.add_weight(name="tpu_embedding_helper_dummy", shape=(1,), initializer="zeros")
        else:
            self._tpu_embedding.build()
            # On the TensorCores the tables are the layer's own trainable variables.
            self._tables = list(self._tpu_embedding.embedding_tables.values())

    def call(self, features):
        if self._embedding_feature not in (EmbeddingFeature.V1, EmbeddingFeature.V2):
            return self._tpu_embedding(features)
        self._tpu_embedding.enqueue(features, training=True)

        @tf.custom_gradient
        def gradient_trap(dummy):
            activations = self._tpu_embedding.dequeue()

            def grad(*grad_wrt_activations):
                self._tpu_embedding.apply_gradients(tf.nest.pack_sequence_as(self._feature_config, grad_wrt_activations))
                return tf.zeros_like(dummy)

            return tf.nest.flatten(activations), grad

        return tf.nest.pack_sequence_as(self._feature_config, gradient_trap(self._dummy))


# Tables that start at zero: after training, each one that moved was trained.
users = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=USERS, dim=8, initializer=tf.zeros_initializer(), name="users")
items = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=ITEMS, dim=8, initializer=tf.zeros_initializer(), name="items")
feature_config = {
    "user": tf.tpu.experimental.embedding.FeatureConfig(table=users),
    "item": tf.tpu.experimental.embedding.FeatureConfig(table=items),
}

with strategy.scope():
    embedding = TPUEmbedding(feature_config, tf.tpu.experimental.embedding.SGD(0.1))
    dense = tf.keras.layers.Dense(1)
    optimizer = tf.keras.optimizers.SGD(0.1)


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(global_batch)
    ids = {
        "user": tf.random.stateless_uniform((1024,), seed=(1, 2), maxval=USERS, dtype=tf.int32),
        "item": tf.random.stateless_uniform((1024,), seed=(3, 4), maxval=ITEMS, dtype=tf.int32),
    }
    labels = tf.cast((ids["user"] + ids["item"]) % 2, tf.float32)
    return tf.data.Dataset.from_tensor_slices((ids, labels)).repeat().batch(batch, drop_remainder=True)


iterator = iter(
    strategy.distribute_datasets_from_function(dataset_fn, options=tf.distribute.InputOptions(experimental_fetch_to_device=False))
)


@tf.function
def training_step(iterator, num_steps):
    def tpu_step(features, labels):
        with tf.GradientTape() as tape:
            activations = embedding(features)
            logits = dense(tf.concat([activations["user"], activations["item"]], axis=1))
            per_example = tf.keras.losses.binary_crossentropy(labels[:, None], logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        variables = embedding.trainable_variables + dense.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))

    for _ in tf.range(num_steps):
        strategy.run(tpu_step, args=next(iterator))


training_step(iterator, STEPS)
tables = embedding._tpu_embedding.embedding_tables
print(json.dumps({
    "script": "tfrs_embedding",
    "mid_level_api": type(embedding._tpu_embedding).__name__,
    "tables_moved": {config.name: bool(tf.reduce_any(table != 0)) for config, table in tables.items()},
}), flush=True)

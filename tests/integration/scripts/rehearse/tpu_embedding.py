"""TPU embeddings as the TPUEmbedding API documentation (tf.tpu.experimental.embedding.TPUEmbedding) writes a
training loop: feature and table configs, the object built in the strategy's scope, a dataset distributed with
experimental_fetch_to_device=False, enqueue before strategy.run, dequeue and apply_gradients inside it."""

import json

import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)

table_config_one = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=64, dim=8, name="table_one")
table_config_two = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=32, dim=4, name="table_two")
feature_config = {
    "feature_one": tf.tpu.experimental.embedding.FeatureConfig(table=table_config_one),
    "feature_two": tf.tpu.experimental.embedding.FeatureConfig(table=table_config_two),
}
global_batch = 4 * strategy.num_replicas_in_sync

with strategy.scope():
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(
        feature_config=feature_config, optimizer=tf.tpu.experimental.embedding.SGD(0.1)
    )
    model = tf.keras.Sequential([tf.keras.Input(shape=(12,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(global_batch)
    ids = {
        "feature_one": tf.random.stateless_uniform((256, 1), seed=(1, 2), maxval=64, dtype=tf.int32),
        "feature_two": tf.random.stateless_uniform((256, 1), seed=(3, 4), maxval=32, dtype=tf.int32),
    }
    labels = tf.cast(ids["feature_one"] % 2, tf.float32)
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels)).repeat()
    return dataset.batch(batch, drop_remainder=True)


distributed_dataset = strategy.distribute_datasets_from_function(
    dataset_fn=dataset_fn, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
)
dataset_iterator = iter(distributed_dataset)


@tf.function
def training_step(dataset_iterator, num_steps):
    def tpu_step(labels):
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            features = tf.concat([tf.reshape(activations[name], (-1, dim)) for name, dim in (("feature_one", 8), ("feature_two", 4))], 1)
            logits = model(features)
            loss = tf.nn.compute_average_loss(tf.keras.losses.binary_crossentropy(labels, logits, from_logits=True), global_batch_size=global_batch)
        embedding_gradients, model_gradients = tape.gradient(loss, [activations, model.trainable_variables])
        embedding.apply_gradients(embedding_gradients)
        optimizer.apply_gradients(zip(model_gradients, model.trainable_variables, strict=True))

    for _ in tf.range(num_steps):
        embedding_features, labels = next(dataset_iterator)
        embedding.enqueue(embedding_features, training=True)
        strategy.run(tpu_step, args=(labels,))


training_step(dataset_iterator, 4)
print(json.dumps({"script": "tpu_embedding", "trained": True}))

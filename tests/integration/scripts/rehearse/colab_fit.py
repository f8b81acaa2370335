"""Keras fit on a TPU as the Cloud TPU Colab notebooks wrote it: the TPU's address read unguarded from
COLAB_TPU_ADDR, connect, initialise, its own TPUStrategy, a batch sized by the replica count,
steps_per_execution, and validation data each epoch. Prints one JSON line of what the script saw."""

import json
import os
import sys

import numpy as np
import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="grpc://" + os.environ["COLAB_TPU_ADDR"])
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
print("All devices: ", tf.config.list_logical_devices("TPU"))
strategy = tf.distribute.TPUStrategy(resolver)


def get_dataset(batch_size):
    rng = np.random.default_rng(0)
    x = rng.random((256, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 256)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(batch_size, drop_remainder=True)


def create_model():
    return tf.keras.Sequential(
        [tf.keras.Input(shape=(28, 28, 1)), tf.keras.layers.Conv2D(8, 3, activation="relu"), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)]
    )


batch_size = 8 * strategy.num_replicas_in_sync
with strategy.scope():
    model = create_model()
    model.compile(
        optimizer="adam",
        steps_per_execution=4,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["sparse_categorical_accuracy"],
    )
history = model.fit(get_dataset(batch_size), epochs=2, validation_data=get_dataset(batch_size), verbose=2)
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "is_tpu_strategy": isinstance(strategy, tf.distribute.TPUStrategy),
    "tpu_devices": len(tf.config.list_logical_devices("TPU")),
    "master": resolver.master(),
    "epochs": len(history.history["loss"]),
    "validated": len(history.history["val_loss"]),
    "variables_mirrored": all(
        len(strategy.experimental_local_results(getattr(v, "value", v))) == strategy.num_replicas_in_sync for v in model.trainable_variables
    ),
}))

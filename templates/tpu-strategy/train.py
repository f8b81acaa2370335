"""Train on a Cloud TPU with Keras, the script building its own TPUStrategy as the Cloud TPU guides do.

    tpuctl launch train.py --rehearse v2-8 --model-dir /tmp/tpu-strategy   # on this CPU first
    tpuctl launch train.py --tpu my-tpu --model-dir gs://BUCKET/tpu-strategy

The input pipeline follows the TPU guides: tf.data on the host, static shapes (every batch
full: drop_remainder=True), prefetch, and steps_per_execution so that one call runs many
steps on the TPU. The global batch is the per-replica batch times the TPU's replicas.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import tensorflow as tf

FEATURES = 16
CLASSES = 4


def tpu_resolver() -> tf.distribute.cluster_resolver.TPUClusterResolver:
    """The TPU named by TPU_NAME, else the TPU VM this runs on ("local")."""
    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME", "local"))


def make_dataset(args: argparse.Namespace, global_batch: int) -> tf.data.Dataset:
    if args.tfrecords:
        spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

        def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            example = tf.io.parse_single_example(record, spec)
            return example["x"], tf.cast(example["y"], tf.int32)

        files = tf.data.Dataset.list_files(args.tfrecords, shuffle=False)
        data = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:  # generated: points labelled by a fixed random linear map, no download
        rng = np.random.default_rng(args.seed)
        x = rng.normal(size=(args.examples, FEATURES)).astype("float32")
        y = np.argmax(x @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype("int32")
        data = tf.data.Dataset.from_tensor_slices((x, y))
    data = data.cache().shuffle(10_000, seed=args.seed)
    # A TPU compiles one program for one shape: every batch full, the partial last one dropped.
    return data.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=os.environ.get("TPUCTL_MODEL_DIR", "model-dir"), help="default: tpuctl's --model-dir")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--per-replica-batch", type=int, default=16)
    parser.add_argument("--examples", type=int, default=4096, help="generated examples (without --tfrecords)")
    parser.add_argument("--tfrecords", metavar="GLOB", help="train on these TFRecord files (gs:// on a TPU) instead of generated data")
    parser.add_argument("--steps-per-execution", type=int, default=8, help="steps the TPU runs per call from the host")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    resolver = tpu_resolver()
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    global_batch = args.per_replica_batch * strategy.num_replicas_in_sync
    print(f"{strategy.num_replicas_in_sync} replicas, global batch {global_batch} ({args.per_replica_batch} per replica)")

    tf.keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(CLASSES)]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(0.01),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["sparse_categorical_accuracy"],
            steps_per_execution=args.steps_per_execution,  # amortises the host's per-step overhead over many TPU steps
        )
    callbacks = [
        # A TPU VM's preemption takes the node down: save every epoch, and a relaunch continues after the last one.
        tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(args.model_dir, "backup")),
        tf.keras.callbacks.TensorBoard(log_dir=os.path.join(args.model_dir, "logs")),
        tf.keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, "checkpoints", "epoch-{epoch:02d}.weights.h5"), save_weights_only=True),
    ]
    history = model.fit(make_dataset(args, global_batch), epochs=args.epochs, callbacks=callbacks, verbose=2)
    if history.epoch:
        print(f"trained epochs {history.epoch[0] + 1}-{history.epoch[-1] + 1} of {args.epochs}: loss {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()

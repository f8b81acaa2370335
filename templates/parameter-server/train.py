"""Train with ParameterServerStrategy: variables on the parameter servers, steps on the workers, Keras fit from the chief.

    tpuctl launch train.py --strategy parameter-server --workers 2 --ps 1 --model-dir /tmp/parameter-server

tpuctl starts the chief (the coordinator, which runs this script), the workers and the
parameter servers, each with its TF_CONFIG; workers and ps only serve. The script builds its
own strategy from TF_CONFIG with a variable partitioner, as TensorFlow's parameter-server
tutorial does. The coordinator sends steps to whichever worker is free, and a worker that
fails is replaced by the others; BackupAndRestore lets a restarted chief continue.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import tensorflow as tf

FEATURES = 16
CLASSES = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=os.environ.get("TPUCTL_MODEL_DIR", "model-dir"), help="default: tpuctl's --model-dir")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=20, help="required: the dataset repeats and has no end")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--examples", type=int, default=4096, help="generated examples (without --tfrecords)")
    parser.add_argument("--tfrecords", metavar="GLOB", help="train on these TFRecord files instead of generated data")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        # Run without tpuctl (TF_CONFIG set by hand), workers and ps serve until the chief is done.
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc", start=True)
        server.join()
    # Large variables (embeddings) are split over the parameter servers in shards of at least 256 KiB.
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=len(resolver.cluster_spec().job_tasks("ps")))
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Runs on each worker: tf.data reads and batches there, not on the chief.
        batch = input_context.get_per_replica_batch_size(args.global_batch)
        if args.tfrecords:
            spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
            files = tf.data.Dataset.list_files(args.tfrecords, shuffle=False)
            data = tf.data.TFRecordDataset(files).map(lambda r: (tf.io.parse_single_example(r, spec)["x"], tf.io.parse_single_example(r, spec)["y"]))
        else:  # generated: points labelled by a fixed random linear map, no download
            rng = np.random.default_rng(args.seed)
            x = rng.normal(size=(args.examples, FEATURES)).astype("float32")
            data = tf.data.Dataset.from_tensor_slices((x, np.argmax(x @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype("int64")))
        data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return data.shuffle(10_000).repeat().batch(batch, drop_remainder=True).prefetch(2)

    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(CLASSES)]
        )
        model.compile(
            optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=0.1),  # ParameterServerStrategy needs the legacy optimizers
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=5,  # fewer round trips from the chief to the workers
        )
    callbacks = [
        tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(args.model_dir, "backup")),
        tf.keras.callbacks.TensorBoard(log_dir=os.path.join(args.model_dir, "logs")),
        tf.keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, "checkpoints", "epoch-{epoch:02d}"), save_weights_only=True),
    ]
    history = model.fit(
        tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=2
    )
    if history.epoch:
        print(f"trained epochs {history.epoch[0] + 1}-{history.epoch[-1] + 1} of {args.epochs} on "
              f"{len(resolver.cluster_spec().job_tasks('worker'))} worker(s): loss {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()

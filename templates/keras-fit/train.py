"""Train a Keras model with `fit` on N workers or a TPU, the distribution strategy from tpuctl.

    tpuctl launch train.py --workers 2 --model-dir /tmp/keras-fit

tpuctl builds the strategy for where the workers run (MultiWorkerMirroredStrategy for
--workers 2, TPUStrategy on a TPU VM) and `runtime.strategy()` returns it; outside tpuctl
(`python train.py`) it is TensorFlow's default strategy. Everything is written to the
model dir: checkpoints/ (weights per epoch), logs/ (TensorBoard), backup/ (where a restarted
or preempted run resumes from).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import tensorflow as tf

from tpuctl import runtime

FEATURES = 16
CLASSES = 4


def generated_dataset(examples: int, seed: int) -> tf.data.Dataset:
    """Points labelled by a fixed random linear map: learnable, no download, the same on every worker."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y))


def tfrecord_dataset(pattern: str) -> tf.data.Dataset:
    """tf.train.Examples with `x` (FEATURES floats) and `y` (an int64 class), from the files `pattern` matches."""
    spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, spec)
        return example["x"], example["y"]

    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    return files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=runtime.model_dir("model-dir"), help="default: tpuctl's --model-dir")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--per-replica-batch", type=int, default=32)
    parser.add_argument("--examples", type=int, default=4096, help="generated examples (without --tfrecords)")
    parser.add_argument("--tfrecords", metavar="GLOB", help="train on these TFRecord files instead of generated data")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    strategy = runtime.strategy()
    # The dataset is batched with the global batch; the strategy gives each replica its share.
    global_batch = runtime.global_batch_size(args.per_replica_batch)
    data = tfrecord_dataset(args.tfrecords) if args.tfrecords else generated_dataset(args.examples, args.seed)
    dataset = data.shuffle(10_000, seed=args.seed).batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    tf.keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = build_model()
    callbacks = [
        # Saved every epoch; a restarted run (a failure under --max-restarts, a preemption) continues after
        # the last finished epoch. Each worker writes its own backup; the callbacks keep the chief's.
        tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(args.model_dir, "backup")),
        tf.keras.callbacks.TensorBoard(log_dir=os.path.join(args.model_dir, "logs")),
        tf.keras.callbacks.ModelCheckpoint(
            os.path.join(args.model_dir, "checkpoints", "epoch-{epoch:02d}.weights.h5"), save_weights_only=True
        ),
    ]
    history = model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=2)
    if runtime.is_chief() and history.epoch:
        print(f"trained epochs {history.epoch[0] + 1}-{history.epoch[-1] + 1} of {args.epochs} on {strategy.num_replicas_in_sync} "
              f"replica(s), global batch {global_batch}: loss {history.history['loss'][-1]:.4f}; model dir {args.model_dir}")


if __name__ == "__main__":
    main()

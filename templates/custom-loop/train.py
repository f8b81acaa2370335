"""Train with a custom loop: `strategy.run` per step, input sharded with `distribute_datasets_from_function`.

    tpuctl launch train.py --workers 2 --model-dir /tmp/custom-loop

Each worker builds its own input pipeline from `input_context` (its shard of the files or
examples, batched with the per-replica size); the loss is averaged over the global batch.
A CheckpointManager saves every --checkpoint-every steps into the model dir and a restarted
run resumes from the latest; on a preemption notice (SIGTERM) every worker saves at the same
step and exits 42, which tpuctl restarts. Each step is marked for the profiler.
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


def parse_example(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """A tf.train.Example with `x` (FEATURES floats) and `y` (an int64 class)."""
    spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
    example = tf.io.parse_single_example(record, spec)
    return example["x"], example["y"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=runtime.model_dir("model-dir"), help="default: tpuctl's --model-dir")
    parser.add_argument("--steps", type=int, default=200, help="training steps in all (a restart continues the count)")
    parser.add_argument("--per-replica-batch", type=int, default=32)
    parser.add_argument("--examples", type=int, default=4096, help="generated examples (without --tfrecords)")
    parser.add_argument("--tfrecords", metavar="GLOB", help="train on these TFRecord files instead of generated data")
    parser.add_argument("--checkpoint-every", type=int, default=50, metavar="STEPS")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fail-once-at", type=int, metavar="STEP", help="try a restart: the first attempt fails after STEP")
    args = parser.parse_args()

    strategy = runtime.strategy()
    global_batch = args.per_replica_batch * strategy.num_replicas_in_sync

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Runs once per input pipeline (one per worker): read only this pipeline's share, batch per replica.
        batch = input_context.get_per_replica_batch_size(global_batch)
        if args.tfrecords:
            files = tf.data.Dataset.list_files(args.tfrecords, shuffle=False)
            files = files.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            data = files.interleave(tf.data.TFRecordDataset).map(parse_example, num_parallel_calls=tf.data.AUTOTUNE)
        else:
            data = generated_dataset(args.examples, args.seed)
            data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        data = data.shuffle(10_000, seed=args.seed).repeat()
        return data.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)  # static shapes: every batch full

    dataset = strategy.distribute_datasets_from_function(dataset_fn)

    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(CLASSES)]
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")  # saved: where a restart continues
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    # Every worker saves (the save is collective); only the chief's files are the model dir's.
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(runtime.write_dir(args.model_dir), "checkpoints"), max_to_keep=3)
    # Restores the latest checkpoint; on SIGTERM every worker saves at the same step and exits 42.
    handler = runtime.preemption_handler(manager)
    writer = tf.summary.create_file_writer(os.path.join(args.model_dir, "logs")) if runtime.is_chief() else tf.summary.create_noop_writer()

    @tf.function
    def train_step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        def step_fn(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            features, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                # Average over the global batch, not the replica's: the gradients are summed across replicas.
                loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            train_accuracy.update_state(labels, logits)
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    print(f"worker {runtime.worker_index()}: {'resuming at' if step.numpy() else 'starting at'} step {int(step.numpy()) + 1}/{args.steps}, "
          f"global batch {global_batch} ({args.per_replica_batch} per replica x {strategy.num_replicas_in_sync})", flush=True)
    iterator = iter(dataset)
    with writer.as_default():
        while step.numpy() < args.steps:
            number = int(step.numpy())
            with tf.profiler.experimental.Trace("train", step_num=number, _r=1):  # a step marker for the profiler
                loss = handler.run(train_step, iterator)
            step.assign_add(1)
            tf.summary.scalar("loss", loss, step=step)
            if step.numpy() % args.checkpoint_every == 0 or step.numpy() == args.steps:
                tf.summary.scalar("accuracy", train_accuracy.result(), step=step)
                manager.save(checkpoint_number=step)
                print(f"step {int(step.numpy())}: loss {float(loss):.4f}, accuracy {float(train_accuracy.result()):.3f}", flush=True)
                train_accuracy.reset_state()
            if args.fail_once_at == step.numpy() and os.environ.get("TPUCTL_ATTEMPT", "1") == "1":
                raise SystemExit(f"failing once after step {args.fail_once_at}, as --fail-once-at asked")
    print(f"trained {args.steps} steps; checkpoints in {manager.directory}", flush=True)


if __name__ == "__main__":
    main()

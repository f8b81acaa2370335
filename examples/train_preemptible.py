"""Train with a custom loop that survives preemptions: on SIGTERM every worker saves, exits 42, and resumes.

The shape of TensorFlow's failure-handling tutorial (a custom training loop
under MultiWorkerMirroredStrategy with a PreemptionCheckpointHandler), with the
handler from `tpuctl.runtime.preemption_handler`. Run it as

    tpuctl launch examples/train_preemptible.py --workers 2 --model-dir DIR -- --step-time 0.5

then send SIGTERM to a worker (its pid is on its first line), as a preempted
VM's shutdown would: both workers save at the same step and exit 42, tpuctl
restarts them (--max-preemptions), and training goes on from the epoch and step
it had reached. `python examples/train_preemptible.py` runs it on one device;
SIGTERM then saves and exits 42, and running it again resumes.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import tensorflow as tf

from tpuctl import runtime

FEATURES = 16
CLASSES = 4


def make_data(examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian points labelled by a fixed random linear map: learnable, and the same on every worker."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    mapping = rng.normal(size=(FEATURES, CLASSES)).astype("float32")
    y = np.argmax(x @ mapping, axis=1).astype("int32")
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=runtime.model_dir("model-dir"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--examples", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--step-time", type=float, default=0.0, metavar="SECONDS",
                        help="pause after each step, a stand-in for a bigger model (time to send SIGTERM by hand)")
    args = parser.parse_args()

    strategy = runtime.strategy()  # tpuctl's (MultiWorkerMirrored for --workers 2), or the default one
    steps_per_epoch = args.examples // args.batch_size
    x, y = make_data(args.examples, args.seed)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(args.examples, seed=args.seed).batch(args.batch_size, drop_remainder=True)

    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(CLASSES)]
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
        # Where training is, saved with the model: a restart continues from here.
        epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch, step_in_epoch=step_in_epoch)
    # Restores the latest checkpoint now; on SIGTERM, every worker saves at the same step and exits 42.
    handler = runtime.preemption_handler(checkpoint, os.path.join(args.model_dir, "preemption"))

    @tf.function
    def train_step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        def step_fn(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            features, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=args.batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    start_epoch, start_step = int(epoch.numpy()), int(step_in_epoch.numpy())
    where = f"epoch {start_epoch + 1}/{args.epochs}, step {start_step + 1}/{steps_per_epoch}"
    print(f"worker {runtime.worker_index()} (pid {os.getpid()}): "
          f"{'resuming at' if start_epoch or start_step else 'starting at'} {where}", flush=True)

    while epoch.numpy() < args.epochs:
        # The same batches in every epoch; a resumed epoch skips those already trained on.
        iterator = iter(strategy.experimental_distribute_dataset(dataset.skip(int(step_in_epoch.numpy()))))
        total, steps = 0.0, 0
        while step_in_epoch.numpy() < steps_per_epoch:
            total += float(handler.run(train_step, iterator))
            steps += 1
            step_in_epoch.assign_add(1)
            if args.step_time:
                time.sleep(args.step_time)
        print(f"epoch {int(epoch.numpy()) + 1}/{args.epochs}: loss {total / max(steps, 1):.4f} ({steps} steps)", flush=True)
        epoch.assign_add(1)
        step_in_epoch.assign(0)
    print(f"trained {args.epochs} epochs with {strategy.num_replicas_in_sync} replica(s)", flush=True)


if __name__ == "__main__":
    main()

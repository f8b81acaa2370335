"""Train a small classifier on data it generates, with checkpoints, summaries and resume.

A plain single-device Keras script: it builds no strategy of its own. Run it as
`python examples/train_keras.py` on one device, or as
`tpuctl launch examples/train_keras.py --workers 2 --model-dir DIR` on two
workers, where tpuctl runs it inside MultiWorkerMirroredStrategy's scope.

Everything lands in the model dir: TensorBoard summaries in logs/, per-epoch
weights in checkpoints/, and BackupAndRestore state in backup/, so a restarted
run (`--max-restarts`) continues from its last finished epoch instead of epoch 1.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import tensorflow as tf

FEATURES = 16
CLASSES = 4


def make_data(examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian points labelled by a fixed random linear map: learnable, and the same on every worker."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    mapping = rng.normal(size=(FEATURES, CLASSES)).astype("float32")
    y = np.argmax(x @ mapping, axis=1).astype("int32")
    return x, y


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(FEATURES,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class SimulatedPreemption(tf.keras.callbacks.Callback):
    """Kill the last worker once at the end of an epoch, to watch a restart resume."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        first_attempt = os.environ.get("TPUCTL_ATTEMPT", "1") == "1"
        last_worker = os.environ.get("TPUCTL_WORKER_INDEX", "0") == str(int(os.environ.get("TPUCTL_NUM_WORKERS", "1")) - 1)
        if first_attempt and last_worker and epoch + 1 == self.epoch:
            print(f"simulating a preemption after epoch {self.epoch}", flush=True)
            os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=os.environ.get("TPUCTL_MODEL_DIR", "model-dir"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--simulate-preemption", type=int, metavar="EPOCH", help="on the first attempt, the last worker exits after EPOCH"
    )
    args = parser.parse_args()

    tf.keras.utils.set_random_seed(args.seed)
    x, y = make_data(args.examples, args.seed)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(args.examples, seed=args.seed).batch(args.batch_size)
    model = build_model()

    callbacks: list[tf.keras.callbacks.Callback] = [
        tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(args.model_dir, "backup")),
        tf.keras.callbacks.TensorBoard(log_dir=os.path.join(args.model_dir, "logs")),
        tf.keras.callbacks.ModelCheckpoint(
            os.path.join(args.model_dir, "checkpoints", "epoch-{epoch:02d}.weights.h5"), save_weights_only=True
        ),
    ]
    if args.simulate_preemption:
        callbacks.append(SimulatedPreemption(args.simulate_preemption))
    history = model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=2)

    if os.environ.get("TPUCTL_WORKER_INDEX", "0") != "0":
        return  # one summary per run, from the chief
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if history.epoch:
        loss, accuracy = history.history["loss"][-1], history.history["accuracy"][-1]
        print(f"trained epochs {history.epoch[0] + 1}-{history.epoch[-1] + 1} of {args.epochs} on {args.examples} examples "
              f"with {replicas} replica(s): loss {loss:.4f}, accuracy {accuracy:.3f}")
    print(f"checkpoints: {os.path.join(args.model_dir, 'checkpoints')}; summaries: {os.path.join(args.model_dir, 'logs')}")


if __name__ == "__main__":
    main()

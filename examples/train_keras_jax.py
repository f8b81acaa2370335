"""Keras 3 on JAX: a DataParallel `fit` over every device of every process, on data it generates.

    tpuctl launch examples/train_keras_jax.py --workers 2 --model-dir /tmp/keras-jax
    python examples/train_keras_jax.py                 # one process, every local device

Written the way keras-io's "Distributed training with Keras" guide writes it
(https://keras.io/guides/distribution/): the backend chosen before Keras is
imported, `keras.distribution.initialize()` before any computation (under
`tpuctl launch` it finds the other processes in the KERAS_DISTRIBUTION_*
variables tpuctl writes, docs/jax.md), and one `DataParallel` mesh over
`keras.distribution.list_devices()`, which are the devices of every process.

Each process feeds its own share of every global batch (`auto_shard_dataset=False`:
the arrays given to `fit` are this process's, and Keras joins them into the
global batch with `jax.make_array_from_process_local_data`). The shares are cut
so that global batch k holds the same rows whatever the process count, so N
processes train as one process does on the same global batch. At the end each
process prints a digest of its weights: every process of a run prints the same.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # before `import keras`: Keras reads it once, when it is first imported

import argparse
import hashlib

import jax
import keras
import numpy as np

FEATURES = 16
CLASSES = 4


def join_the_cluster() -> None:
    """`keras.distribution.initialize()` where there is a cluster: under `tpuctl launch` (its variables, or a TPU
    slice whose hosts JAX finds itself); a plain `python` run is one process with nothing to join."""
    if "KERAS_DISTRIBUTION_JOB_ADDRESSES" in os.environ or int(os.environ.get("TPUCTL_NUM_WORKERS", "1")) > 1:
        keras.distribution.initialize()


def process_share(examples: int, global_batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """This process's rows of every global batch: the same generated data on every process, cut per batch."""
    processes, index = jax.process_count(), jax.process_index()
    if global_batch % processes:
        raise SystemExit(f"--global-batch {global_batch} does not split over {processes} processes")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype("int32")
    steps = examples // global_batch  # whole batches only: one compiled step shape

    def cut(array: np.ndarray) -> np.ndarray:
        batches = array[: steps * global_batch].reshape(steps, processes, global_batch // processes, *array.shape[1:])
        return batches[:, index].reshape(-1, *array.shape[1:])

    return cut(x), cut(y)


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def weights_digest(model: keras.Model) -> str:
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()[:16]


class SimulatedPreemption(keras.callbacks.Callback):
    """On the first attempt, the last process exits after EPOCH (its backup saved): a restart resumes after it."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if os.environ.get("TPUCTL_ATTEMPT", "1") == "1" and jax.process_index() == jax.process_count() - 1 and epoch + 1 == self.epoch:
            print(f"simulating a preemption after epoch {self.epoch}", flush=True)
            os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=os.environ.get("TPUCTL_MODEL_DIR"), help="default: tpuctl's --model-dir; none: no checkpoints")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=64, help="split evenly over the processes")
    parser.add_argument("--examples", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--simulate-preemption", type=int, metavar="EPOCH", help="on the first attempt, the last process exits after EPOCH")
    args = parser.parse_args()

    join_the_cluster()
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    keras.utils.set_random_seed(args.seed)  # the same initial weights in every process
    x, y = process_share(args.examples, args.global_batch, args.seed)
    model = build_model()
    callbacks: list[keras.callbacks.Callback] = []
    process = jax.process_index()
    if args.model_dir:
        # Every process saves (saving reads the weights, a step every process takes together) into its own folder.
        own = "" if process == 0 else f"process-{process}"
        callbacks.append(keras.callbacks.BackupAndRestore(os.path.join(args.model_dir, "backup", f"process-{process}")))
        path = os.path.join(args.model_dir, "checkpoints", own, "epoch-{epoch:02d}.weights.h5")
        callbacks.append(keras.callbacks.ModelCheckpoint(path, save_weights_only=True))
    if args.simulate_preemption:
        callbacks.append(SimulatedPreemption(args.simulate_preemption))
    history = model.fit(x, y, batch_size=args.global_batch // jax.process_count(), epochs=args.epochs, shuffle=False, callbacks=callbacks, verbose=2)
    epochs = f"epochs {history.epoch[0] + 1}-{history.epoch[-1] + 1}" if history.epoch else "no epoch (all were done)"
    loss = f"loss {history.history['loss'][-1]:.6f}" if history.epoch else "no loss"
    here = f"{jax.local_device_count()} here, {jax.local_devices()[0].platform}"
    print(f"process {process} of {jax.process_count()}: {epochs} of {args.epochs} on {len(devices)} device(s) ({here}), "
          f"global batch {args.global_batch}: {loss}, weights {weights_digest(model)}")


if __name__ == "__main__":
    main()

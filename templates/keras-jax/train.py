"""Train a Keras 3 model on JAX with `fit` under DataParallel: N processes, N hosts or a TPU slice.

    tpuctl launch train.py --workers 2 --model-dir /tmp/keras-jax

Keras' distribution API, as keras-io's "Distributed training with Keras" guide
(https://keras.io/guides/distribution/) writes it: the backend chosen before
Keras is imported, `keras.distribution.initialize()` before any computation,
and one DataParallel mesh over the devices of every process. tpuctl starts one
process per host (or per --workers) and tells each where the others are
(KERAS_DISTRIBUTION_*; on a TPU VM slice JAX asks the metadata server itself).
Everything is written to the model dir: checkpoints/ (weights per epoch) and
backup/ (where a restarted or preempted run resumes from).
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # first: Keras reads it once, when it is first imported

import argparse

import jax
import keras
import numpy as np

FEATURES = 16
CLASSES = 4


def initialize() -> None:
    """Join the other processes, before any computation. Under `tpuctl launch` there is always a cluster to join
    (tpuctl's variables, or a TPU slice's hosts that JAX finds itself); plain `python train.py` is one process alone."""
    launched = "KERAS_DISTRIBUTION_JOB_ADDRESSES" in os.environ or int(os.environ.get("TPUCTL_NUM_WORKERS", "1")) > 1
    if launched:
        keras.distribution.initialize()


def generated_data(examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points labelled by a fixed random linear map: learnable, no download, the same in every process."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype("int32")
    return x, y


def this_process_share(array: np.ndarray, global_batch: int) -> np.ndarray:
    """This process's rows of each global batch, in process order: what `jax.make_array_from_process_local_data`
    (which Keras calls on every batch) puts together again. Whole batches only: one step shape, one compile."""
    processes, index = jax.process_count(), jax.process_index()
    steps = len(array) // global_batch
    per_process = global_batch // processes
    batches = array[: steps * global_batch].reshape(steps, processes, per_process, *array.shape[1:])
    return batches[:, index].reshape(steps * per_process, *array.shape[1:])


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=os.environ.get("TPUCTL_MODEL_DIR", "model-dir"), help="default: tpuctl's --model-dir")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--per-device-batch", type=int, default=32)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    initialize()
    # Every device of every process (a v5litepod-16's 4 hosts: 16 TPU chips), one data-parallel mesh over them.
    # auto_shard_dataset=False: the arrays given to fit are this process's own share, not the whole dataset.
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    global_batch = args.per_device_batch * len(devices)
    process, processes = jax.process_index(), jax.process_count()

    keras.utils.set_random_seed(args.seed)  # the same initial weights in every process
    x, y = generated_data(args.examples, args.seed)
    x, y = this_process_share(x, global_batch), this_process_share(y, global_batch)
    model = build_model()
    # Saving reads the model's weights, which every process does together: each process saves, into a folder
    # of its own (process 0's is the model dir's checkpoints/). A restarted run resumes after the last finished epoch.
    own = "" if process == 0 else f"process-{process}"
    callbacks = [
        keras.callbacks.BackupAndRestore(os.path.join(args.model_dir, "backup", f"process-{process}")),
        keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, "checkpoints", own, "epoch-{epoch:02d}.weights.h5"), save_weights_only=True),
    ]
    # shuffle=False: Keras would shuffle each process's share on its own, so that no global batch held what it should.
    history = model.fit(x, y, batch_size=global_batch // processes, epochs=args.epochs, shuffle=False, callbacks=callbacks, verbose=2)
    if process == 0 and history.epoch:
        print(f"trained epochs {history.epoch[0] + 1}-{history.epoch[-1] + 1} of {args.epochs} on {len(devices)} device(s) in "
              f"{processes} process(es), global batch {global_batch}: loss {history.history['loss'][-1]:.4f}; model dir {args.model_dir}")


if __name__ == "__main__":
    main()

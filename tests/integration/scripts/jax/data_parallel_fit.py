"""Keras 3 on JAX, data parallel over every process, as keras-io's distribution guide writes it.

Each process feeds its own share of every global batch (GLOBAL_BATCH rows, split by process), so N processes
train on exactly the batches one process would: the losses and weights must match a one-process run.
WEIGHTS_OUT: where each process saves its final weights (PROCESS.npz) and loss. CRASH_AT_EPOCH: attempt 1
fails once that epoch ends (after BackupAndRestore saved it), to see the next attempt resume there.
"""

import os
import sys

LOADED_FIRST = sorted(name for name in ("tensorflow", "keras", "jax") if name in sys.modules)  # before the script's own imports
os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

GLOBAL_BATCH = 32
EPOCHS = int(os.environ.get("EPOCHS", "3"))

keras.distribution.initialize()
process, processes = jax.process_index(), jax.process_count()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices(), auto_shard_dataset=False))
keras.utils.set_random_seed(7)

rng = np.random.default_rng(0)
x = rng.normal(size=(8 * GLOBAL_BATCH, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) + 0.1).astype("float32")
local = GLOBAL_BATCH // processes
rows = np.concatenate([np.arange(start + process * local, start + (process + 1) * local) for start in range(0, len(x), GLOBAL_BATCH)])

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")


class Epochs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.first = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first is None:
            self.first = epoch
            print(f"process {process}: first epoch {epoch}", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == int(os.environ.get("CRASH_AT_EPOCH", "0")) and os.environ.get("TPUCTL_ATTEMPT") == "1":
            raise RuntimeError(f"crash after epoch {epoch + 1}")


callbacks = [Epochs()]
if os.environ.get("TPUCTL_MODEL_DIR"):  # saved before Epochs may crash at the same epoch's end
    callbacks.insert(0, keras.callbacks.BackupAndRestore(os.path.join(os.environ["TPUCTL_MODEL_DIR"], f"backup-{process}")))
history = model.fit(x[rows], y[rows], batch_size=local, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
loss = history.history["loss"][-1]
print(f"process {process} of {processes}: backend {keras.backend.backend()}, loaded first {LOADED_FIRST}, loss {loss:.7f}", flush=True)
if os.environ.get("WEIGHTS_OUT"):
    np.savez(os.path.join(os.environ["WEIGHTS_OUT"], f"{process}.npz"), *model.get_weights(), loss=loss)

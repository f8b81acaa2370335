"""Keras 3 on JAX as keras-io's distribution guide writes it: `keras.distribution.initialize()`, DataParallel over
every process's devices, each process feeding its own shard; a fit with TensorBoard, BackupAndRestore and
ModelCheckpoint (process 0 writes MODEL_DIR, the others MODEL_DIR/workertemp_<i>), then `model.save`.

usage: jax_fit.py MODEL_DIR OUT SECONDS [PAUSE]. Each process writes OUT/ready-<index> after its third batch (of
its last attempt, below) and
trains until OUT/stop exists (at most SECONDS), resting PAUSE seconds (default 0.05) after each batch in
`rest_between_steps`, so that a run kept for a test module costs the cores little and its stacks name that function.
With OUT/hang-<index> present, that process stops in `wait_for_batch` after its third batch, and its peer waits for it
inside the next step's all-reduce. With OUT/linger present, each process writes OUT/trained-<index> once its model is
saved, and then waits in `linger_after_training` until it is stopped. With OUT/restart present, every process of the
launch's first attempt exits 3 at the end of its first epoch (BackupAndRestore has saved it); the next attempt resumes
from that backup.
"""

import os
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"
print("importing", flush=True)  # output at each stage: progress for --hang-timeout until the steps come

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

print("imported", flush=True)

model_dir, out, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
restart, attempt = os.path.exists(os.path.join(out, "restart")), int(os.environ.get("TPUCTL_ATTEMPT", "1"))

keras.distribution.initialize()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices(), auto_shard_dataset=False))
index = jax.process_index()
print(f"process {index} of {jax.process_count()} joined", flush=True)
if index != 0:
    model_dir = os.path.join(model_dir, f"workertemp_{index}")

rng = np.random.default_rng(index)
x = rng.normal(size=(64 * 50, 16)).astype("float32")
y = (x @ np.linspace(-1, 1, 16, dtype="float32")[:, None]).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")


def rest_between_steps():
    time.sleep(pause)


def wait_for_batch():
    time.sleep(600)


def linger_after_training():
    time.sleep(600)


class Until(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.end = time.time() + seconds
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches <= 3:
            print(f"process {index} batch {self.batches}", flush=True)
        if self.batches == 3 and not (restart and attempt == 1):
            with open(os.path.join(out, f"ready-{index}"), "w") as ready:
                ready.write(str(os.getpid()))
            if os.path.exists(os.path.join(out, f"hang-{index}")):
                wait_for_batch()
        rest_between_steps()
        # Every process stops at the same batch, decided together: each one's next step is a collective the others join.
        if self.batches % 10 == 0:
            told = os.path.exists(os.path.join(out, "stop")) or time.time() > self.end
            if multihost_utils.process_allgather(np.array([told])).any():
                self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if restart and attempt == 1:
            print(f"process {index} leaves attempt 1 after epoch {epoch}", flush=True)
            sys.exit(3)


callbacks = [
    keras.callbacks.TensorBoard(os.path.join(model_dir, "tb"), update_freq=5),
    keras.callbacks.BackupAndRestore(os.path.join(model_dir, "backup")),
    keras.callbacks.ModelCheckpoint(os.path.join(model_dir, "ckpt.weights.h5"), save_weights_only=True),
    Until(),
]
model.fit(x, y, batch_size=64, epochs=1000, callbacks=callbacks, verbose=0)
model.save(os.path.join(model_dir, "final.keras"))
trained = int(model.optimizer.iterations.numpy())
print(f"process {index} trained {trained} steps", flush=True)
if os.path.exists(os.path.join(out, "linger")):
    with open(os.path.join(out, f"trained-{index}"), "w") as done:
        done.write(str(trained))
    linger_after_training()
